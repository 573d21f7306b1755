import { adaptiveAvgPool2dOp, type AdaptiveAvgPool2dAttrs, ADAPTIVE_POOL2D_SCHEMA } from '../ops/pool2d.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Adaptive average pooling to a fixed output size (default 1×1), torch.nn.AdaptiveAvgPool2d.
 *
 * @example
 * ```ts
 * import { adaptiveAvgPool2d, estimate } from 'vram-ts';
 * console.log(estimate(adaptiveAvgPool2d(), { input: [2, 8, 7, 7] }).modules[0]?.outputShape); // [ 2, 8, 1, 1 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function adaptiveAvgPool2d(options: AdaptiveAvgPool2dAttrs & LayerOptions = {}): OpLayer<AdaptiveAvgPool2dAttrs> {
  const [attrs, layer] = splitOptions(options, ADAPTIVE_POOL2D_SCHEMA.fields, 'adaptiveAvgPool2d', ADAPTIVE_POOL2D_SCHEMA.required);
  return opLayer(adaptiveAvgPool2dOp, 'AdaptiveAvgPool2d', frozenAttrs(attrs), layer);
}
