/**
 * Pipeline ranks (src/memory/pipeline-step.ts with the schedules of src/memory/schedules.ts):
 * a stage's activations follow its schedule's in-flight micro-batches; its model states are its
 * stages' own; receive buffers are one per micro-batch; errors for what is not modelled.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, type Estimate, type Layer } from '../../src/index.js';
import { inFlight, pipelineActions, type PipelineSchedule } from '../../src/parallel/pipeline/schedules.js';
import { seqFromSpecs } from '../helpers/layer-spec.js';

/** n × (Linear(width) + ReLU), then Linear(10): 2n + 1 top-level children. */
function mlp(n: number, width: number): Layer {
  const layers: [string, object][] = [];
  for (let i = 0; i < n; i += 1) layers.push(['linear', { out: width }], ['relu', {}]);
  layers.push(['linear', { out: 10 }]);
  return seqFromSpecs(layers as never);
}

const rankOf = (model: Layer, input: number[], microBatches: number, parallel: object) =>
  estimate(model, { input, device: 'cpu', optimizer: 'adam', microBatches, parallel: { dp: 1, keepOutputs: false, ...parallel } } as never) as Estimate<number>;
const activations = (r: Estimate<number>) => r.timeline.map((e) => e.byCategory.activations as number);

describe('pipeline ranks', () => {
  it("a stage's activations peak at (in flight − 1) micro-batches' plus one micro-batch's own forward peak, and one held output at most (GPipe, 1F1B)", () => {
    fc.assert(
      fc.property(
        fc.constantFrom<PipelineSchedule>('gpipe', '1f1b'),
        fc.integer({ min: 2, max: 4 }),
        fc.integer({ min: 1, max: 6 }),
        fc.nat(),
        fc.integer({ min: 4, max: 64 }),
        (schedule, pp, extra, r, batch) => {
          const m = schedule === '1f1b' ? pp + extra - 1 : extra;
          const stage = r % pp;
          const model = mlp(2 * pp, 32);
          const one = rankOf(model, [batch, 32], 1, { pp, stage, schedule: 'gpipe' });
          const firstBackward = one.timeline.findIndex((e) => e.phase === 'backward');
          const held = activations(one)[firstBackward - 1]!;
          const forwardPeak = Math.max(...activations(one).slice(0, firstBackward));
          const rank = rankOf(model, [batch, 32], m, { pp, stage, schedule });
          const k = inFlight(pipelineActions(schedule, pp, stage, m));
          const most = Math.max(...activations(rank));
          if (stage < pp - 1) {
            // Up to one more output ([batch, 32] fp32): the schedule's names (`output`, a kept send work) hold one past its backward.
            expect(most).toBeGreaterThanOrEqual((k - 1) * held + forwardPeak);
            expect(most).toBeLessThanOrEqual((k - 1) * held + forwardPeak + 128 * batch);
          } else {
            // The final stage also keeps each finished micro-batch's loss (4 B) until the step ends,
            // and the schedule's `output` the last output ([batch, 10] fp32) into the next forward.
            expect(most).toBeGreaterThanOrEqual((k - 1) * held + forwardPeak);
            expect(most).toBeLessThanOrEqual((k - 1) * held + forwardPeak + 4 * (m - 1) + 40 * batch);
          }
        },
      ),
      { numRuns: 25 },
    );
  });

  it('each stage holds its own parameters, once over the stages, and one receive buffer per micro-batch', () => {
    const model = mlp(4, 64);
    const whole = estimate(model, { input: [8, 64], device: 'cpu' }) as Estimate<number>;
    const stages = [0, 1].map((stage) => rankOf(model, [8, 64], 4, { pp: 2, stage }));
    expect(stages[0]!.bytes.parameters + stages[1]!.bytes.parameters).toBe(whole.bytes.parameters);
    // Stage 1 receives [8, 64] fp32 activations (2 KiB) for each of 4 micro-batches; stage 0 the gradients of its output.
    for (const r of stages) expect(r.peak.byCategory.communication).toBeGreaterThanOrEqual(4 * 8 * 64 * 4);
  });

  it('GPipe holds every micro-batch, so its peak is never below 1F1B', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 4 }), fc.integer({ min: 0, max: 4 }), fc.nat(), (pp, extra, r) => {
        const m = pp + extra;
        const model = mlp(2 * pp, 32);
        const [g, f] = (['gpipe', '1f1b'] as const).map((schedule) => rankOf(model, [64, 32], m, { pp, stage: r % pp, schedule }).bytes.peak);
        expect(g).toBeGreaterThanOrEqual(f!);
      }),
      { numRuns: 15 },
    );
  });

  it('refuses what it cannot honour, each with its path', () => {
    const model = mlp(2, 16);
    const issue = (parallel: object, extra: object = {}) => {
      try {
        estimate(model, { input: [4, 16], microBatches: 4, ...extra, parallel } as never);
      } catch (error) {
        return (error as { issues: readonly { path: readonly (string | number)[] }[] }).issues[0]!.path;
      }
      return undefined;
    };
    expect(issue({ dp: 1, pp: 2, stage: 2 })).toEqual(['parallel', 'stage']);
    expect(issue({ dp: 1, stage: 1 })).toEqual(['parallel', 'stage']);
    expect(issue({ dp: 2, pp: 2 })).toEqual(['parallel', 'engine']);
    expect(issue({ dp: 2, pp: 2, engine: 'fsdp2' })).toEqual(['parallel', 'engine']);
    expect(issue({ dp: 1, pp: 8 }, { microBatches: 8 })).toEqual(['parallel', 'pp']);
    expect(issue({ dp: 1, pp: 2, splits: ['9'] })).toEqual(['parallel', 'splits', 0]);
    expect(issue({ dp: 1, pp: 2, schedule: '1f1b' }, { microBatches: 1 })).toEqual(['microBatches']);
    expect(issue({ dp: 1, pp: 2 }, { mode: 'inference' })).toEqual(['parallel', 'pp']);
  });

  it('runs under DDP with one stage per rank', () => {
    const model = mlp(4, 64);
    const alone = rankOf(model, [8, 64], 4, { pp: 2, stage: 0 });
    const ddp = estimate(model, {
      input: [8, 64],
      device: 'cpu',
      optimizer: 'adam',
      microBatches: 4,
      parallel: { engine: 'ddp', dp: 2, pp: 2, stage: 0, keepOutputs: false },
    }) as Estimate<number>;
    expect(ddp.bytes.parameters).toBe(alone.bytes.parameters);
    expect(ddp.bytes.peak).toBeGreaterThan(alone.bytes.peak);
  });
});
