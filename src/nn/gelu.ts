import { ACTIVATION_SCHEMAS, activationOp, type ActivationAttrs } from '../ops/activation.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

const rule = activationOp('gelu');

/**
 * The GELU activation (torch.nn.GELU), exact (`'none'`) or tanh-approximated; saves its input.
 *
 * @example
 * ```ts
 * import { estimate, gelu } from 'vram-ts';
 * console.log(estimate(gelu({ approximate: 'tanh' }), { input: [1, 8, 4, 4], inputRequiresGrad: true }).bytes.activations); // 512
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function gelu(options: { readonly approximate?: 'none' | 'tanh' } & LayerOptions = {}): OpLayer<ActivationAttrs> {
  const [attrs, layer] = splitOptions(options, ACTIVATION_SCHEMAS.gelu.fields, 'gelu');
  return opLayer(rule, 'GELU', frozenAttrs(attrs), layer);
}
