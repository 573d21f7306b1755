/**
 * spec.ts's numel and specBytes: their fast path for concrete shapes (what the trace and the step
 * call per op) gives exactly what the checked path gives, product and bytesOf, on every dtype,
 * up to and past 2^53 (where both refuse alike).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesOf, DTYPE_BITS, numel, product, specBytes, type DType } from '../../src/index.js';

const dtypes = Object.keys(DTYPE_BITS) as DType[];
/** A concrete spec, dimensions small or large (products near and past 2^53). */
const specs = fc.record({
  shape: fc.array(fc.oneof(fc.nat(64), fc.nat(2 ** 20), fc.maxSafeNat()), { maxLength: 5 }),
  dtype: fc.constantFrom(...dtypes),
});

/** The value or the error's code. */
const outcome = (run: () => unknown) => {
  try {
    return { value: run() };
  } catch (error) {
    return { code: (error as { issues?: { code: string }[] }).issues?.[0]?.code ?? String(error) };
  }
};

describe('numel and specBytes on concrete shapes', () => {
  it('equal product and bytesOf of the shape, or fail as they do', () => {
    fc.assert(
      fc.property(specs, (spec) => {
        expect(outcome(() => numel(spec))).toEqual(outcome(() => product(spec.shape)));
        expect(outcome(() => specBytes(spec))).toEqual(outcome(() => bytesOf(product(spec.shape), spec.dtype)));
      }),
      { numRuns: 3000 },
    );
  });

  it('give exactly ⌈n · bits / 8⌉ bytes (BigInt) wherever that is a safe integer', () => {
    fc.assert(
      fc.property(specs, (spec) => {
        const n = spec.shape.reduce((a, d) => a * BigInt(d), 1n);
        const bytes = (n * BigInt(DTYPE_BITS[spec.dtype]) + 7n) / 8n;
        const r = outcome(() => specBytes(spec));
        if ('value' in r) expect(BigInt(r.value as number)).toBe(bytes);
        else
          expect(
            bytes * 8n > BigInt(Number.MAX_SAFE_INTEGER) ||
              spec.shape.some((_, i) => spec.shape.slice(0, i + 1).reduce((a, d) => a * BigInt(d), 1n) > BigInt(Number.MAX_SAFE_INTEGER)),
          ).toBe(true);
      }),
      { numRuns: 3000 },
    );
  });

  it('sub-byte dtypes round up to whole bytes; an empty shape is one element', () => {
    const sub = dtypes.find((d) => DTYPE_BITS[d] < 8);
    if (sub !== undefined) expect(specBytes({ shape: [3], dtype: sub })).toBe(Math.ceil((3 * DTYPE_BITS[sub]) / 8));
    expect(numel({ shape: [], dtype: 'float32' })).toBe(1);
    expect(specBytes({ shape: [], dtype: 'float32' })).toBe(4);
  });
});
