/**
 * Every rank of vram-ts's DeepSpeed ZeRO against DeepSpeed itself (edaa7221) on PyTorch 2.13
 * CPU, one gloo process per rank (tools/oracle/deepspeed_cpu.py): stages 1, 2 and 3 over 2 and
 * 4 ranks, fp32 and bf16, reduce buckets, overlap_comm, accumulation, persistence thresholds,
 * and a real transformers 4.40.2 Llama under ZeRO-3.
 */
import { describe, expect, it } from 'vitest';
import { compareDeepSpeedFixture, deepspeedTolerance, loadDeepSpeedFixtures } from '../helpers/deepspeed-oracle.js';

const fixtures = loadDeepSpeedFixtures();

describe('fidelity per rank against DeepSpeed ZeRO on CPU (test/fixtures/deepspeed-cpu)', () => {
  it('has the measured stages', () => {
    expect(new Set(fixtures.map((f) => f.case.stage))).toEqual(new Set([1, 2, 3]));
    expect(fixtures.length).toBeGreaterThanOrEqual(20);
  });
  for (const fixture of fixtures) {
    it(`${fixture.id}: every rank's peak within 5%, its optimizer state and fp32 master exact`, () => {
      for (const c of compareDeepSpeedFixture(fixture)) {
        expect(Math.abs(c.error), `rank ${c.rank} ${c.figure}: DeepSpeed ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(deepspeedTolerance(c));
      }
    });
  }
});
