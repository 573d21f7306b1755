import { conv2dOp, type Conv2dAttrs, CONV2D_SCHEMA } from '../ops/conv2d.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/** Options of {@link conv2d}: torch.nn.Conv2d's arguments (in-channels inferred) and a name. */
export type Conv2dOptions = Conv2dAttrs & LayerOptions;

/**
 * A 2-D convolution (torch.nn.Conv2d). Input channels come from the input;
 * `padding` takes a number, a pair, `'same'` or `'valid'`.
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, hardswish, seq } from 'vram-ts';
 * const stem = seq(conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }), bn(), hardswish());
 * console.log(estimate(stem, { input: [1, 3, 224, 224] }).params.total); // 464
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function conv2d(options: Conv2dOptions): OpLayer<Conv2dAttrs> {
  const [attrs, layer] = splitOptions(options, CONV2D_SCHEMA.fields, 'conv2d', CONV2D_SCHEMA.required);
  checkAcross(CONV2D_SCHEMA, attrs, ['conv2d']);
  return opLayer(conv2dOp, 'Conv2d', frozenAttrs(attrs), layer);
}
