import { dropoutOp, type DropoutAttrs, DROPOUT_SCHEMA } from '../ops/dropout.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Dropout (torch.nn.Dropout, p defaults to 0.5). In training it keeps a mask for backward:
 * 1 byte per element on CUDA's fused path, the input's dtype on CPU or in place.
 *
 * @example
 * ```ts
 * import { dropout, estimate } from 'vram-ts';
 * // CUDA's fused kernel keeps a bool mask: 1 byte per element
 * console.log(estimate(dropout({ p: 0.2 }), { input: [1, 1024], inputRequiresGrad: true }).bytes.activations); // 1024
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function dropout(options: DropoutAttrs & LayerOptions = {}): OpLayer<DropoutAttrs> {
  const [attrs, layer] = splitOptions(options, DROPOUT_SCHEMA.fields, 'dropout', DROPOUT_SCHEMA.required);
  return opLayer(dropoutOp, 'Dropout', frozenAttrs(attrs), layer);
}
