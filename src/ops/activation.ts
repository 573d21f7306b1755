import { tensor } from '../tensor/spec.js';
import { fail } from '../errors.js';
import { boolean, oneOf, show } from '../validate.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule, SavedRef } from './types.js';

/** Attributes shared by elementwise activations. */
export interface ActivationAttrs {
  readonly inplace?: boolean;
  /** gelu only: `'none'` (erf) or `'tanh'`. */
  readonly approximate?: 'none' | 'tanh';
}

/**
 * What autograd keeps for one activation, per PyTorch 1.13 measurements
 * (../shared/reference/pytorch_saved_per_op.json): `input` or `output` when run out of
 * place; in place, `output` means the result (the input's own storage) and `clone`
 * means autograd keeps a copy of the original input, so in-place saves no memory.
 */
interface ActivationSaving {
  readonly outOfPlace: 'input' | 'output';
  readonly inPlace: 'output' | 'clone' | null;
}

const SAVING: Readonly<Record<string, ActivationSaving>> = {
  relu: { outOfPlace: 'output', inPlace: 'output' },
  relu6: { outOfPlace: 'input', inPlace: 'clone' },
  hardswish: { outOfPlace: 'input', inPlace: 'clone' },
  hardsigmoid: { outOfPlace: 'input', inPlace: 'clone' },
  sigmoid: { outOfPlace: 'output', inPlace: 'output' },
  tanh: { outOfPlace: 'output', inPlace: 'output' },
  silu: { outOfPlace: 'input', inPlace: 'clone' },
  gelu: { outOfPlace: 'input', inPlace: null },
};

/** An activation's attributes: `inplace` where torch's module takes it, `approximate` (none | tanh, F.gelu's) for gelu. */
export const ACTIVATION_SCHEMAS: Readonly<Record<ActivationKind, AttrSchema>> = {
  relu: { fields: { inplace: boolean } },
  relu6: { fields: { inplace: boolean } },
  hardswish: { fields: { inplace: boolean } },
  hardsigmoid: { fields: { inplace: boolean } },
  silu: { fields: { inplace: boolean } },
  sigmoid: { fields: {} },
  tanh: { fields: {} },
  gelu: { fields: { approximate: oneOf(['none', 'tanh'], 'approximation') } },
};

/** The activation kinds with a saved-tensor rule. */
export type ActivationKind = 'relu' | 'relu6' | 'hardswish' | 'hardsigmoid' | 'sigmoid' | 'tanh' | 'silu' | 'gelu';

/**
 * The rule of one elementwise activation, for graph layers that call it functionally.
 *
 * @example
 * ```ts
 * import { estimate, graph } from 'vram-ts';
 * import { activationOp } from 'vram-ts/internals';
 * const act = graph((g, [x]) => g.call(activationOp('silu'), [x!], {})[0]!);
 * console.log(estimate(act, { input: [1, 256], inputRequiresGrad: true }).bytes.activations); // 1024
 * ```
 */
export function activationOp(kind: ActivationKind): OpRule<ActivationAttrs> {
  if (!Object.hasOwn(SAVING, kind))
    fail('unsupported-activation', 'activation not modelled', { path: ['activationOp'], expected: Object.keys(SAVING).join(' | '), received: show(kind) });
  const saving = SAVING[kind]!;
  const check = attrsGuard(ACTIVATION_SCHEMAS[kind]);
  return {
    name: kind,
    arity: 1,
    apply([input], attrs, ctx) {
      check(attrs, ctx);
      const inplace = (attrs.inplace ?? false) && saving.inPlace !== null;
      const out = tensor(input!.shape, input!.dtype);
      let saved: SavedRef;
      if (!inplace) saved = saving.outOfPlace === 'input' ? { input: 0 } : { output: 0 };
      else saved = saving.inPlace === 'output' ? { output: 0 } : { extra: out, label: 'original input' };
      return {
        outputs: [out],
        ...(inplace ? { alias: 'inplace' as const } : {}),
        saves: () => [saved],
      };
    },
  };
}
