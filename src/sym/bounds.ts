import { dimArg, isDim } from './args.js';
import type { Atom, Dim, Expr } from './expr.js';

/** The range a dimension can take under its symbols' assumptions; `max` may be `Infinity`. */
export interface Bounds {
  readonly min: number;
  readonly max: number;
}

function mulBounds(a: Bounds, b: Bounds): Bounds {
  const products = [a.min * b.min, a.min * b.max, a.max * b.min, a.max * b.max].map((p) => (Number.isNaN(p) ? 0 : p));
  return { min: Math.min(...products), max: Math.max(...products) };
}

function powBounds(base: Bounds, power: number): Bounds {
  let result: Bounds = { min: 1, max: 1 };
  for (let i = 0; i < power; i += 1) result = mulBounds(result, base);
  return result;
}

function atomBounds(atom: Atom): Bounds {
  switch (atom.kind) {
    case 'sym': {
      const step = atom.multipleOf ?? 1;
      const min = Math.ceil(atom.min / step) * step;
      const max = atom.max === undefined ? Infinity : Math.floor(atom.max / step) * step;
      return { min, max };
    }
    case 'floorDiv': {
      const inner = bounds(atom.num);
      return { min: Math.floor(inner.min / atom.den), max: Math.floor(inner.max / atom.den) };
    }
    case 'max': {
      const all = atom.args.map(bounds);
      return { min: Math.max(...all.map((b) => b.min)), max: Math.max(...all.map((b) => b.max)) };
    }
  }
}

/**
 * Interval bounds of a dimension under the assumptions of its symbols
 * (each symbol `>= min`, default 1). Sound but not always tight.
 *
 * @example
 * ```ts
 * import { bounds, mul, sym } from 'vram-ts';
 * const B = sym('B', { max: 64 });
 * console.log(bounds(mul(B, 4))); // { min: 4, max: 256 }
 * ```
 */
export function bounds(dim: Dim): Bounds {
  if (!isDim(dim)) dimArg(dim, ['dim']);
  if (typeof dim === 'number') return { min: dim, max: dim };
  let known = computed.get(dim);
  if (known === undefined) {
    known = Object.freeze(boundsOfExpr(dim));
    computed.set(dim, known);
  }
  return known;
}

/** Expressions are immutable: their bounds are computed once. */
const computed = new WeakMap<Expr, Bounds>();

function boundsOfExpr(expr: Expr): Bounds {
  let min = 0;
  let max = 0;
  for (const term of expr.terms) {
    let range: Bounds = { min: term.coef, max: term.coef };
    for (const factor of term.factors) range = mulBounds(range, powBounds(atomBounds(factor.atom), factor.power));
    min += range.min;
    max += range.max;
  }
  return { min, max };
}
