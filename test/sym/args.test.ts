import { describe, expect, it } from 'vitest';
import { add, bounds, evaluate, floorDiv, formatDim, mul, sym } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

describe('bounds and formatDim', () => {
  it('refuse what is no dimension at their path (TypeErrors before)', () => {
    for (const f of [bounds, formatDim]) {
      expect(errorOf(() => f(null as never)).issues[0]!.path).toEqual(['dim']);
      expect(errorOf(() => f({ kind: 'expr' } as never)).issues[0]!.path).toEqual(['dim']);
      expect(errorOf(() => f(Number.NaN)).issues[0]!.code).toBe('overflow');
    }
    expect(bounds(sym('B', { max: 4 }))).toEqual({ min: 1, max: 4 });
    expect(formatDim(-3)).toBe('-3');
  });

  it('take an expression of another copy of the package (its data, copied), and refuse forged ones', () => {
    const S = sym('S');
    const expr = add(floorDiv(mul(S, S), 2), 3);
    const clone = JSON.parse(JSON.stringify(expr)) as unknown;
    expect(evaluate(clone as never, { S: 4 })).toBe(11);
    const forged = (change: (e: Record<string, unknown>) => void) => {
      const e = JSON.parse(JSON.stringify(expr)) as Record<string, unknown>;
      change(e);
      return e;
    };
    // Each of these was a TypeError, a NaN in the result, or (a power of 10^15) a hang.
    const bad = [
      forged((e) => (e.terms = [])),
      forged((e) => {
        // A hole (which every() skips) before a term.
        const terms: unknown[] = [];
        terms[1] = (e.terms as unknown[])[0];
        e.terms = terms;
      }),
      forged((e) => (e.erms = Number.NaN)),
      forged((e) => ((e.terms as { coef: number }[])[0]!.coef = Number.NaN)),
      forged((e) => ((e.terms as { factors: { power: number }[] }[])[0]!.factors[0]!.power = 1e15)),
      forged((e) => ((e.terms as { factors: { atom: unknown }[] }[])[0]!.factors[0]!.atom = e)),
      { kind: 'expr', terms: [{ coef: 1, factors: [{ atom: { kind: 'sym', key: {}, name: 'S', min: 1 }, power: 1 }], key: 'S', degree: 1 }], key: 'S' },
    ];
    for (const e of bad) {
      expect(errorOf(() => evaluate(e as never, { S: 4 })).issues[0]!.path).toEqual(['dim']);
      expect(errorOf(() => mul(e as never, 1)).issues[0]!.path).toEqual(['a']);
    }
  });
});
