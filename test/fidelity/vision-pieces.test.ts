/**
 * Issue 14's builder pieces against PyTorch 1.13 (CPU): torchvision's own blocks (ResNet's
 * BasicBlock and Bottleneck, SqueezeNet's Fire with ceil-mode pooling, EfficientNet's MBConv with
 * stochastic depth and a SiLU squeeze-excitation) and the new layers (GroupNorm, StochasticDepth
 * row and batch, AdaptiveMaxPool2d), written with the builders as a user transcribes torchvision
 * (test/helpers/layer-spec.ts). Fixtures: tools/oracle/cases/vision-pieces.json → test/fixtures/pytorch/vp_*.
 * Every module of the torch model must be ours too, same path, class, output shape and parameters.
 */
import { describe, expect, it } from 'vitest';
import { compareFixture, loadFixtures, modelFor } from '../helpers/oracle.js';

const fixtures = loadFixtures().filter((f) => f.id.startsWith('vp_'));
const limit = (figure: string): number => (figure === 'parameters' || figure.startsWith('optimizer state') ? 0 : figure === 'saved bytes' ? 0.01 : 0.03);

describe('vision builder pieces against PyTorch 1.13 (CPU, fp32)', () => {
  it('has the cases', () => expect(fixtures.length).toBeGreaterThanOrEqual(10));
  for (const fixture of fixtures) {
    it(fixture.id, () => {
      const built = modelFor(fixture);
      if ('pending' in built) throw new Error(built.pending);
      const { comparisons, estimate } = compareFixture(fixture, built.layer);
      for (const c of comparisons) expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(limit(c.figure));
      const ours = new Map(estimate.modules.map((m) => [m.path.join('.'), m]));
      for (const m of fixture.modules) {
        const mine = ours.get(m.path);
        expect(mine?.className, `${m.path} class`).toBe(m.className);
        // A module called more than once (torchvision's shared `relu`) has a row per call: any of them.
        const calls = estimate.modules.filter((row) => row.path.join('.') === m.path).map((row) => row.outputShape);
        if (m.outputShape !== null) expect(calls, `${m.path} output shape`).toContainEqual(m.outputShape);
        // nn.MultiheadAttention calls its `out_proj` Linear functionally: torch's module tree has no
        // executed out_proj, and vram-ts keeps `out_proj.weight`/`.bias` on the attention module.
        const e = m.className === 'MultiheadAttention' ? (mine?.outputShape?.[2] as number) : 0;
        expect(mine?.ownParams, `${m.path} parameters`).toBe(m.params + e * e + e);
      }
      expect(new Set(estimate.modules.map((m) => m.path.join('.'))).size, 'module count').toBe(new Set(fixture.modules.map((m) => m.path)).size);
    });
  }
});
