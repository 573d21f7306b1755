import { ACTIVATION_SCHEMAS, activationOp, type ActivationAttrs } from '../ops/activation.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

const rule = activationOp('sigmoid');

/**
 * The Sigmoid activation (torch.nn.Sigmoid).
 *
 * @example
 * ```ts
 * import { sigmoid, estimate } from 'vram-ts';
 * const r = estimate(sigmoid(), { input: [1, 8, 4, 4], inputRequiresGrad: true });
 * console.log(r.bytes.activations); // 512
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function sigmoid(options: Record<never, never> & LayerOptions = {}): OpLayer<ActivationAttrs> {
  const [attrs, layer] = splitOptions(options, ACTIVATION_SCHEMAS.sigmoid.fields, 'sigmoid');
  return opLayer(rule, 'Sigmoid', frozenAttrs(attrs), layer);
}
