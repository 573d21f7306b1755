import { castOp } from '../ops/cast.js';
import { offsetScaleOp, scaleOp } from '../ops/layerNorm.js';
import { mulOp } from '../ops/merge.js';
import { addScalarOp, meanOp, powOp, rsqrtOp } from '../ops/pointwise.js';
import { graph } from './graph.js';
import type { LayerOptions, ModuleLayer } from './types.js';
import { checkKeys } from './op.js';

/** Options of {@link rmsNorm}. */
export interface RmsNormOptions extends LayerOptions {
  readonly size: number;
  readonly eps?: number;
  /** Class shown in reports (default `LlamaRMSNorm`). */
  readonly className?: string;
  /**
   * Gemma's RMSNorm: the float32 normed tensor times `1 + weight` (a new float32 tensor at
   * every call), then cast back (`(x * w).to(dtype)` rather than Llama's `w * x.to(dtype)`).
   */
  readonly offset?: boolean;
}

/**
 * Hugging Face's RMSNorm, op for op: upcast to float32, `pow(2)`, `mean(-1)`, `+ eps`,
 * `rsqrt`, multiply, cast back, `weight *`. Autograd keeps the float32 input, x² (PyTorch
 * 1.13 only), rsqrt and the normalised tensor, so in 16-bit training the upcast copies count.
 * With `offset` (Gemma) the float32 normed tensor is scaled by `1 + weight` before the cast back.
 *
 * @example
 * ```ts
 * import { estimate, linear, rmsNorm, seq } from 'vram-ts';
 * const r = estimate(seq(linear({ out: 64 }), rmsNorm({ size: 64 })), { input: [1, 16, 64], loss: 'none' });
 * console.log(r.params.total); // 4160 + 64
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function rmsNorm(options: RmsNormOptions): ModuleLayer {
  checkKeys(options, ['size', 'eps', 'className', 'offset'], 'rmsNorm');
  const body = graph((g, [x]) => {
    const input = x!;
    const h = g.call(castOp, [input], { dtype: 'float32' })[0]!;
    const squared = g.call(powOp, [h], { exponent: 2 })[0]!;
    const variance = g.call(meanOp, [squared], { dim: -1, keepdim: true })[0]!;
    const shifted = g.call(addScalarOp, [variance], {})[0]!;
    const inverse = g.call(rsqrtOp, [shifted], {})[0]!;
    const normed = g.call(mulOp, [h, inverse], {})[0]!;
    if (options.offset === true) return g.call(castOp, [g.call(offsetScaleOp, [normed], { size: options.size })[0]!], { dtype: input.dtype })[0]!;
    const back = g.call(castOp, [normed], { dtype: input.dtype })[0]!;
    return g.call(scaleOp, [back], { size: options.size })[0]!;
  });
  return Object.freeze({ kind: 'module', className: options.className ?? 'LlamaRMSNorm', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}
