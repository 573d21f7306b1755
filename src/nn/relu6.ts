import { ACTIVATION_SCHEMAS, activationOp, type ActivationAttrs } from '../ops/activation.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

const rule = activationOp('relu6');

/**
 * The ReLU6 activation (torch.nn.ReLU6). `inplace` overwrites the input as torch's `inplace=True` does; see the op rule for what autograd then keeps.
 *
 * @example
 * ```ts
 * import { relu6, estimate } from 'vram-ts';
 * const r = estimate(relu6(), { input: [1, 8, 4, 4], inputRequiresGrad: true });
 * console.log(r.bytes.activations); // 512
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function relu6(options: { readonly inplace?: boolean } & LayerOptions = {}): OpLayer<ActivationAttrs> {
  const [attrs, layer] = splitOptions(options, ACTIVATION_SCHEMAS.relu6.fields, 'relu6');
  return opLayer(rule, 'ReLU6', frozenAttrs(attrs), layer);
}
