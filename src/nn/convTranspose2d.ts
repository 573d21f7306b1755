import { convTranspose2dOp, type ConvTranspose2dAttrs, CONV_TRANSPOSE2D_SCHEMA } from '../ops/convTranspose2d.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/** Options of {@link convTranspose2d}: torch.nn.ConvTranspose2d's arguments (in-channels inferred) and a name. */
export type ConvTranspose2dOptions = ConvTranspose2dAttrs & LayerOptions;

/**
 * A transposed 2-D convolution (torch.nn.ConvTranspose2d), a UNet decoder's up-convolution.
 *
 * @example
 * ```ts
 * import { convTranspose2d, estimate } from 'vram-ts';
 * const r = estimate(convTranspose2d({ out: 64, kernel: 2, stride: 2 }), { input: [1, 128, 28, 28] });
 * console.log(r.params.total, r.modules[0]?.outputShape); // 32832 [ 1, 64, 56, 56 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function convTranspose2d(options: ConvTranspose2dOptions): OpLayer<ConvTranspose2dAttrs> {
  const [attrs, layer] = splitOptions(options, CONV_TRANSPOSE2D_SCHEMA.fields, 'convTranspose2d', CONV_TRANSPOSE2D_SCHEMA.required);
  checkAcross(CONV_TRANSPOSE2D_SCHEMA, attrs, ['convTranspose2d']);
  return opLayer(convTranspose2dOp, 'ConvTranspose2d', frozenAttrs(attrs), layer);
}
