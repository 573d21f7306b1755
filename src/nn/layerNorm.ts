import { layerNormOp, type LayerNormAttrs } from '../ops/layerNorm.js';
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
  const [attrs, layer] = splitOptions(options, ['eps', 'elementwiseAffine', 'bias', 'size'], 'layerNorm');
  return opLayer(layerNormOp, 'LayerNorm', attrs, layer);
}
