/**
 * vram-ts against the real, unmodified Hugging Face modeling code: every fixture the oracle
 * wrote from `AutoModelForCausalLM.from_config` under a named transformers release
 * (test/fixtures/hf-<release>, tools/oracle/README.md) is rebuilt with
 * `fromHFConfig(config, { transformers: release })` and compared: parameters exact, saved bytes
 * within 1%, training and inference peaks (with and without the KV cache) within 3%.
 */
import { describe, expect, it } from 'vitest';
import { compareFixture, loadHFFixtures, modelFor, tolerance } from '../helpers/oracle.js';

const releases = loadHFFixtures();

describe('fidelity against real Hugging Face transformers (CPU, fp32)', () => {
  it('has at least 30 real-code cases of transformers 4.40.2 over llama, qwen2, mistral and gpt2', () => {
    const measured = releases.find((r) => r.release === '4.40.2')?.fixtures ?? [];
    expect(measured.length).toBeGreaterThanOrEqual(30);
    const families = new Set(measured.map((f) => String(f.case.config?.model_type)));
    for (const family of ['gpt2', 'llama', 'mistral', 'qwen2', 'gemma']) expect(families.has(family), family).toBe(true);
  });

  it('measures the dense families of issue 13 on real code (Gemma on 4.40.2; Qwen3, Gemma 1-3, Phi-3 on 5.18.0)', () => {
    const families = (release: string) => new Set((releases.find((r) => r.release === release)?.fixtures ?? []).map((f) => String(f.case.config?.model_type)));
    expect(families('4.40.2').has('gemma')).toBe(true);
    for (const family of ['qwen3', 'gemma', 'gemma2', 'gemma3_text', 'phi3']) expect(families('5.18.0').has(family), family).toBe(true);
  });

  for (const { release, fixtures } of releases) {
    describe(`transformers ${release}`, () => {
      for (const fixture of fixtures) {
        it(fixture.id, () => {
          expect(fixture.case.transformers).toBe(release);
          const built = modelFor(fixture);
          if ('pending' in built) throw new Error(built.pending);
          const { comparisons } = compareFixture(fixture, built.layer);
          expect(comparisons.some((c) => c.figure === 'inference peak (use_cache=False)')).toBe(true);
          for (const c of comparisons) {
            expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(tolerance(c));
          }
        });
      }
    });
  }
});
