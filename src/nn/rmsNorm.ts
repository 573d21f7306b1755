import { castOp } from '../ops/cast.js';
import { offsetScaleOp, scaleOp } from '../ops/layerNorm.js';
import { mulOp } from '../ops/merge.js';
import { addScalarOp, meanOp, powOp, rsqrtOp } from '../ops/pointwise.js';
import { graph } from './graph.js';
import { boolean, integer, number, show, type Check } from '../validate.js';
import type { LayerOptions, ModuleLayer } from './types.js';
import { checkOptions, type Fields } from './op.js';

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

const className: Check = (value, path, issues) => {
  if (typeof value !== 'string' || value === '')
    issues.push({ path, code: 'bad-option', message: 'a class name is a non-empty string', expected: 'string', received: show(value) });
};

/** rmsNorm's schema: size (the hidden size, required) >= 1, eps >= 0, a class name, offset a boolean. */
const RMS_NORM_FIELDS: Fields = { size: integer(1), eps: number(0), className, offset: boolean };

/**
 * Hugging Face's RMSNorm, op for op: upcast to float32, `pow(2)`, `mean(-1)`, `+ eps`,
 * `rsqrt`, multiply, cast back, `weight *`. Autograd keeps the float32 input, x² (PyTorch
 * 1.13 only), rsqrt and the normalised tensor, so in 16-bit training the upcast copies count.
 * With `offset` (Gemma) the float32 normed tensor is scaled by `1 + weight` before the cast back.
 * A `size` other than the input's last dimension is an error at estimate (at the weight's `size`).
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
  checkOptions(options, RMS_NORM_FIELDS, 'rmsNorm', ['size']);
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
