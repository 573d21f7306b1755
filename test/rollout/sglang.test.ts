import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { VramError, llm, sglangEngine } from '../../src/index.js';

const GiB = 2 ** 30;
const qwen = llm('qwen2.5-0.5b');

describe("SGLang's KV pool (profile_max_num_token)", () => {
  it('weights + pool = mem_fraction_static × the free memory; a cell is KV heads × 2 × head × layers × dtype', () => {
    const s = sglangEngine(qwen, { totalBytes: 80 * GiB, memFractionStatic: 0.5, weightsBytes: GiB });
    expect(s.cellSize).toBe(2 * 2 * 64 * 24 * 2);
    expect(s.restBytes).toBeCloseTo(0.5 * 80 * GiB - GiB, -2);
    expect(s.footprint).toBeCloseTo(0.5 * 80 * GiB, -2);
    expect(s.tokens).toBe(Math.floor(Math.trunc(s.restBytes) / s.cellSize));
  });

  it('a colocated trainer lowers the free memory it is a fraction of (unlike vLLM)', () => {
    const empty = sglangEngine(qwen, { totalBytes: 80 * GiB, memFractionStatic: 0.5 });
    const shared = sglangEngine(qwen, { totalBytes: 80 * GiB, freeBytes: 40 * GiB, memFractionStatic: 0.5 });
    expect(shared.footprint).toBeCloseTo(empty.footprint / 2, -2);
  });

  it("vllm#21348's SGLang line: K size 8.23 GB for 367,404 tokens of Qwen3-235B-A22B at TP 4 (94 layers, 4 KV heads of 128)", () => {
    // Half a cell is the K side: one KV head per rank × 128 × 94 layers × 2 bytes.
    const kBytes = 367_404 * ((1 * 128 * 94 * 2 * 2) / 2);
    expect(kBytes / GiB).toBeCloseTo(8.23, 2);
  });

  it('an empty pool is its error; the fraction is required and checked', () => {
    expect(sglangEngine(qwen, { totalBytes: 80 * GiB, memFractionStatic: 0.01 }).error).toBe(
      'Not enough memory. Please try to increase --mem-fraction-static.',
    );
    expect(() => sglangEngine(qwen, { totalBytes: 80 * GiB } as never)).toThrow(VramError);
    expect(() => sglangEngine(qwen, { totalBytes: 80 * GiB, memFractionStatic: 1.5 })).toThrow(VramError);
  });

  it('property: tokens never exceed the pool', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.05, max: 1, noNaN: true }), (f) => {
        const s = sglangEngine(qwen, { totalBytes: 80 * GiB, memFractionStatic: f, weightsBytes: GiB });
        expect(s.tokens * s.cellSize).toBeLessThanOrEqual(Math.max(0, s.restBytes));
      }),
    );
  });
});
