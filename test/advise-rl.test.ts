/** adviseRl(): every lever's figures are its own options' rlJob, ranked by cost; the guide's colocated TRL job is made to fit. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { issueOf } from './helpers/errors.js';
import { adviseRl, llm, rlJob, type AdviseRlResult, type RlJobOptions } from '../src/index.js';

const GiB = 2 ** 30;
const KINDS = ['none', 'throughput', 'compute', 'hardware', 'quality'];
const model = llm('qwen2.5-0.5b');
/** What torch reports for an 80 GB card in vLLM's logs (--gpu 79.22GiB in docs/guides/rl.md). */
const A800 = 85_061_827_297;

/** What every result holds: each lever's figures are rlJob's on its own options, fitting first by cost, best the first fitting. */
function checkResult(result: AdviseRlResult): void {
  for (const l of result.levers) {
    const j = rlJob(model, l.options);
    expect(l.peak, l.lever).toBe(j.peak);
    expect([l.fits, l.starts, l.peakPhase, l.gpus, l.kvTokens], l.lever).toEqual([
      j.fits && j.engine.starts,
      j.engine.starts,
      j.peakPhase,
      j.gpus.total,
      j.engine.kvCache.tokens,
    ]);
    expect(l.headroom, l.lever).toBe(j.usable - Math.max(...j.phases.map((p) => p.peak)));
    expect(l.levers.join('+')).toBe(l.lever);
    expect(KINDS).toContain(l.cost.kind);
  }
  const fitting = result.levers.filter((l) => l.fits);
  expect(result.levers.slice(0, fitting.length)).toEqual(fitting);
  for (let i = 1; i < fitting.length; i += 1) {
    const [a, b] = [fitting[i - 1]!, fitting[i]!];
    const order = KINDS.indexOf(a.cost.kind) - KINDS.indexOf(b.cost.kind) || a.levers.length - b.levers.length || b.headroom - a.headroom;
    expect(order, `${a.lever} before ${b.lever}`).toBeLessThanOrEqual(0);
  }
  const rest = result.levers.slice(fitting.length);
  for (let i = 1; i < rest.length; i += 1) expect(rest[i - 1]!.headroom).toBeGreaterThanOrEqual(rest[i]!.headroom);
  expect(result.best).toBe(fitting[0]);
}

const checkpoint = { modules: Array.from({ length: 24 }, (_, i) => `model.layers.${i}`) };
const actor = (batch: number, seq: number) => ({
  update: { input: [batch, seq], precision: 'amp-bf16' as const, optimizer: 'adam' as const, checkpoint },
  logProbs: { input: [batch, seq], precision: 'amp-bf16' as const },
});

describe('adviseRl', () => {
  it("the guide's TRL job (Qwen2.5-0.5B, 8 × 4096-token completions, vLLM colocated at TRL's 0.3 of an 80 GB card) does not fit; lowering the utilization makes it fit at no cost", () => {
    const options: RlJobOptions = {
      framework: 'trl',
      totalBytes: A800,
      trainer: { config: { num_generations: 8, max_completion_length: 4096 }, prompt: 256 },
    };
    const a = adviseRl(model, options);
    expect(a.baseline.fits).toBe(false);
    expect(a.baseline.peak).toBe(rlJob(model, options).peak);
    expect(a.baseline.gpuMemoryUtilization).toBe(0.3);
    const best = a.best!;
    expect(best).toMatchObject({ lever: 'rollout-utilization', fits: true, gpuMemoryUtilization: 0.02, cost: { kind: 'none' } });
    expect(rlJob(model, best.options).fits).toBe(true);
    // The pool still holds TRL's 8 sequences of 256 + 4096 tokens.
    expect(best.kvTokens).toBeGreaterThanOrEqual(8 * 4352);
    // Sleep mode and the smaller micro-batch fit too, at a cost; the skipped levers say why.
    expect(a.levers.filter((l) => l.fits).map((l) => l.lever)).toEqual(expect.arrayContaining(['micro-batches', 'sleep']));
    expect(a.skipped.map((s) => s.lever)).toContain('separate-engine');
    checkResult(a);
  });

  it('OpenRLHF colocated with sleep at 0.95: the utilization that fits, the engine on a GPU of its own (one GPU more), the optimizer offloaded', () => {
    const options: RlJobOptions = { framework: 'openrlhf', totalBytes: A800, rollout: { colocate: true, sleep: true }, trainer: actor(8, 4352) };
    const a = adviseRl(model, options);
    expect(a.baseline.fits).toBe(false);
    const byId = new Map(a.levers.map((l) => [l.lever, l]));
    const apart = byId.get('separate-engine')!;
    expect(apart).toMatchObject({ fits: true, gpus: 2, cost: { kind: 'hardware' } });
    expect(apart.options.rollout).toMatchObject({ colocate: false, engines: 1 });
    expect(apart.options.rollout!.sleep).toBeUndefined();
    const util = byId.get('rollout-utilization')!;
    expect(util.fits).toBe(true);
    expect(util.gpuMemoryUtilization).toBeLessThan(0.95);
    // The most that fits: one step more does not.
    expect(rlJob(model, { ...options, rollout: { ...options.rollout, gpuMemoryUtilization: util.gpuMemoryUtilization + 0.01 } }).fits).toBe(false);
    expect(byId.get('optimizer-offload')?.fits).toBe(true);
    checkResult(a);
  });

  it("verl's update too large for any one lever: pairs are tried, cheapest first, each its own rlJob", () => {
    const options: RlJobOptions = {
      framework: 'verl',
      totalBytes: 24 * GiB,
      rollout: { tensorParallelSize: 1 },
      trainer: { ...actor(8, 2048), update: { input: [8, 2048], precision: 'amp-bf16', optimizer: 'adam' } },
    };
    const a = adviseRl(model, options);
    expect(a.baseline.fits).toBe(false);
    expect(a.levers.some((l) => l.levers.length === 2)).toBe(true);
    checkResult(a);
  });

  it("invalid options are rlJob's VramErrors, with their paths", () => {
    const trl = { config: { max_completion_length: 8 }, prompt: 8 };
    expect(issueOf(() => adviseRl(model, { framework: 'nemo' as never, totalBytes: A800, trainer: trl }))).toBe('framework:bad-option');
    expect(issueOf(() => adviseRl(model, { framework: 'trl', totalBytes: A800, rollout: { maxNumSeqs: 4 }, trainer: trl }))).toBe(
      'rollout.maxNumSeqs:bad-option',
    );
    expect(issueOf(() => adviseRl(model, { framework: 'verl', totalBytes: A800, trainer: actor(1, 8) }))).toBe('gpus:bad-option');
    expect(issueOf(() => adviseRl(model, { framework: 'trl', trainer: trl } as RlJobOptions))).toBe('totalBytes:missing-option');
    expect(issueOf(() => adviseRl(model, { framework: 'trl', totalBytes: A800, bogus: 1, trainer: trl } as RlJobOptions))).toBe('bogus:unknown-option');
  });

  it("property: every lever's peak is rlJob(model, lever.options).peak, and the ranking holds", () => {
    const job = fc.oneof(
      fc.record({
        framework: fc.constant('trl' as const),
        totalBytes: fc.integer({ min: 6, max: 40 }).map((g) => g * GiB),
        rollout: fc.record({ sleep: fc.boolean() }, { requiredKeys: [] }),
        trainer: fc.record({
          config: fc.record({
            per_device_train_batch_size: fc.constantFrom(2, 4, 8),
            num_generations: fc.constant(2),
            max_completion_length: fc.integer({ min: 16, max: 512 }),
            gradient_checkpointing: fc.boolean(),
          }),
          prompt: fc.integer({ min: 8, max: 128 }),
        }),
      }),
      fc.record({
        framework: fc.constantFrom('verl' as const, 'openrlhf' as const),
        totalBytes: fc.integer({ min: 6, max: 40 }).map((g) => g * GiB),
        rollout: fc.record({ tensorParallelSize: fc.constant(1), gpuMemoryUtilization: fc.constantFrom(0.3, 0.5, 0.9), colocate: fc.boolean() }),
        trainer: fc.record({ batch: fc.constantFrom(1, 2, 4, 8), seq: fc.integer({ min: 16, max: 1024 }), paramOffload: fc.boolean() }),
      }),
    );
    fc.assert(
      fc.property(job, (j) => {
        let options: RlJobOptions;
        if (j.framework === 'trl') options = j;
        else {
          const { batch, seq, paramOffload } = j.trainer as { batch: number; seq: number; paramOffload: boolean };
          const { update, logProbs } = actor(batch, seq);
          const { checkpoint: _c, ...plain } = update;
          options = {
            framework: j.framework,
            totalBytes: j.totalBytes,
            rollout: { ...j.rollout, ...(j.framework === 'openrlhf' && !j.rollout.colocate ? { engines: 1 } : {}) },
            trainer: { update: seq % 2 === 0 ? update : plain, logProbs, paramOffload },
          };
        }
        checkResult(adviseRl(model, options));
      }),
      { numRuns: 16 },
    );
  }, 120_000);
});
