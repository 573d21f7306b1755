/**
 * Hostile arguments of the tensor helpers (issue 23): a VramError with the argument's path,
 * never a TypeError, a silently accepted junk dimension or a dtype read as floating by its name.
 */
import { describe, expect, it } from 'vitest';
import { bytesOf, isFloating, mul, numel, specBytes, sym, tensor } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const issues = (f: () => unknown) => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);

describe('tensor', () => {
  it('a shape that is no list, or a dimension that is no size, is a VramError at shape (.i)', () => {
    for (const bad of [undefined, null, 3, 'shape', { length: 2 }])
      expect(
        issues(() => tensor(bad as never)),
        String(bad),
      ).toEqual(['shape:bad-dimension']);
    expect(issues(() => tensor([1, {} as never]))).toEqual(['shape.1:bad-dimension']);
    expect(issues(() => tensor([1, '3' as never]))).toEqual(['shape.1:bad-dimension']);
    expect(issues(() => tensor([1, { kind: 'expr', terms: [] } as never]))).toEqual(['shape.1:bad-dimension']);
    expect(issues(() => tensor([1, { ...sym('S'), terms: [{}] } as never]))).toEqual(['shape.1:bad-dimension']);
    // biome-ignore lint/suspicious/noSparseArray: the hole is the point.
    expect(issues(() => tensor([1, , 3] as never))).toEqual(['shape.1:bad-dimension']);
    expect(tensor([sym('B'), 0, 3]).shape).toHaveLength(3);
  });

  it('a dtype that no toString prints is a VramError too', () => {
    expect(issues(() => tensor([1], { toString: 1 } as never))).toEqual(['dtype:unknown-dtype']);
    expect(issues(() => tensor([1], Object.create(null) as never))).toEqual(['dtype:unknown-dtype']);
  });
});

describe('numel and specBytes', () => {
  it('a spec that is no object with a shape list is a VramError at <fn>.spec', () => {
    for (const bad of [undefined, null, 3, [], { shape: 'x' }]) {
      expect(
        issues(() => numel(bad as never)),
        String(bad),
      ).toEqual(['numel.spec:bad-tensor']);
      expect(
        issues(() => specBytes(bad as never)),
        String(bad),
      ).toEqual(['specBytes.spec:bad-tensor']);
    }
  });

  it('its dimensions and dtype are checked, at their paths', () => {
    expect(issues(() => numel({ shape: [2, -1], dtype: 'float32' }))).toEqual(['numel.spec.shape.1:bad-dimension']);
    expect(issues(() => numel({ shape: [2, null as never], dtype: 'float32' }))).toEqual(['numel.spec.shape.1:bad-dimension']);
    expect(issues(() => specBytes({ shape: [2 ** 60], dtype: 'float32' }))).toEqual(['specBytes.spec.shape.0:overflow']);
    expect(issues(() => specBytes({ shape: [2], dtype: 'float12' as never }))).toEqual(['specBytes.spec.dtype:unknown-dtype']);
    expect(issues(() => specBytes({ shape: [2] } as never))).toEqual(['specBytes.spec.dtype:unknown-dtype']);
    expect(specBytes({ shape: [sym('B'), 2], dtype: 'bfloat16' })).toEqual(mul(sym('B'), 4));
  });
});

describe('bytesOf and isFloating', () => {
  it('bytesOf: a count that is no size, or an unknown dtype, is a VramError at its argument', () => {
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '10', null, {}])
      expect(
        issues(() => bytesOf(bad as never, 'float32')),
        String(bad),
      ).toEqual(['bytesOf.numel:bad-dimension']);
    expect(issues(() => bytesOf(2 ** 60, 'float32'))).toEqual(['bytesOf.numel:overflow']);
    for (const bad of [undefined, 'float12', 'toString', '__proto__', 3])
      expect(
        issues(() => bytesOf(10, bad as never)),
        String(bad),
      ).toEqual(['bytesOf.dtype:unknown-dtype']);
  });

  it('isFloating: a name that is no dtype is a VramError, not an answer read off its prefix', () => {
    for (const bad of [undefined, null, 3, 'float12', 'floaty', {}])
      expect(
        issues(() => isFloating(bad as never)),
        String(bad),
      ).toEqual(['isFloating.dtype:unknown-dtype']);
    expect([isFloating('float8_e4m3'), isFloating('nf4'), isFloating('bfloat16')]).toEqual([true, false, true]);
  });
});
