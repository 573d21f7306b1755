/**
 * Expert parallelism of the Hugging Face MoE decoders, per rank (transformers 5.x's ep_plan:
 * the routed experts split over the ranks, every rank routing every token, sentinel rows in
 * grouped_mm): every case of tools/oracle/ep_cpu.py, the errors, and the laws.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/errors.js';
import { estimateEpFixture, loadEpFixtures } from '../helpers/ep-oracle.js';
import { estimate, fromHFConfig } from '../../src/index.js';
import { builtExpertParallel } from '../../src/internals.js';

const fixtures = loadEpFixtures().filter((fx) => fx.case.experts !== 'batched_mm');
const QWEN3_MOE = {
  model_type: 'qwen3_moe',
  hidden_size: 64,
  intermediate_size: 128,
  moe_intermediate_size: 32,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  vocab_size: 512,
  num_experts: 8,
  num_experts_per_tok: 2,
};

describe('expert parallelism: one rank of a Hugging Face MoE decoder', () => {
  it('has cases of both experts implementations at 1, 2 and 4 ranks', () => {
    expect(new Set(fixtures.map((f) => f.case.experts))).toEqual(new Set(['grouped_mm', 'eager']));
    expect(new Set(fixtures.map((f) => f.case.ep))).toEqual(new Set([1, 2, 4]));
  });

  for (const fx of fixtures) {
    it(`${fx.id}: parameters, gradients, saved bytes and the step's peak against transformers 5.18 (ep ${fx.case.ep}, rank ${fx.case.rank})`, () => {
      const r = estimateEpFixture(fx);
      const measured = fx.train.sgd!;
      expect(r.params.total).toBe(fx.params.local);
      expect(r.bytes.parameters).toBe(measured.paramBytes);
      expect(r.bytes.gradients).toBe(measured.gradBytes);
      if (fx.case.experts === 'grouped_mm') {
        // grouped_mm keeps every pair on every rank: nothing depends on the routing.
        expect(Math.abs(r.bytes.activations - fx.savedBytes)).toBeLessThanOrEqual(16);
        expect(Math.abs(r.bytes.peak - measured.livePeakBytes) / measured.livePeakBytes).toBeLessThan(0.0001);
      } else {
        // The eager loop's memory follows the routing: the fixture records step 3's (the peak's);
        // its saved bytes come from a fourth forward after the optimizer step, routed differently.
        expect(Math.abs(r.bytes.peak - measured.livePeakBytes) / measured.livePeakBytes).toBeLessThan(0.02);
      }
    });
  }

  it('refuses what it does not model, with a path', () => {
    expect(errorOf(() => fromHFConfig(QWEN3_MOE, { expertParallel: { size: 3 } })).issues[0]!.path).toEqual(['moeBlock', 'mlp', 'expertParallel', 'size']);
    expect(errorOf(() => fromHFConfig(QWEN3_MOE, { expertParallel: { size: 2, rank: 2 } })).issues[0]!.path).toEqual([
      'moeBlock',
      'mlp',
      'expertParallel',
      'rank',
    ]);
    expect(
      errorOf(() => fromHFConfig({ ...QWEN3_MOE, model_type: 'mixtral', num_local_experts: 4 }, { transformers: '4.40.2', expertParallel: { size: 2 } }))
        .issues[0]!.code,
    ).toBe('not-modelled');
    expect(
      errorOf(() =>
        fromHFConfig(
          { model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 256 },
          { expertParallel: { size: 2 } },
        ),
      ).issues[0]!.path,
    ).toEqual(['options', 'expertParallel']);
    const rank = fromHFConfig(QWEN3_MOE, { expertParallel: { size: 2 } });
    expect(builtExpertParallel(rank)).toBe(2);
    expect(errorOf(() => estimate(rank, { input: [1, 16], parallel: { dp: 1, ep: 4 } })).issues[0]!.path).toEqual(['parallel', 'ep']);
    expect(errorOf(() => estimate(fromHFConfig(QWEN3_MOE), { input: [1, 16], parallel: { dp: 1, ep: 2 } })).issues[0]!.message).toMatch(/built whole/);
  });

  it('law: the ranks hold every routed expert once and everything else on each; a rank never holds more than one GPU', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(2, 4, 8),
        fc.constantFrom('grouped_mm', 'eager') as fc.Arbitrary<'grouped_mm' | 'eager'>,
        fc.constantFrom(1, 2),
        (e, experts, batch) => {
          const whole = estimate(fromHFConfig(QWEN3_MOE, { moe: { experts } }), { input: [batch, 16], timeline: false });
          const ranks = Array.from({ length: e }, (_, rank) =>
            estimate(fromHFConfig(QWEN3_MOE, { moe: { experts }, expertParallel: { size: e, rank } }), {
              input: [batch, 16],
              timeline: false,
              parallel: { dp: 1, ep: e },
            }),
          );
          // Routed experts: 2 layers × 8 experts × 3 × 64 × 32.
          const routed = 2 * 8 * 3 * 64 * 32;
          const sum = ranks.reduce((a, r) => a + r.params.total, 0);
          expect(sum).toBe(whole.params.total + (e - 1) * (whole.params.total - routed));
          for (const r of ranks) {
            expect(r.params.total).toBeLessThanOrEqual(whole.params.total);
            expect(r.bytes.parameters + r.bytes.gradients + r.bytes.optimizer).toBeLessThanOrEqual(
              (whole.bytes.parameters as number) + (whole.bytes.gradients as number) + (whole.bytes.optimizer as number),
            );
          }
          // grouped_mm: every rank keeps every pair (sentinel rows masked, not dropped).
          if (experts === 'grouped_mm') expect(new Set(ranks.map((r) => r.bytes.activations)).size).toBe(1);
        },
      ),
      { numRuns: 8 },
    );
  });
});
