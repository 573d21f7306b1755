/**
 * alloc-conf.ts's log2Floor: the replay's size classes read floor(log2 n) for every request, so
 * its fast path (leading zeros below 2^32) must agree with the exact integer logarithm everywhere.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { log2Floor } from '../../src/memory/alloc-conf.js';

/** floor(log2 n) by BigInt: the bit length less one. */
const exact = (n: number) => BigInt(n).toString(2).length - 1;

describe('log2Floor', () => {
  it('is the exact floor(log2 n) for every positive safe integer', () => {
    fc.assert(
      fc.property(
        fc.maxSafeNat().filter((n) => n > 0),
        (n) => {
          expect(log2Floor(n)).toBe(exact(n));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('is exact at and around every power of two up to 2^53', () => {
    for (let e = 0; e < 53; e += 1) {
      const p = 2 ** e;
      expect(log2Floor(p)).toBe(e);
      if (p > 1) expect(log2Floor(p - 1)).toBe(e - 1);
      if (p + 1 <= Number.MAX_SAFE_INTEGER) expect(log2Floor(p + 1)).toBe(p + 1 === 2 ** (e + 1) ? e + 1 : e);
    }
  });
});
