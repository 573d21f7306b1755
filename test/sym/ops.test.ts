import { describe, expect, it } from 'vitest';
import { add, ceilDiv, floorDiv, max, mul, neg, product, sub, sum, sym } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const B = sym('B');

/** The path and code of the first issue a call throws. */
const issue = (f: () => unknown) => {
  const first = errorOf(f).issues[0]!;
  return [first.path, first.code];
};

describe('sym', () => {
  it('takes a name that is a string: null and undefined were symbols named "null" and "undefined"', () => {
    expect(issue(() => sym(null as never))).toEqual([['name'], 'bad-symbol']);
    expect(issue(() => sym(undefined as never))).toEqual([['name'], 'bad-symbol']);
    expect(issue(() => sym({ toString: () => 'B' } as never))).toEqual([['name'], 'bad-symbol']);
    expect(issue(() => sym(''))).toEqual([['name'], 'bad-symbol']);
    expect(issue(() => sym('B'.repeat(257)))).toEqual([['name'], 'bad-symbol']);
    expect(String(sym('seq_len'))).toBe('seq_len');
  });

  it('takes assumptions that are an object of known keys, each a count', () => {
    // null was a TypeError; a misspelt key was ignored.
    expect(issue(() => sym('B', null as never))).toEqual([['assumptions'], 'bad-option']);
    expect(issue(() => sym('B', { mx: 4 } as never))).toEqual([['assumptions', 'mx'], 'bad-symbol']);
    expect(issue(() => sym('B', { min: Infinity }))).toEqual([['assumptions', 'min'], 'bad-symbol']);
    expect(issue(() => sym('B', { max: '8' } as never))).toEqual([['assumptions', 'max'], 'bad-symbol']);
    expect(issue(() => sym('B', { min: 4, max: 2 }))).toEqual([['assumptions', 'max'], 'bad-symbol']);
    expect(issue(() => sym('B', { multipleOf: 0 }))).toEqual([['assumptions', 'multipleOf'], 'bad-symbol']);
    expect(String(sym('S', { min: 2, max: 8, multipleOf: 2 }))).toBe('S');
  });
});

describe('the arithmetic', () => {
  it('refuses arguments that are no dimension, with their path (a TypeError from deep inside before)', () => {
    expect(issue(() => add('x' as never, B))).toEqual([['a'], 'bad-dimension']);
    expect(issue(() => add(B, null as never))).toEqual([['b'], 'bad-dimension']);
    expect(issue(() => mul({} as never, B))).toEqual([['a'], 'bad-dimension']);
    expect(issue(() => sub(B, { kind: 'expr' } as never))).toEqual([['b'], 'bad-dimension']);
    expect(issue(() => neg(undefined as never))).toEqual([['a'], 'bad-dimension']);
    expect(issue(() => floorDiv(null as never, 2))).toEqual([['a'], 'bad-dimension']);
    expect(issue(() => ceilDiv('7' as never, 2))).toEqual([['a'], 'bad-dimension']);
  });

  it('refuses numbers that are not exact integers (1e300 - 1e300 was 0, NaN + B a NaN coefficient)', () => {
    expect(issue(() => add(1e300, -1e300))).toEqual([['a'], 'overflow']);
    expect(issue(() => add(B, Number.NaN))).toEqual([['b'], 'overflow']);
    expect(issue(() => mul(2, Infinity))).toEqual([['b'], 'overflow']);
    expect(issue(() => sub(0.5, 1))).toEqual([['a'], 'overflow']);
  });

  it('checks lists element by element, and the divisor', () => {
    expect(issue(() => sum(null as never))).toEqual([['dims'], 'bad-dimension']);
    expect(issue(() => sum([1, 'x'] as never))).toEqual([['dims', 1], 'bad-dimension']);
    expect(issue(() => product([B, Number.NaN]))).toEqual([['dims', 1], 'overflow']);
    expect(issue(() => max(B, null as never))).toEqual([['dims', 1], 'bad-dimension']);
    expect(issue(() => max())).toEqual([['dims'], 'empty-max']);
    expect(issue(() => floorDiv(B, 0))).toEqual([['den'], 'bad-divisor']);
    expect(issue(() => ceilDiv(B, Infinity))).toEqual([['den'], 'bad-divisor']);
    expect(String(add(sum([B, 1]), product([B, 2])))).toBe('3·B + 1');
  });
});
