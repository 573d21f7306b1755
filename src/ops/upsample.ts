import type { Dim } from '../sym/expr.js';
import { add, mul, product } from '../sym/ops.js';
import { tensor } from '../tensor/spec.js';
import { boolean, intOrPair, oneOf } from '../validate.js';
import { expectRank } from './check.js';
import { attrsGuard, pairOf, type AttrSchema } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of torch.nn.Upsample / F.interpolate on [N, C, H, W]. */
export interface UpsampleAttrs {
  /** `nearest` (default) or `bilinear`. */
  readonly mode?: 'nearest' | 'bilinear';
  /** The output size [H, W] (or one number for both); give this or `scaleFactor`. */
  readonly size?: number | readonly [number, number];
  /** An integer factor (or [h, w] factors): the output is H·s × W·s. */
  readonly scaleFactor?: number | readonly [number, number];
  /** Bilinear's `align_corners` (memory is the same either way). */
  readonly alignCorners?: boolean;
}

/**
 * Upsample's attributes, as F.interpolate checks them: one of size and scaleFactor ("only one of
 * size or scale_factor should be defined"; "either size or scale_factor should be defined"),
 * integers >= 1 here; alignCorners only with bilinear ("align_corners option can only be set with
 * the interpolating modes").
 */
export const UPSAMPLE_SCHEMA: AttrSchema = {
  fields: { mode: oneOf(['nearest', 'bilinear'], 'mode'), size: intOrPair(1), scaleFactor: intOrPair(1), alignCorners: boolean },
  across: ({ mode, size, scaleFactor, alignCorners }, report) => {
    if (size !== undefined && scaleFactor !== undefined)
      report('scaleFactor', 'only one of size or scaleFactor should be defined', 'size or scaleFactor', scaleFactor);
    if (size === undefined && scaleFactor === undefined) report('size', 'either size or scaleFactor should be defined', 'size or scaleFactor', size);
    if (alignCorners !== undefined && (mode ?? 'nearest') !== 'bilinear')
      report('alignCorners', 'align_corners can only be set with the interpolating modes (bilinear)', "mode 'bilinear'", alignCorners);
  },
};

const upsampleAttrs = attrsGuard(UPSAMPLE_SCHEMA, true);

/**
 * upsample_nearest2d / upsample_bilinear2d: a new output, nothing saved (the backward needs only
 * the sizes), the input's gradient a new tensor. PyTorch 1.13's CPU kernels compute per output row
 * and column an int64 source index and a float32 weight (nearest: one of each, bilinear: two),
 * freed when they return (measured: 12 or 24 bytes per output row and column).
 */
export const upsampleOp: OpRule<UpsampleAttrs> = {
  name: 'upsample',
  arity: 1,
  apply([x], attrs, ctx) {
    upsampleAttrs(attrs, ctx);
    expectRank(x!, [4], ctx, 'upsample');
    const mode = attrs.mode ?? 'nearest';
    const [n, c, h, w] = x!.shape as [Dim, Dim, Dim, Dim];
    let ho: Dim;
    let wo: Dim;
    if (attrs.size !== undefined) [ho, wo] = pairOf(attrs.size, 1);
    else {
      const [sh, sw] = pairOf(attrs.scaleFactor, 1);
      [ho, wo] = [mul(h, sh), mul(w, sw)];
    }
    const perLine = mode === 'nearest' ? 12 : 24;
    const scratch = mul(add(ho, wo), perLine);
    return {
      outputs: [tensor([n, c, ho, wo], x!.dtype)],
      saves: () => [],
      forwardSteps: [{ results: 'outputs' }, { alloc: 'indices and weights', bytes: scratch }, { free: 'indices and weights' }],
      macs: () => product([n, c, ho, wo]),
    };
  },
};
