/**
 * The Hugging Face Trainer under FSDP2 against vram-ts: tools/oracle/trainer_fsdp2_cpu.py runs the
 * real Trainer (transformers 5.18.0) with a real Accelerator (accelerate 1.15.0) on PyTorch 2.13 CPU,
 * rank 0 of a `fake` process group (test/fixtures/trainer-fsdp2-cpu; one patch, recorded in each
 * fixture: accelerate's backend probe answers as on a GPU node). The TrainingArguments the run used,
 * read by fromTrainingArguments, must name the units accelerate made and give the rank's measured
 * peak within 5% and its optimizer state exactly. What the plain estimate leaves out is the
 * Trainer's own: the batch's labels tensor and the loss scalars (792 B of 1.4 MB here).
 */
import { describe, expect, it } from 'vitest';
import { rankTolerance } from '../helpers/distributed-oracle.js';
import { compareTrainerFsdpFixture, loadTrainerFsdpFixtures, readTrainerFsdpFixture } from '../helpers/trainer-fsdp2-oracle.js';

const fixtures = loadTrainerFsdpFixtures();

describe('the Trainer under FSDP2, per rank (test/fixtures/trainer-fsdp2-cpu)', () => {
  it('has the measured cases: untied, tied, bf16', () => {
    expect(fixtures.map((f) => f.id)).toEqual(['trainer_llama_w2_r0_adamw', 'trainer_llama_w2_r0_adamw_bf16', 'trainer_qwen2_tied_w2_r0_adamw']);
  });
  for (const f of fixtures) {
    it(`${f.id}: accelerate's units, the peak within 5%, the optimizer state exact`, () => {
      const units = (readTrainerFsdpFixture(f).reading.options!.parallel as { units: readonly (string | { modules: readonly string[] })[] }).units;
      expect(units.map((u) => (typeof u === 'string' ? [u] : u.modules))).toEqual(f.fsdp.units);
      for (const r of compareTrainerFsdpFixture(f))
        expect(Math.abs(r.error), `${r.figure}: PyTorch ${r.pytorch}, vram-ts ${r.ours}`).toBeLessThanOrEqual(rankTolerance(r));
    });
  }
});
