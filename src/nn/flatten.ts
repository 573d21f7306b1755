import { flattenOp, type FlattenAttrs, FLATTEN_SCHEMA } from '../ops/shape.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Flattens dimensions `startDim..endDim` (default 1..-1) into one: a view, no memory.
 * As a module it is nn.Flatten; wrap in {@link functional} for `torch.flatten(x, 1)`.
 *
 * @example
 * ```ts
 * import { estimate, flatten, linear, seq } from 'vram-ts';
 * console.log(estimate(seq(flatten(), linear({ out: 2 })), { input: [1, 4, 2, 2] }).params.total); // 34
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function flatten(options: FlattenAttrs & LayerOptions = {}): OpLayer<FlattenAttrs> {
  const [attrs, layer] = splitOptions(options, FLATTEN_SCHEMA.fields, 'flatten', FLATTEN_SCHEMA.required);
  checkAcross(FLATTEN_SCHEMA, attrs, ['flatten']);
  return opLayer(flattenOp, 'Flatten', frozenAttrs(attrs), layer);
}
