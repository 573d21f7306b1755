import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { number, oneOf } from '../validate.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of torchvision.ops.StochasticDepth. */
export interface StochasticDepthAttrs {
  /** Probability of zeroing a row (or the whole batch). */
  readonly p: number;
  /** `row`: one draw per sample ([N, 1, …, 1] noise); `batch`: one draw for the batch ([1, …, 1]). */
  readonly mode?: 'row' | 'batch';
}

/**
 * StochasticDepth's attributes, as torchvision checks them: p in [0, 1] ("drop probability has to
 * be between 0 and 1"), required; mode row or batch ("mode has to be either 'batch' or 'row'").
 */
export const STOCHASTIC_DEPTH_SCHEMA: AttrSchema = { fields: { p: number(0, 1), mode: oneOf(['row', 'batch'], 'mode') }, required: ['p'] };

const stochasticDepthAttrs = attrsGuard(STOCHASTIC_DEPTH_SCHEMA, true);

/**
 * torchvision.ops.stochastic_depth: in eval mode or with p = 0 it returns its input. In training
 * it draws `noise = empty(size).bernoulli_(1 − p)`, divides it in place by 1 − p and returns
 * `input * noise`, whose autograd node keeps only the noise (the other factor of a product).
 *
 * @example
 * ```ts
 * import { estimate, graph } from 'vram-ts';
 * import { stochasticDepthOp } from 'vram-ts/internals';
 * const sd = graph((g, [x]) => g.call(stochasticDepthOp, [x!], { p: 0.1 })[0]!);
 * console.log(estimate(sd, { input: [8, 16, 4, 4], inputRequiresGrad: true }).bytes.activations); // 32
 * ```
 */
export const stochasticDepthOp: OpRule<StochasticDepthAttrs> = {
  name: 'stochastic_depth',
  arity: 1,
  apply([input], attrs, ctx) {
    stochasticDepthAttrs(attrs, ctx);
    const p = attrs.p;
    const mode = attrs.mode ?? 'row';
    if (!ctx.training || p === 0) return { outputs: [input!], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
    const shape: Dim[] = input!.shape.map((d, i) => (i === 0 && mode === 'row' ? d : 1));
    const noise = tensor(shape, input!.dtype);
    return {
      outputs: [tensor(input!.shape, input!.dtype)],
      saves: () => [{ extra: noise, label: 'noise' }],
      forwardStepsUnrecorded: [{ alloc: 'noise', bytes: specBytes(noise) }, { results: 'outputs' }, { free: 'noise' }],
    };
  },
};
