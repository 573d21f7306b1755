import { avgPool2dOp, type Pool2dAttrs, AVG_POOL2D_SCHEMA } from '../ops/pool2d.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Average pooling over windows (torch.nn.AvgPool2d; stride defaults to the kernel; no dilation,
 * as torch's takes none).
 *
 * @example
 * ```ts
 * import { avgPool2d, estimate } from 'vram-ts';
 * console.log(estimate(avgPool2d({ kernel: 2 }), { input: [1, 4, 8, 8] }).modules[0]?.outputShape); // [ 1, 4, 4, 4 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function avgPool2d(options: Omit<Pool2dAttrs, 'dilation'> & LayerOptions): OpLayer<Pool2dAttrs> {
  const [attrs, layer] = splitOptions(options, AVG_POOL2D_SCHEMA.fields, 'avgPool2d', AVG_POOL2D_SCHEMA.required);
  checkAcross(AVG_POOL2D_SCHEMA, attrs, ['avgPool2d']);
  return opLayer(avgPool2dOp, 'AvgPool2d', frozenAttrs(attrs), layer);
}
