/**
 * Every pipeline rank of vram-ts against torch.distributed.pipelining itself: PyTorch 2.13 on
 * CPU, one gloo process per rank (tools/oracle/pipeline_cpu.py), GPipe, 1F1B and interleaved
 * 1F1B over 2 and 4 ranks and 2-8 micro-batches, with and without `return_outputs`.
 */
import { describe, expect, it } from 'vitest';
import { comparePipelineFixture, loadPipelineFixtures, pipelineTolerance } from '../helpers/pipeline-oracle.js';

const fixtures = loadPipelineFixtures();

describe('fidelity per pipeline rank against torch.distributed.pipelining on CPU (test/fixtures/pipeline-cpu)', () => {
  it('has the measured schedules', () => {
    expect(new Set(fixtures.map((f) => f.case.schedule))).toEqual(new Set(['ScheduleGPipe', 'Schedule1F1B', 'ScheduleInterleaved1F1B']));
    expect(new Set(fixtures.map((f) => f.case.pp))).toEqual(new Set([2, 4]));
  });
  for (const fixture of fixtures) {
    it(`${fixture.id}: every rank's peak within 5%, its parameters and optimizer state exact`, () => {
      for (const c of comparePipelineFixture(fixture)) {
        expect(Math.abs(c.error), `rank ${c.rank} ${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(pipelineTolerance(c));
      }
    });
  }
});
