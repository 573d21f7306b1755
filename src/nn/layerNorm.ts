import { layerNormOp, type LayerNormAttrs, LAYER_NORM_SCHEMA } from '../ops/layerNorm.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * LayerNorm over the last dimension (torch.nn.LayerNorm): keeps its input and the per-row
 * mean and rstd for backward.
 *
 * @example
 * ```ts
 * import { estimate, layerNorm, linear, seq } from 'vram-ts';
 * const r = estimate(seq(linear({ out: 64 }), layerNorm()), { input: [2, 8, 32], loss: 'none' });
 * console.log(r.params.total); // 2112 + 128
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function layerNorm(options: LayerNormAttrs & LayerOptions = {}): OpLayer<LayerNormAttrs> {
  const [attrs, layer] = splitOptions(options, LAYER_NORM_SCHEMA.fields, 'layerNorm', LAYER_NORM_SCHEMA.required);
  return opLayer(layerNormOp, 'LayerNorm', frozenAttrs(attrs), layer);
}
