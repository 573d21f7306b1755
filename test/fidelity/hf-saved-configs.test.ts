/**
 * The config.json each release's `save_pretrained` writes (test/fixtures/hf-saved-configs, made by
 * tools/oracle/hf_saved_configs.py with the real transformers 4.57.6 and 5.18.0), read back by
 * fromHFConfig with that release: no refusal, and the real model's parameter count (meta device).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { estimate, fromHFConfig, type HFConfig, type VramError } from '../../src/index.js';

interface SavedConfigs {
  readonly transformers: string;
  readonly configs: readonly { readonly id: string; readonly saved: HFConfig; readonly params: number }[];
}

for (const release of ['4.57.6', '5.18.0']) {
  const file = JSON.parse(readFileSync(new URL(`../fixtures/hf-saved-configs/${release}.json`, import.meta.url), 'utf8')) as SavedConfigs;
  describe(`config.json as transformers ${release} saves it`, () => {
    it('was written by that release, one per family shape of the grid', () => {
      expect(file.transformers).toBe(release);
      expect(new Set(file.configs.map((c) => c.saved.model_type)).size).toBeGreaterThanOrEqual(12);
    });
    for (const c of file.configs)
      it(`${c.id} (${String(c.saved.model_type)}): read, with the real parameter count`, () => {
        const model = fromHFConfig(c.saved, { transformers: release });
        expect(estimate(model, { input: [1, 4], mode: 'inference' }).params.total).toBe(c.params);
      });
  });
}

describe('a 5.x spelling where 4.x reads another field', () => {
  it("qwen3_moe's num_local_experts under 4.57 is an error naming it, not 4.57's default 128 experts", () => {
    const saved = JSON.parse(readFileSync(new URL('../fixtures/hf-saved-configs/5.18.0.json', import.meta.url), 'utf8')) as SavedConfigs;
    const moe = saved.configs.find((c) => c.saved.model_type === 'qwen3_moe')!.saved;
    try {
      fromHFConfig(moe, { transformers: '4.57.6' });
      expect.unreachable();
    } catch (error) {
      expect((error as VramError).issues.map((i) => i.path.join('.'))).toContain('num_local_experts');
    }
  });
});
