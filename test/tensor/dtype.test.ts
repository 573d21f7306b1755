import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesOf, DTYPE_BITS, evaluate, isDType, isFloating, numel, specBytes, sym, tensor, VramError, type DType } from '../../src/index.js';

const DTYPES = Object.keys(DTYPE_BITS) as DType[];

describe('dtypes', () => {
  it('has the promised set with PyTorch element sizes', () => {
    expect(DTYPE_BITS).toMatchObject({
      float32: 32,
      float16: 16,
      bfloat16: 16,
      float8_e4m3: 8,
      float8_e5m2: 8,
      int64: 64,
      int32: 32,
      int8: 8,
      uint8: 8,
      bool: 8,
      int4: 4,
      nf4: 4,
    });
    expect(DTYPES.filter(isFloating).sort()).toEqual(['bfloat16', 'float16', 'float32', 'float64', 'float8_e4m3', 'float8_e5m2']);
    expect(isDType('float12')).toBe(false);
  });

  it('counts bytes exactly: whole bytes per element, sub-byte types packed densely and rounded up to a byte', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 40 }), fc.constantFrom(...DTYPES), (n, dtype) => {
        const bytes = bytesOf(n, dtype) as number;
        expect(Number.isSafeInteger(bytes)).toBe(true);
        expect(bytes).toBe(DTYPE_BITS[dtype] >= 8 ? (n * DTYPE_BITS[dtype]) / 8 : Math.ceil((n * DTYPE_BITS[dtype]) / 8));
      }),
    );
  });

  it('keeps symbolic sizes exact, rounding packed types up only once', () => {
    const n = sym('N');
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10_000 }), (value) => {
        expect(evaluate(bytesOf(n, 'nf4'), { N: value })).toBe(Math.ceil(value / 2));
        expect(evaluate(specBytes(tensor([n, 3], 'int4')), { N: value })).toBe(Math.ceil((3 * value) / 2));
      }),
    );
  });

  it('tensor specs multiply their shape; bad shapes and dtypes are VramErrors', () => {
    expect(numel(tensor([2, 3, 4]))).toBe(24);
    expect(specBytes(tensor([2, 3, 4], 'bfloat16'))).toBe(48);
    // @ts-expect-error not a dtype
    expect(() => tensor([2], 'float12')).toThrow(VramError);
    expect(() => tensor([2, -1])).toThrow(VramError);
    expect(() => tensor([2, 1.5])).toThrow(VramError);
  });
});
