import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { add, mul, product } from '../sym/ops.js';
import { tensor } from '../tensor/spec.js';
import { expectRank } from './check.js';
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
 * upsample_nearest2d / upsample_bilinear2d: a new output, nothing saved (the backward needs only
 * the sizes), the input's gradient a new tensor. PyTorch 1.13's CPU kernels compute per output row
 * and column an int64 source index and a float32 weight (nearest: one of each, bilinear: two),
 * freed when they return (measured: 12 or 24 bytes per output row and column).
 */
export const upsampleOp: OpRule<UpsampleAttrs> = {
  name: 'upsample',
  arity: 1,
  apply([x], attrs, ctx) {
    expectRank(x!, [4], ctx, 'upsample');
    const mode = attrs.mode ?? 'nearest';
    if (mode !== 'nearest' && mode !== 'bilinear')
      fail('bad-attribute', 'upsample mode must be nearest or bilinear', {
        path: [...ctx.path, 'mode'],
        expected: "'nearest' | 'bilinear'",
        received: String(mode),
      });
    const [n, c, h, w] = x!.shape as [Dim, Dim, Dim, Dim];
    let ho: Dim;
    let wo: Dim;
    const pair = (v: number | readonly [number, number]): readonly [number, number] => (typeof v === 'number' ? [v, v] : v);
    const positive = (v: readonly [number, number], name: string) => {
      if (!v.every((d) => Number.isSafeInteger(d) && d >= 1))
        fail('bad-attribute', `upsample ${name} takes integers >= 1`, {
          path: [...ctx.path, name],
          expected: 'an integer >= 1 or [h, w]',
          received: JSON.stringify(v),
        });
      return v;
    };
    if ((attrs.size === undefined) === (attrs.scaleFactor === undefined))
      fail('bad-attribute', 'upsample takes one of size and scaleFactor', { path: ctx.path, expected: 'size or scaleFactor' });
    if (attrs.size !== undefined) [ho, wo] = positive(pair(attrs.size), 'size');
    else {
      const [sh, sw] = positive(pair(attrs.scaleFactor!), 'scaleFactor');
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
