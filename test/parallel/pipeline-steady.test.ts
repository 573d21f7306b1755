/**
 * A pipeline rank's steady phase written once (src/parallel/pipeline/steady.ts): a 1F1B rank
 * simulates its warm-up, one steady period counted over and its cool-down, and every figure is
 * the one of the step simulated micro-batch by micro-batch (STEADY.on = false), exactly.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { estimate, evaluate, fromHFConfig, sym, type Estimate, type Layer, type PipelineSchedule } from '../../src/index.js';
import { stepPeakAt } from '../../src/estimate.js';
import { STEADY } from '../../src/parallel/pipeline/rank.js';
import { pipelineActions } from '../../src/parallel/pipeline/schedules.js';
import { steadyActions } from '../../src/parallel/pipeline/steady.js';
import { seqFromSpecs } from '../helpers/layer-spec.js';

/** n × (Linear(width) + ReLU), then Linear(10). */
function mlp(n: number, width: number): Layer {
  const layers: [string, object][] = [];
  for (let i = 0; i < n; i += 1) layers.push(['linear', { out: width }], ['relu', {}]);
  layers.push(['linear', { out: 10 }]);
  return seqFromSpecs(layers as never);
}

function tinyLlama(layers: number): Layer {
  const config = {
    model_type: 'llama',
    rms_norm_eps: 1e-6,
    max_position_embeddings: 64,
    vocab_size: 100,
    tie_word_embeddings: false,
    hidden_size: 32,
    intermediate_size: 48,
    num_hidden_layers: layers,
    num_attention_heads: 4,
    num_key_value_heads: 2,
  };
  return fromHFConfig(config, { transformers: '4.40.2', attention: 'eager', useCache: false });
}

interface Job {
  readonly llama: boolean;
  readonly schedule: PipelineSchedule;
  readonly pp: number;
  readonly stage: number;
  readonly m: number;
  readonly checkpoint: boolean;
  readonly symbolic: boolean;
  readonly batch: number;
  readonly cuda: boolean;
  readonly keepOutputs: boolean;
  readonly ddp: boolean;
}

function estimateOf(job: Job, steady: boolean): Estimate {
  const v = job.schedule === 'interleaved-1f1b' ? 2 : 1;
  const model = job.llama ? tinyLlama(job.pp * v + 1) : mlp(job.pp * v + 2, 16);
  const width = job.llama ? 8 : 16;
  STEADY.on = steady;
  return estimate(model, {
    input: [job.symbolic ? sym('B', { max: 64 }) : job.batch, width],
    device: job.cuda ? 'cuda' : 'cpu',
    optimizer: 'adam',
    microBatches: job.m,
    ...(job.checkpoint && !job.llama ? { checkpoint: { within: '', every: 2 } } : {}),
    parallel: {
      ...(job.ddp ? { engine: 'ddp', dp: 2 } : { dp: 1 }),
      pp: job.pp,
      stage: job.stage,
      schedule: job.schedule,
      ...(v > 1 ? { virtualStages: v } : {}),
      keepOutputs: job.keepOutputs,
    },
  });
}

/** What a search or a report reads of a rank, at symbol values `env`. */
function figures(r: Estimate, env: Readonly<Record<string, number>>) {
  const at = (d: unknown) => evaluate(d as never, env);
  const steady = r.steps.steady!;
  const first = r.steps.first!;
  return {
    bytes: Object.fromEntries(Object.entries(r.bytes).map(([k, d]) => [k, at(d)])),
    peak: { phase: r.peak.phase, label: r.peak.label, byCategory: Object.fromEntries(Object.entries(r.peak.byCategory).map(([k, d]) => [k, at(d)])) },
    candidates: r.peak.candidates.map((c) => [at(c.bytes), c.label, c.event]),
    steady: [at(steady.peak), at(steady.baseline), at(steady.end), stepPeakAt(steady)(env)],
    first: [at(first.peak), at(first.baseline), at(first.end), stepPeakAt(first)(env)],
  };
}

/** Events the rank's step was simulated with (its compact program, where it has one). */
function eventsSimulated(r: Estimate): number {
  const step = r.steps.steady as unknown as Record<symbol, () => { program: { events: readonly unknown[] } }>;
  return Object.getOwnPropertySymbols(step).map((s) => step[s]!())[0]!.program.events.length;
}

const jobs = fc
  .record({
    llama: fc.boolean(),
    schedule: fc.constantFrom<PipelineSchedule>('1f1b', '1f1b', '1f1b', 'gpipe', 'interleaved-1f1b'),
    pp: fc.integer({ min: 2, max: 6 }),
    stage: fc.nat(),
    m: fc.integer({ min: 1, max: 40 }),
    checkpoint: fc.boolean(),
    symbolic: fc.boolean(),
    batch: fc.integer({ min: 1, max: 6 }),
    cuda: fc.boolean(),
    keepOutputs: fc.boolean(),
    ddp: fc.boolean(),
  })
  .map((job): Job => {
    // DDP runs around one stage per rank only.
    const stage = job.stage % job.pp;
    const ddp = job.ddp && job.schedule !== 'interleaved-1f1b';
    // 1F1B needs m ≥ pp; the interleaved schedule a multiple of its rounds (max(1, m // pp)).
    if (job.schedule === '1f1b') return { ...job, stage, ddp, m: Math.max(job.m, job.pp) };
    if (job.schedule === 'interleaved-1f1b') return { ...job, stage, ddp, m: job.m < job.pp ? job.m : job.pp * Math.floor(job.m / job.pp) };
    return { ...job, stage, ddp };
  });

describe('the steady phase of a pipeline rank', () => {
  afterEach(() => {
    STEADY.on = true;
  });

  it('gives every figure of the step simulated micro-batch by micro-batch: peaks, labels, totals, ends, first step (law)', () => {
    fc.assert(
      fc.property(jobs, (job) => {
        const fast = estimateOf(job, true);
        const whole = estimateOf(job, false);
        for (const env of job.symbolic ? [1, 2, 5, 64].map((B) => ({ B })) : [{}]) expect(figures(fast, env)).toEqual(figures(whole, env));
        if (job.symbolic) expect(String(fast.bytes.peak)).toBe(String(whole.bytes.peak));
        else {
          // What reads every event (the timeline, the allocator's replay) gets the whole step.
          expect(fast.steps.steady!.program.log.length).toBe(whole.steps.steady!.program.log.length);
          if (job.cuda) expect(fast.bytes.reserved).toBe(whole.bytes.reserved);
        }
        // The fast path ran where it saves something: fewer events simulated than the step has.
        const steady = steadyActions(pipelineActions(job.schedule, job.pp, job.stage, job.m), job.schedule, job.pp, job.stage, job.m);
        if (steady !== null) expect(eventsSimulated(fast)).toBeLessThan(eventsSimulated(whole));
        else expect(eventsSimulated(fast)).toBe(eventsSimulated(whole));
      }),
      { numRuns: 80 },
    );
  });

  it("simulates a 1F1B rank's step in events that do not grow with its micro-batches", () => {
    const job: Job = {
      llama: false,
      schedule: '1f1b',
      pp: 4,
      stage: 1,
      m: 12,
      checkpoint: false,
      symbolic: false,
      batch: 2,
      cuda: true,
      keepOutputs: true,
      ddp: false,
    };
    const counts = [12, 40, 400].map((m) => eventsSimulated(estimateOf({ ...job, m }, true)));
    expect(new Set(counts).size).toBe(1);
    expect(estimateOf({ ...job, m: 400 }, true).timeline.length).toBeGreaterThan(10 * counts[0]!);
  });

  it('is tried on 1F1B only, past max(2, w) + w + 1 micro-batches (w: the warm-up)', () => {
    expect(steadyActions(pipelineActions('1f1b', 4, 0, 9), '1f1b', 4, 0, 9)).toBeNull();
    const steady = steadyActions(pipelineActions('1f1b', 4, 0, 10), '1f1b', 4, 0, 10)!;
    expect([steady.times, steady.actions.filter((a) => a.kind === 'backward').length]).toEqual([2, 9]);
    // The last stage (w = 1) of 8: 4 micro-batches stand for the steady loop.
    expect(steadyActions(pipelineActions('1f1b', 8, 7, 8), '1f1b', 8, 7, 8)!.actions.filter((a) => a.kind === 'forward')).toHaveLength(4);
    expect(steadyActions(pipelineActions('gpipe', 4, 0, 40), 'gpipe', 4, 0, 40)).toBeNull();
    expect(steadyActions(pipelineActions('interleaved-1f1b', 4, 0, 40, 2), 'interleaved-1f1b', 4, 0, 40)).toBeNull();
  });
});
