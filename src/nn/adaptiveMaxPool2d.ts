import { adaptiveMaxPool2dOp, type AdaptiveMaxPool2dAttrs, ADAPTIVE_POOL2D_SCHEMA } from '../ops/pool2d.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Adaptive max pooling to a fixed output size (default 1×1), torch.nn.AdaptiveMaxPool2d. Training
 * keeps the input and the int64 indices of the maxima.
 *
 * @example
 * ```ts
 * import { adaptiveMaxPool2d, estimate } from 'vram-ts';
 * // input 2·8·7·7·4 B = 3136 B, plus indices 2·8·1·1·8 B = 128 B
 * console.log(estimate(adaptiveMaxPool2d(), { input: [2, 8, 7, 7], inputRequiresGrad: true }).bytes.activations); // 3264
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function adaptiveMaxPool2d(options: AdaptiveMaxPool2dAttrs & LayerOptions = {}): OpLayer<AdaptiveMaxPool2dAttrs> {
  const [attrs, layer] = splitOptions(options, ADAPTIVE_POOL2D_SCHEMA.fields, 'adaptiveMaxPool2d', ADAPTIVE_POOL2D_SCHEMA.required);
  return opLayer(adaptiveMaxPool2dOp, 'AdaptiveMaxPool2d', frozenAttrs(attrs), layer);
}
