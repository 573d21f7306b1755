import { fail } from '../errors.js';
import { seq } from './seq.js';
import type { Layer, SeqLayer } from './types.js';

/**
 * `n` layers made by `make(i)`, in sequence (children `0` … `n-1`).
 *
 * @example
 * ```ts
 * import { estimate, linear, relu, repeat, seq } from 'vram-ts';
 * const mlp = repeat(3, () => seq(linear({ out: 16 }), relu()));
 * console.log(estimate(mlp, { input: [2, 16] }).params.total); // 3 * 272
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function repeat(n: number, make: (index: number) => Layer): SeqLayer {
  if (!Number.isSafeInteger(n) || n < 0)
    fail('bad-attribute', 'repeat needs a whole number of layers', { path: ['repeat'], expected: 'integer >= 0', received: String(n) });
  return seq(...Array.from({ length: n }, (_, i) => make(i)));
}
