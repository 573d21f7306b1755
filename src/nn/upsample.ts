import { upsampleOp, type UpsampleAttrs, UPSAMPLE_SCHEMA } from '../ops/upsample.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * torch.nn.Upsample (nearest or bilinear, by an integer factor or to a size): keeps nothing for
 * backward. A module, with its own row in reports; not an alias of {@link interpolate}, which is
 * the same resize as a functional call.
 *
 * @example
 * ```ts
 * import { estimate, upsample } from 'vram-ts';
 * const r = estimate(upsample({ scaleFactor: 2, mode: 'bilinear' }), { input: [2, 8, 10, 12], inputRequiresGrad: true });
 * console.log(r.modules[0]?.outputShape, r.bytes.activations); // [ 2, 8, 20, 24 ] 0
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function upsample(options: UpsampleAttrs & LayerOptions): OpLayer<UpsampleAttrs> {
  const [attrs, layer] = splitOptions(options, UPSAMPLE_SCHEMA.fields, 'upsample', UPSAMPLE_SCHEMA.required);
  checkAcross(UPSAMPLE_SCHEMA, attrs, ['upsample']);
  return opLayer(upsampleOp, 'Upsample', frozenAttrs(attrs), layer);
}

/**
 * `F.interpolate(x, size=…, scale_factor=…, mode=…, align_corners=…)`: {@link upsample}'s resize
 * as a functional call. Not an alias: no module, so no row of its own in reports (the enclosing
 * module's row counts it).
 *
 * @example
 * ```ts
 * import { interpolate } from 'vram-ts';
 * console.log(interpolate({ size: [17, 23], mode: 'bilinear', alignCorners: true }).className); // null
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function interpolate(options: UpsampleAttrs): OpLayer<UpsampleAttrs> {
  const [attrs, layer] = splitOptions(options as UpsampleAttrs & LayerOptions, UPSAMPLE_SCHEMA.fields, 'interpolate', UPSAMPLE_SCHEMA.required);
  checkAcross(UPSAMPLE_SCHEMA, attrs, ['interpolate']);
  return opLayer(upsampleOp, null, frozenAttrs(attrs), layer);
}
