import { ACTIVATION_SCHEMAS, activationOp, type ActivationAttrs } from '../ops/activation.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

const rule = activationOp('relu');

/**
 * The ReLU activation (torch.nn.ReLU). `inplace` overwrites the input as torch's `inplace=True` does; see the op rule for what autograd then keeps.
 *
 * @example
 * ```ts
 * import { relu, estimate } from 'vram-ts';
 * const r = estimate(relu(), { input: [1, 8, 4, 4], inputRequiresGrad: true });
 * console.log(r.bytes.activations); // 512
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function relu(options: { readonly inplace?: boolean } & LayerOptions = {}): OpLayer<ActivationAttrs> {
  const [attrs, layer] = splitOptions(options, ACTIVATION_SCHEMAS.relu.fields, 'relu');
  return opLayer(rule, 'ReLU', frozenAttrs(attrs), layer);
}
