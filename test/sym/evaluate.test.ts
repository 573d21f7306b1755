import { describe, expect, it } from 'vitest';
import { compile, evaluate, mul, substitute, sym } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const n = sym('n');
const expr = mul(n, 3);

const issue = (f: () => unknown) => {
  const first = errorOf(f).issues[0]!;
  return [first.path, first.code];
};

describe('evaluate', () => {
  it("checks the symbols' values: an object of counts, each at its key", () => {
    // null was a TypeError.
    expect(issue(() => evaluate(expr, null as never))).toEqual([['env'], 'bad-option']);
    expect(issue(() => evaluate(expr, { n: Infinity }))).toEqual([['env', 'n'], 'bad-dimension']);
    // A value of a symbol the expression has not was accepted unseen.
    expect(issue(() => evaluate(sym('B'), { B: 2, n: Infinity }))).toEqual([['env', 'n'], 'bad-dimension']);
    expect(issue(() => evaluate(expr, { n: '2' } as never))).toEqual([['env', 'n'], 'bad-dimension']);
    expect(issue(() => evaluate(7, null as never))).toEqual([['env'], 'bad-option']);
    expect(evaluate(expr, { n: 4 })).toBe(12);
  });

  it('names the symbol whose value breaks its assumptions or is missing', () => {
    expect(issue(() => evaluate(sym('S', { multipleOf: 4 }), { S: 6 }))).toEqual([['env', 'S'], 'bad-dimension']);
    expect(issue(() => evaluate(expr, {}))).toEqual([['env', 'n'], 'unbound-symbol']);
    // An inherited key is no value: a symbol named toString has none in {}.
    expect(issue(() => evaluate(sym('toString'), {}))).toEqual([['env', 'toString'], 'unbound-symbol']);
  });

  it('checks the dimension: NaN was returned as it was, null a TypeError', () => {
    expect(issue(() => evaluate(Number.NaN, {}))).toEqual([['dim'], 'overflow']);
    expect(issue(() => evaluate(null as never, {}))).toEqual([['dim'], 'bad-dimension']);
    expect(issue(() => evaluate({ kind: 'expr' } as never, {}))).toEqual([['dim'], 'bad-dimension']);
  });
});

describe('compile and substitute', () => {
  it('check their arguments', () => {
    expect(issue(() => compile(null as never))).toEqual([['dim'], 'bad-dimension']);
    expect(issue(() => compile(expr)(null as never))).toEqual([['env'], 'bad-option']);
    expect(issue(() => compile(expr)({ n: Number.NaN }))).toEqual([['env', 'n'], 'bad-dimension']);
    expect(compile(expr)({ n: 2 })).toBe(6);
    expect(issue(() => substitute(expr, null as never))).toEqual([['env'], 'bad-option']);
    expect(issue(() => substitute(expr, { n: 'x' } as never))).toEqual([['env', 'n'], 'bad-dimension']);
    expect(issue(() => substitute(undefined as never, {}))).toEqual([['dim'], 'bad-dimension']);
    expect(substitute(expr, { n: 5 })).toBe(15);
  });
});
