/**
 * One rank of vram-ts against PyTorch's own DDP and ZeroRedundancyOptimizer, run by
 * tools/oracle/distributed_cpu.py on PyTorch 1.13 CPU with a fake process group: rank r of a world
 * of W in one process, every collective completing in place. The fixtures cover worlds 2-8, first
 * and last ranks, bucket caps, `gradient_as_bucket_view`, gradient accumulation under `no_sync`,
 * and ZeroRedundancyOptimizer's greedy partition.
 */
import { describe, expect, it } from 'vitest';
import { compareDistributedFixture, loadDistributedFixtures, rankTolerance } from '../helpers/distributed-oracle.js';

const fixtures = loadDistributedFixtures();

describe('fidelity per rank against PyTorch 1.13 DDP / ZeroRedundancyOptimizer (test/fixtures/distributed-cpu)', () => {
  it('has the measured cases', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(20);
    expect(new Set(fixtures.map((f) => f.case.world))).toEqual(new Set([2, 4, 8]));
  });
  for (const fixture of fixtures) {
    it(`${fixture.id}: the rank's peak within 5%, its optimizer state exact`, () => {
      for (const c of compareDistributedFixture(fixture)) {
        expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(rankTolerance(c));
      }
    });
  }
  it('the ranks of one ZeroRedundancyOptimizer job differ as the partition says', () => {
    // World 8, ranks 0 and 7: same model, same step; only the state each rank owns differs.
    const byId = new Map(fixtures.map((f) => [f.id, f]));
    const [first, last] = [byId.get('zero_mlp_w8_r0_adam')!, byId.get('zero_mlp_w8_r7_adam')!];
    const [a, b] = [compareDistributedFixture(first), compareDistributedFixture(last)];
    const state = (rows: typeof a) => rows.find((r) => r.figure.startsWith('optimizer state'))!.ours;
    expect(state(a) - state(b)).toBe(first.train.adam!.optimizerStateBytes - last.train.adam!.optimizerStateBytes);
  });
});
