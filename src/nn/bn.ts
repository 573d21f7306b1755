import { batchNorm2dOp, type BatchNorm2dAttrs, BATCH_NORM2D_SCHEMA } from '../ops/batchnorm2d.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/** Options of {@link bn}. */
export type BatchNorm2dOptions = BatchNorm2dAttrs & LayerOptions;

/**
 * BatchNorm2d over the channels of its input (torch.nn.BatchNorm2d).
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, seq } from 'vram-ts';
 * const r = estimate(seq(conv2d({ out: 8, kernel: 1, bias: false }), bn()), { input: [2, 3, 8, 8] });
 * console.log(r.params.total); // 24 + 16
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function bn(options: BatchNorm2dOptions = {}): OpLayer<BatchNorm2dAttrs> {
  const [attrs, layer] = splitOptions(options, BATCH_NORM2D_SCHEMA.fields, 'bn', BATCH_NORM2D_SCHEMA.required);
  return opLayer(batchNorm2dOp, 'BatchNorm2d', frozenAttrs(attrs), layer);
}
