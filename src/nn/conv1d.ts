import { conv1dOp, type Conv1dAttrs, CONV1D_SCHEMA } from '../ops/conv1d.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/** Options of {@link conv1d}: torch.nn.Conv1d's arguments (in-channels inferred) and a name. */
export type Conv1dOptions = Conv1dAttrs & LayerOptions;

/**
 * A 1-D convolution (torch.nn.Conv1d) over [N, C, L]: PyTorch runs it as a 2-D convolution of
 * height 1, and so does the estimate.
 *
 * @example
 * ```ts
 * import { conv1d, estimate } from 'vram-ts';
 * const r = estimate(conv1d({ out: 32, kernel: 3, padding: 1 }), { input: [2, 16, 50] });
 * console.log(r.params.total, r.modules[0]?.outputShape); // 1568 [ 2, 32, 50 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function conv1d(options: Conv1dOptions): OpLayer<Conv1dAttrs> {
  const [attrs, layer] = splitOptions(options, CONV1D_SCHEMA.fields, 'conv1d', CONV1D_SCHEMA.required);
  checkAcross(CONV1D_SCHEMA, attrs, ['conv1d']);
  return opLayer(conv1dOp, 'Conv1d', frozenAttrs(attrs), layer);
}
