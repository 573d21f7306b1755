/**
 * accelerate 1.15.0's FSDP2 against vram-ts: tools/oracle/fsdp2_cpu.py wraps real transformers
 * 5.18.0 decoders with accelerate's own `fsdp2_prepare_model` (PyTorch 2.13 CPU, fake process
 * group; test/fixtures/accelerate-fsdp2-cpu) and records every `fully_shard` call it made. The
 * reading of the same settings as an accelerate config (fromAccelerateConfig) must name those
 * units, in that order, and give the measured rank's peak within 5% and its optimizer state exactly.
 */
import { describe, expect, it } from 'vitest';
import { ACCELERATE_FOLDER, compareDistributedFixture, loadDistributedFixtures, planOf, rankTolerance } from '../helpers/distributed-oracle.js';
import { fromHFConfig } from '../../src/index.js';

interface Calls {
  readonly fsdp: {
    readonly accelerate: { readonly fullyShardCalls: readonly { readonly modules: readonly string[]; readonly reshardAfterForward: boolean | null }[] };
  };
}

const fixtures = loadDistributedFixtures(ACCELERATE_FOLDER);

describe(`accelerate's FSDP2 per rank (test/fixtures/${ACCELERATE_FOLDER})`, () => {
  it('has the measured cases: tied and untied, two worlds, bf16, accumulation, no reshard', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(9);
    expect(new Set(fixtures.map((f) => f.case.config?.tie_word_embeddings)).size).toBe(2);
    expect(fixtures.some((f) => f.case.fsdp?.accelerate?.mixedPrecision === 'bf16')).toBe(true);
  });
  for (const fixture of fixtures) {
    it(`${fixture.id}: accelerate's units, the rank's peak within 5%, its optimizer state exact`, () => {
      const c = fixture.case;
      const model = fromHFConfig(c.config!, { transformers: c.transformers!, attention: 'eager', useCache: c.trainUseCache ?? false });
      const units = (planOf(fixture, model) as { units: readonly (string | { modules: readonly string[]; reshardAfterForward?: boolean })[] }).units;
      // The fully_shard calls before the root's, each with its reshard flag (null: the plan's).
      const calls = (fixture as unknown as Calls).fsdp.accelerate.fullyShardCalls.slice(0, -1);
      expect(units.map((u) => (typeof u === 'string' ? [u] : u.modules))).toEqual(calls.map((call) => call.modules));
      const flags = units.map((u) =>
        typeof u === 'string' ? c.fsdp!.accelerate!.reshardAfterForward : (u.reshardAfterForward ?? c.fsdp!.accelerate!.reshardAfterForward),
      );
      expect(flags).toEqual(calls.map((call) => call.reshardAfterForward));
      for (const r of compareDistributedFixture(fixture))
        expect(Math.abs(r.error), `${r.figure}: PyTorch ${r.pytorch}, vram-ts ${r.ours}`).toBeLessThanOrEqual(rankTolerance(r));
    });
  }
});
