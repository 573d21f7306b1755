import { layerNorm2dOp, type LayerNorm2dAttrs, LAYER_NORM2D_SCHEMA } from '../ops/layerNorm2d.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * LayerNorm over the channels of [N, C, H, W], as torchvision's LayerNorm2d (ConvNeXt's stem and
 * downsampling) runs it: permute to channels-last, `F.layer_norm`, permute back.
 *
 * @example
 * ```ts
 * import { estimate, layerNorm2d } from 'vram-ts';
 * const r = estimate(layerNorm2d(), { input: [2, 16, 8, 10], inputRequiresGrad: true });
 * // the input (10240 B) and a mean and rstd per position (640 B each)
 * console.log(r.params.total, r.bytes.activations); // 32 11520
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function layerNorm2d(options: LayerNorm2dAttrs & LayerOptions = {}): OpLayer<LayerNorm2dAttrs> {
  const [attrs, layer] = splitOptions(options, LAYER_NORM2D_SCHEMA.fields, 'layerNorm2d', LAYER_NORM2D_SCHEMA.required);
  return opLayer(layerNorm2dOp, 'LayerNorm2d', frozenAttrs(attrs), layer);
}
