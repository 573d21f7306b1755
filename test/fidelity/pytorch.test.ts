/**
 * vram-ts against real PyTorch: every fixture the oracle wrote (tools/oracle, committed under
 * test/fixtures/pytorch) is rebuilt with vram-ts and every figure compared within the issues'
 * tolerances. Cases the library cannot build yet are listed as pending with their reason.
 */
import { describe, expect, it } from 'vitest';
import { categoryOf, compareFixture, loadFixtures, modelFor, tolerance } from '../helpers/oracle.js';

const fixtures = loadFixtures();

describe('fidelity against PyTorch 1.13 (CPU, fp32)', () => {
  it('has the cases the oracle promised (at least 40, CNN and transformer)', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(40);
    expect(fixtures.filter((f) => categoryOf(f) === 'cnn').length).toBeGreaterThanOrEqual(20);
    expect(fixtures.filter((f) => categoryOf(f) === 'transformer').length).toBeGreaterThanOrEqual(10);
  });

  for (const fixture of fixtures) {
    const built = modelFor(fixture);
    if ('pending' in built) {
      it.todo(`${fixture.id}: pending — ${built.pending}`);
      continue;
    }
    it(`${fixture.id}`, () => {
      const { comparisons, estimate } = compareFixture(fixture, built.layer);
      for (const c of comparisons) {
        expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(tolerance(c));
      }
      // Output shapes and parameters, module by module, where the module trees coincide.
      const ours = new Map(estimate.modules.map((m) => [m.path.join('.'), m]));
      let matched = 0;
      for (const m of fixture.modules) {
        const mine = ours.get(m.path);
        // Modules returning tuples have no single output shape in the fixture.
        if (mine === undefined || mine.className !== m.className || m.outputShape === null) continue;
        matched += 1;
        // A module called more than once (torchvision's shared `relu`) has a row per call: any of them.
        const calls = estimate.modules.filter((row) => row.path.join('.') === m.path).map((row) => row.outputShape);
        expect(calls, `${m.path} output shape`).toContainEqual(m.outputShape);
        expect(mine.ownParams, `${m.path} parameters`).toBe(m.params);
      }
      // Every module that ran (an MBConv without a residual never calls its StochasticDepth).
      if (categoryOf(fixture) === 'cnn') expect(matched).toBe(fixture.modules.filter((m) => m.outputShape !== null).length);
    });
  }
});
