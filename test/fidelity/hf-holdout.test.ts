/**
 * Issue 22's holdout sets on PyTorch 2.13 CPU (tools/oracle/holdout.py --torch2: seeds 4571 and 5701
 * for holdout 1, 4572 and 5702 for holdout 2, 4573 and 5703 for holdout 3, 4574 and 5704 for holdout 4, 4575 and 5705 for holdout 5 (each
 * measured after the rule changes before it); every family, eager or sdpa), each measured once and
 * compared once before any rule was changed for it. What they showed was then fixed where the cause
 * was found; the cases whose cause is not fixed yet are listed here with what misses, so that a fix
 * (or a regression) shows.
 * Everything else in them holds to the real-code tolerances (parameters exact, saved bytes 1%,
 * peaks 3%).
 */
import { describe, expect, it } from 'vitest';
import { compareFixture, loadFixtures, modelFor, tolerance } from '../helpers/oracle.js';

/** Still outside tolerance: the figure that misses, and what is known of why. */
const KNOWN_MISSES: Readonly<Record<string, { readonly figures: readonly string[]; readonly why: string }>> = {
  // Holdout 1's Qwen3-MoE 5.18 grouped_mm inference (ours 3.4-3.6% high) was fixed after holdout 4: `proj_out`
  // rebound lets the product go, the function's locals (perm, sorted ids, histc's float copy) live to its return,
  // the router logits to the block's, and the expert loops add into one running sum in place.
  // Holdout 4 (measured and compared once after the rules of holdouts 1-3) showed five, all since fixed: two
  // Mixtral training peaks (5.x experts' backward node by node, as holdout 3's one), Gemma 2/3 4.57's masks and
  // rotary modules built whatever the layer types, Qwen2 4.57's enable_gqa repeat held to sdpa's return (as
  // holdout 2's Mistral).
  // Holdout 5 (measured and compared once after all of the above): every case within tolerance.
};

for (const folder of ['1', '2', '3', '4', '5'].flatMap((set) => [`hf-4.57.6-holdout${set}`, `hf-5.18.0-holdout${set}`])) {
  const fixtures = loadFixtures(folder);
  describe(`${folder} (measured once and compared once; later rules were checked on it too)`, () => {
    it('has 33 cases over every family of the catalog', () => {
      expect(fixtures.length).toBe(33);
      expect(new Set(fixtures.map((f) => String(f.case.config?.model_type))).size).toBe(11);
    });
    for (const fixture of fixtures)
      it(fixture.id, () => {
        const built = modelFor(fixture);
        if ('pending' in built) throw new Error(built.pending);
        const { comparisons } = compareFixture(fixture, built.layer);
        const known = KNOWN_MISSES[fixture.id];
        for (const c of comparisons) {
          if (known?.figures.includes(c.figure) === true) continue;
          expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(tolerance(c));
        }
        if (known !== undefined) {
          const misses = comparisons.filter((c) => known.figures.includes(c.figure) && Math.abs(c.error) > tolerance(c));
          expect(misses.length, `${fixture.id} is listed as a known miss (${known.why}) but now holds: take it off the list`).toBeGreaterThan(0);
        }
      });
  });
}
