import { identityOp } from '../ops/shape.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

const NO_ATTRS: Record<string, never> = Object.freeze({});

/**
 * nn.Identity: passes its input through, keeping nothing.
 *
 * @example
 * ```ts
 * import { estimate, identity } from 'vram-ts';
 * console.log(estimate(identity(), { input: [1, 3] }).bytes.activations); // 0
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function identity(options: LayerOptions = {}): OpLayer<Record<string, never>> {
  const [, layer] = splitOptions(options, {}, 'identity');
  return opLayer(identityOp, 'Identity', NO_ATTRS, layer);
}
