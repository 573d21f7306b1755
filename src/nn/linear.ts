import { linearOp, type LinearAttrs, LINEAR_SCHEMA } from '../ops/linear.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/** Options of {@link linear}. */
export type LinearOptions = LinearAttrs & LayerOptions;

/**
 * A fully connected layer over the last dimension (torch.nn.Linear).
 *
 * @example
 * ```ts
 * import { estimate, linear } from 'vram-ts';
 * console.log(estimate(linear({ out: 10 }), { input: [4, 32] }).params.total); // 330
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function linear(options: LinearOptions): OpLayer<LinearAttrs> {
  const [attrs, layer] = splitOptions(options, LINEAR_SCHEMA.fields, 'linear', LINEAR_SCHEMA.required);
  checkAcross(LINEAR_SCHEMA, attrs, ['linear']);
  return opLayer(linearOp, 'Linear', frozenAttrs(attrs), layer);
}
