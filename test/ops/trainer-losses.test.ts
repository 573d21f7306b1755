import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { tensor } from '../../src/tensor/spec.js';
import type { OpContext } from '../../src/ops/types.js';
import { entropyOp, selectiveLogSoftmaxOp } from '../../src/ops/log-probs.js';
import { fusedLinearCrossEntropyOp } from '../../src/ops/fused-linear-cross-entropy.js';
import { chunkedNllOp } from '../../src/ops/chunked-nll.js';

const ctx: OpContext = { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'float32', path: [] };
const allocs = (steps: readonly unknown[] | undefined) =>
  (steps ?? []).flatMap((s) => ('alloc' in (s as object) ? [(s as { alloc: string; bytes: number }).bytes] : []));

describe('the trainers’ loss kernels', () => {
  it('selective_log_softmax keeps the logits, the ids and one logsumexp per row; 16-bit logits are refused', () => {
    const r = selectiveLogSoftmaxOp.apply([tensor([4, 16, 640], 'float32'), tensor([4, 16], 'int64')], {}, ctx);
    expect(r.outputs[0]!.shape).toEqual([4, 16]);
    expect(r.saves({ inputs: [true, false], params: false })).toHaveLength(3);
    // One [K, V] temporary per row in forward (logsumexp's self - amax).
    expect(allocs(r.forwardSteps).filter((b) => b === 16 * 640 * 4)).toHaveLength(4);
    expect(() => selectiveLogSoftmaxOp.apply([tensor([4, 16, 640], 'bfloat16'), tensor([4, 16], 'int64')], {}, ctx)).toThrow(/not modelled/);
  });

  it('property: entropy_from_logits never holds more than three chunks (and the copy of strided logits)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 600 }), fc.integer({ min: 2, max: 5000 }), fc.boolean(), (rows, vocab, copy) => {
        const r = entropyOp.apply([tensor([rows, vocab], 'float32')], { copy }, ctx);
        const chunk = Math.min(rows, 128) * vocab * 4;
        let live = 0;
        let peak = 0;
        const sizes = new Map<string, number>();
        for (const s of r.forwardSteps ?? []) {
          if ('alloc' in s) {
            sizes.set(s.alloc, s.bytes as number);
            live += s.bytes as number;
          } else if ('free' in s) live -= sizes.get(s.free)!;
          peak = Math.max(peak, live);
        }
        expect(peak).toBeLessThanOrEqual(3 * chunk + (copy ? rows * vocab * 4 : 0) + rows * 4);
        expect(live).toBe(0);
      }),
    );
  });

  it("Liger's chunk: next_pow2(⌈N / ⌈V/H⌉⌉) rows; the gradients are what it saves", () => {
    const r = fusedLinearCrossEntropyOp.apply([tensor([1, 1024, 1024], 'float32'), tensor([1, 1024], 'int64')], { vocab: 32000, compute: 'bfloat16' }, ctx);
    // ⌈32000/1024⌉ = 32, ⌈1024/32⌉ = 32 rows: the bf16 logits chunk 32 × 32000 × 2.
    expect(allocs(r.forwardSteps)).toContain(32 * 32000 * 2);
    const saved = r.saves({ inputs: [true, false], params: true });
    expect(saved.map((s) => ('extra' in s ? s.extra.shape : null))).toEqual([
      [1024, 1024],
      [32000, 1024],
    ]);
  });

  it('chunked_nll: a frozen lm_head gets no weight gradient in backward', () => {
    const r = chunkedNllOp.apply([tensor([2, 300, 64], 'float32'), tensor([2, 300], 'int64')], { vocab: 1000, chunk: 256 }, ctx);
    const trainable = allocs(r.backward!({ inputs: [true, false], params: true }).steps);
    const frozen = allocs(r.backward!({ inputs: [true, false], params: false }).steps);
    expect(trainable).toContain(1000 * 64 * 4);
    expect(frozen.filter((b) => b === 1000 * 64 * 4)).toHaveLength(0);
  });
});
