import { LIMITS } from '../limits.js';
import { arrayOf, func, integer, validate } from '../validate.js';
import { frozenLayer, layerCheck } from './layer-check.js';
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
  validate(n, integer(0, LIMITS.repeat), ['repeat', 'n']);
  validate(make, func, ['repeat', 'make']);
  const children = Array.from({ length: n }, (_, i) => make(i));
  validate(children, arrayOf(layerCheck), ['repeat']);
  // Not seq(...children): a spread of this many arguments can overflow the stack.
  return Object.freeze({ kind: 'seq', className: 'Sequential', isSequential: true, children: Object.freeze(children.map((child) => frozenLayer(child))) });
}
