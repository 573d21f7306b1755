import { stochasticDepthOp, type StochasticDepthAttrs, STOCHASTIC_DEPTH_SCHEMA } from '../ops/stochasticDepth.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * torchvision.ops.StochasticDepth (EfficientNet's and ConvNeXt's `stochastic_depth`): in
 * training, `input * noise` with a per-sample noise of shape [N, 1, 1, 1] (mode `row`), which
 * is all it keeps for backward; in eval it returns its input.
 *
 * @example
 * ```ts
 * import { estimate, stochasticDepth } from 'vram-ts';
 * // row mode keeps N floats: 4 samples · 4 B
 * console.log(estimate(stochasticDepth({ p: 0.2 }), { input: [4, 8, 5, 5], inputRequiresGrad: true }).bytes.activations); // 16
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function stochasticDepth(options: StochasticDepthAttrs & LayerOptions): OpLayer<StochasticDepthAttrs> {
  const [attrs, layer] = splitOptions(options, STOCHASTIC_DEPTH_SCHEMA.fields, 'stochasticDepth', STOCHASTIC_DEPTH_SCHEMA.required);
  return opLayer(stochasticDepthOp, 'StochasticDepth', frozenAttrs(attrs), layer);
}
