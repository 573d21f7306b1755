/**
 * One rank of vram-ts against the engines themselves, run on a CPU with a fake process group
 * (rank r of a world of W in one process, every collective completing in place):
 * - tools/oracle/distributed_cpu.py, PyTorch 1.13: DDP and ZeroRedundancyOptimizer over worlds
 *   2-8, first and last ranks, bucket caps, `gradient_as_bucket_view`, accumulation under
 *   `no_sync`, the greedy partition;
 * - tools/oracle/fsdp2_cpu.py, PyTorch 2.13: FSDP2 (`fully_shard`) on an MLP and on real
 *   transformers 4.40.2 Llama/Qwen2 decoders: worlds 2-8 with padded shards, first and last
 *   ranks, reshard after forward or not, mixed precision, root-only and partial wrapping,
 *   accumulation with and without gradient sync; DDP again on 2.13.
 */
import { describe, expect, it } from 'vitest';
import { DISTRIBUTED_FOLDERS, compareDistributedFixture, loadDistributedFixtures, rankTolerance } from '../helpers/distributed-oracle.js';

for (const folder of DISTRIBUTED_FOLDERS) {
  const fixtures = loadDistributedFixtures(folder);
  describe(`fidelity per rank against the engines on CPU (test/fixtures/${folder})`, () => {
    it('has the measured cases', () => {
      expect(fixtures.length).toBeGreaterThanOrEqual(20);
      expect(new Set(fixtures.map((f) => f.case.world)).size).toBeGreaterThanOrEqual(3);
    });
    for (const fixture of fixtures) {
      it(`${fixture.id}: the rank's peak within 5%, its optimizer state exact`, () => {
        for (const c of compareDistributedFixture(fixture)) {
          expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(rankTolerance(c));
        }
      });
    }
  });
}

describe('ranks of one job', () => {
  const byId = new Map(DISTRIBUTED_FOLDERS.flatMap((folder) => loadDistributedFixtures(folder)).map((f) => [f.id, f]));
  const ours = (id: string, figure: string) => compareDistributedFixture(byId.get(id)!).find((r) => r.figure.startsWith(figure))!;
  it('ZeroRedundancyOptimizer: ranks 0 and 7 of 8 differ by the state each owns', () => {
    const [a, b] = [ours('zero_mlp_w8_r0_adam', 'optimizer state'), ours('zero_mlp_w8_r7_adam', 'optimizer state')];
    expect(a.ours - b.ours).toBe(a.pytorch - b.pytorch);
  });
  it('FSDP2: the last rank of 3 holds a shorter chunk of every padded parameter', () => {
    const [a, b] = [ours('fsdp_mlp_w3_r0_adam', 'train peak'), ours('fsdp_mlp_w3_r2_adam', 'train peak')];
    expect(a.ours - b.ours).toBe(a.pytorch - b.pytorch);
  });
});
