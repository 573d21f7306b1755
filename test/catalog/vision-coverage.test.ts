/**
 * Every model of the vision catalog is measured (issue 14): at least two oracle cases on PyTorch
 * 1.13 (test/fixtures/pytorch/tv_*, one size not a multiple of 32 where torchvision allows it)
 * and torchinfo's text at one size (test/fixtures/compat/vision). MobileNetV3 is measured by the
 * original `mnv3*` cases (including sizes that are not multiples of 32).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { VISION_MODELS } from '../../src/index.js';

const pytorch = new URL('../fixtures/pytorch/', import.meta.url);
const cases = readdirSync(pytorch)
  .filter((f) => f.startsWith('tv_') && f.endsWith('.json'))
  .map((f) => (JSON.parse(readFileSync(new URL(f, pytorch), 'utf8')) as { case: { model: string; input: readonly number[] } }).case);
const torchinfo = readdirSync(new URL('../fixtures/compat/vision/', import.meta.url));
// ViT-B/32 and ViT-L/32 take only multiples of their 32-pixel patch (torchvision refuses others).
const PATCH_32 = new Set(['vit_b_32', 'vit_l_32']);

describe('the vision catalog is measured model by model', () => {
  for (const name of VISION_MODELS.filter((v) => !v.startsWith('mobilenet_v3'))) {
    it(`${name}: two measured cases (one off the 32 grid) and torchinfo's text`, () => {
      const own = cases.filter((c) => c.model === name);
      expect(own.length).toBeGreaterThanOrEqual(2);
      if (!PATCH_32.has(name)) expect(own.some((c) => c.input.slice(2).some((side) => side % 32 !== 0))).toBe(true);
      expect(torchinfo.some((f) => f.startsWith(`${name}_`))).toBe(true);
    });
  }
});
