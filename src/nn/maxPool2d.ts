import { maxPool2dOp, type Pool2dAttrs, MAX_POOL2D_SCHEMA } from '../ops/pool2d.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Max pooling (torch.nn.MaxPool2d). Training keeps the input and int64 indices of the maxima.
 *
 * @example
 * ```ts
 * import { estimate, maxPool2d } from 'vram-ts';
 * // input 1·4·8·8·4 B = 1024 B, plus indices 1·4·4·4·8 B = 512 B
 * console.log(estimate(maxPool2d({ kernel: 2 }), { input: [1, 4, 8, 8], inputRequiresGrad: true }).bytes.activations); // 1536
 * ```
 *
 * @example
 * ```ts
 * import { estimate, maxPool2d } from 'vram-ts';
 * // SqueezeNet's MaxPool2d(3, 2, ceil_mode=True): 56 → 28 (floor mode: 27)
 * console.log(estimate(maxPool2d({ kernel: 3, stride: 2, ceilMode: true }), { input: [1, 64, 56, 56] }).modules[0]?.outputShape); // [ 1, 64, 28, 28 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function maxPool2d(options: Pool2dAttrs & LayerOptions): OpLayer<Pool2dAttrs> {
  const [attrs, layer] = splitOptions(options, MAX_POOL2D_SCHEMA.fields, 'maxPool2d', MAX_POOL2D_SCHEMA.required);
  checkAcross(MAX_POOL2D_SCHEMA, attrs, ['maxPool2d']);
  return opLayer(maxPool2dOp, 'MaxPool2d', frozenAttrs(attrs), layer);
}
