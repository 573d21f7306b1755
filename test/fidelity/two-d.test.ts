/**
 * Two-dimensional layouts against PyTorch itself (2.13 CPU, the fake process group, a real
 * transformers 4.40.2 Llama): FSDP2 over dp around DTensor tensor parallelism, and FSDP2 over
 * the flattened dp × cp mesh around context_parallel, and tensor × context parallelism
 * (torchtitan's layouts).
 */
import { describe, expect, it } from 'vitest';
import {
  estimateFsdpCpFixture,
  estimateFsdpTpFixture,
  estimateTpCpFixture,
  loadFsdpCpFixtures,
  loadFsdpTpFixtures,
  loadTpCpFixtures,
} from '../helpers/two-d-oracle.js';

const tpFixtures = loadFsdpTpFixtures();
const cpFixtures = loadFsdpCpFixtures();

describe('FSDP2 × tensor parallelism, one rank', () => {
  it('has cases at dp 2 and 4, both TP ranks, SP, loss parallel, mixed precision', () => {
    expect(tpFixtures.length).toBeGreaterThanOrEqual(14);
    expect(new Set(tpFixtures.map((f) => f.case.dp))).toEqual(new Set([2, 4]));
  });
  for (const fx of tpFixtures) {
    it(`${fx.id}: model states exact, saved bytes and the step's peak`, () => {
      const r = estimateFsdpTpFixture(fx);
      const m = fx.train[fx.case.optimizer]!;
      expect(r.bytes.parameters).toBe(m.paramBytes);
      expect(r.bytes.gradients).toBe(m.gradBytes);
      expect(r.bytes.optimizer).toBe(m.optimizerStateBytes);
      expect(Math.abs(r.bytes.activations - fx.savedBytes)).toBeLessThanOrEqual(16);
      expect(Math.abs(r.bytes.peak - m.livePeakBytes)).toBeLessThanOrEqual(64);
    });
  }
  it("the vocab-parallel embedding's whole [V, h] gradient, then its TP-local copy made while it lives, as FSDP2 redistributes it", () => {
    for (const fx of tpFixtures.filter((f) => f.case.retie !== true)) {
      const r = estimateFsdpTpFixture(fx, true);
      const copy = fx.embeddingGrad.blocks.find((b) => b.alloc.scope === 'FSDP::post_backward_reshard' && b.alloc.top === 'FSDP::root_post_backward_callback');
      expect(copy, fx.id).toBeDefined();
      const ours = r.timeline!.find((e) => e.phase === 'backward' && e.label.includes('model.embed_tokens.weight gradient redistributed'));
      expect(ours, fx.id).toBeDefined();
      expect(Math.abs((ours!.live as number) - copy!.liveAfterAlloc), fx.id).toBeLessThanOrEqual(64);
    }
  });
});

describe('FSDP2 × context parallelism, one rank (FSDP over dp · cp ranks)', () => {
  it('has cases at dp × cp of 2 × 2, 1 × 4, 3 × 2 and a control without CP', () => {
    expect(new Set(cpFixtures.map((f) => `${f.case.dp}×${f.case.cp}`))).toEqual(new Set(['2×2', '1×4', '3×2', '4×1']));
  });
  for (const fx of cpFixtures) {
    it(`${fx.id}: model states exact, saved bytes and the step's peak`, () => {
      const r = estimateFsdpCpFixture(fx);
      const m = fx.train.sgd!;
      expect(r.bytes.parameters).toBe(m.paramBytes);
      expect(r.bytes.gradients).toBe(m.gradBytes);
      expect(Math.abs(r.bytes.activations - fx.savedBytes)).toBeLessThanOrEqual(fx.case.input[0] === 1 ? 512 : 0);
      // As with CP alone: the CPU flash kernel's scratch and context_parallel's buffer copies are not modelled.
      expect(Math.abs(r.bytes.peak - m.livePeakBytes) / m.livePeakBytes).toBeLessThan(0.01);
    });
  }
});

describe("tensor × context parallelism, one rank (torchtitan's cp × tp mesh)", () => {
  const fixtures = loadTpCpFixtures();
  it('has tp 2 × cp 2 at both corners, SP, loss parallel, no load balance, MHA, and the controls', () => {
    expect(fixtures.filter((f) => f.case.tp === 2 && f.case.cp === 2).length).toBeGreaterThanOrEqual(6);
  });
  for (const fx of fixtures) {
    it(`${fx.id}: saved bytes exact and the step's peak`, () => {
      const r = estimateTpCpFixture(fx);
      const m = fx.train.sgd!;
      expect(r.bytes.parameters).toBe(m.paramBytes);
      expect(r.bytes.activations).toBe(fx.savedBytes);
      // As with CP alone: the CPU flash kernel's scratch and context_parallel's buffer copies are not modelled.
      expect(Math.abs(r.bytes.peak - m.livePeakBytes) / m.livePeakBytes).toBeLessThan(0.01);
    });
  }
});
