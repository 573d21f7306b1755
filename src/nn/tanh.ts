import { ACTIVATION_SCHEMAS, activationOp, type ActivationAttrs } from '../ops/activation.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

const rule = activationOp('tanh');

/**
 * The Tanh activation (torch.nn.Tanh).
 *
 * @example
 * ```ts
 * import { tanh, estimate } from 'vram-ts';
 * const r = estimate(tanh(), { input: [1, 8, 4, 4], inputRequiresGrad: true });
 * console.log(r.bytes.activations); // 512
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function tanh(options: Record<never, never> & LayerOptions = {}): OpLayer<ActivationAttrs> {
  const [attrs, layer] = splitOptions(options, ACTIVATION_SCHEMAS.tanh.fields, 'tanh');
  return opLayer(rule, 'Tanh', frozenAttrs(attrs), layer);
}
