import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { activationOp, type ActivationKind } from '../ops/activation.js';
import { addOp, mulOp } from '../ops/merge.js';
import { addScalarOp, mulScalarOp, powOp } from '../ops/pointwise.js';
import { graph } from './graph.js';
import { module } from './module.js';
import { anyOf, arrayOf, integer, show, string, validate } from '../validate.js';
import { moduleName, opLayer } from './op.js';
import type { Layer } from './types.js';

const configPath = arrayOf(anyOf([string, integer(0)], 'a key or an index'));

/** Activation names of Hugging Face's `ACT2FN` that vram-ts models (config `hidden_act` / `activation_function`). */
export const HF_ACTIVATIONS = deepFreeze(['silu', 'swish', 'gelu', 'gelu_new', 'gelu_pytorch_tanh', 'quick_gelu', 'relu', 'relu6', 'sigmoid', 'tanh'] as const);

/** One of {@link HF_ACTIVATIONS}. */
export type HFActivation = (typeof HF_ACTIVATIONS)[number];

/** NewGELUActivation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), op by op (it keeps four tensors). */
function newGelu(name: string): Layer {
  const tanh = activationOp('tanh');
  return module(
    name,
    'NewGELUActivation',
    graph((g, [x]) => {
      const half = g.call(mulScalarOp, [x!], {})[0]!;
      const cube = g.call(powOp, [x!], { exponent: 3 })[0]!;
      const scaled = g.call(mulScalarOp, [cube], {})[0]!;
      const inner = g.call(addOp, [x!, scaled], {})[0]!;
      const arg = g.call(mulScalarOp, [inner], {})[0]!;
      const t = g.call(tanh, [arg], {})[0]!;
      const onePlus = g.call(addScalarOp, [t], {})[0]!;
      return g.call(mulOp, [half, onePlus], {})[0]!;
    }),
  );
}

/** QuickGELUActivation: x·sigmoid(1.702·x). */
function quickGelu(name: string): Layer {
  const sigmoid = activationOp('sigmoid');
  return module(
    name,
    'QuickGELUActivation',
    graph((g, [x]) => {
      const scaled = g.call(mulScalarOp, [x!], {})[0]!;
      const gate = g.call(sigmoid, [scaled], {})[0]!;
      return g.call(mulOp, [x!, gate], {})[0]!;
    }),
  );
}

const BUILTIN: Readonly<Record<string, readonly [ActivationKind, string, 'none' | 'tanh' | undefined]>> = {
  silu: ['silu', 'SiLU', undefined],
  swish: ['silu', 'SiLU', undefined],
  gelu: ['gelu', 'GELUActivation', 'none'],
  gelu_pytorch_tanh: ['gelu', 'PytorchGELUTanh', 'tanh'],
  relu: ['relu', 'ReLU', undefined],
  relu6: ['relu6', 'ReLU6', undefined],
  sigmoid: ['sigmoid', 'Sigmoid', undefined],
  tanh: ['tanh', 'Tanh', undefined],
};

/**
 * The module `ACT2FN[name]` makes in Hugging Face transformers, as the layer `name` (for
 * example a decoder MLP's `act_fn`): torch's fused activations keep one tensor, the ones
 * written as Python formulas (`gelu_new`, `quick_gelu`) keep each intermediate they need.
 * Unknown names are a VramError (at `path`, the config key) listing the modelled ones.
 *
 * @example
 * ```ts
 * import { estimate, hfActivation } from 'vram-ts';
 * const act = hfActivation('gelu_new', 'act');
 * console.log(estimate(act, { input: [1, 8], inputRequiresGrad: true, loss: 'none' }).bytes.activations); // 128 + 8 + 8 + 8
 * ```
 */
export function hfActivation(kind: string, name: string, path: readonly (string | number)[] = ['hidden_act']): Layer {
  validate(name, moduleName, ['hfActivation', 'name']);
  validate(path, configPath, ['hfActivation', 'path']);
  if (typeof kind !== 'string')
    return fail('unsupported-activation', 'an activation name is a string', { path, expected: HF_ACTIVATIONS.join(' | '), received: show(kind) });
  if (kind === 'gelu_new') return newGelu(name);
  if (kind === 'quick_gelu') return quickGelu(name);
  const builtin = Object.hasOwn(BUILTIN, kind) ? BUILTIN[kind] : undefined;
  if (builtin === undefined)
    return fail('unsupported-activation', 'activation not modelled', { path, expected: HF_ACTIVATIONS.join(' | '), received: show(kind) });
  const [rule, className, approximate] = builtin;
  return opLayer(activationOp(rule), className, Object.freeze(approximate === undefined ? {} : { approximate }), { name });
}
