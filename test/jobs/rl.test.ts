/**
 * Whole RL jobs on one GPU: the frameworks' placement of the rollout engine beside the trainer,
 * phase by phase (src/jobs/rl.ts).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { issueOf } from '../helpers/errors.js';
import { estimate, grpoStep, llm, rlJob, type RlJob } from '../../src/index.js';

const GiB = 2 ** 30;
const model = llm('qwen2.5-0.5b');
const total = 80 * GiB;
const trl = { config: { per_device_train_batch_size: 4, num_generations: 4, max_completion_length: 64 }, prompt: 32 };
const actor = { update: { input: [2, 96], optimizer: 'adam' as const }, logProbs: { input: [4, 96] } };

/** The laws of every job: each phase is its trainer and engine; the peak is the highest phase (or the engine's own GPUs). */
function laws(j: RlJob): void {
  for (const p of j.phases) expect(p.peak).toBe(p.trainer + p.engine);
  const highest = Math.max(...j.phases.map((p) => p.peak));
  expect(j.peak).toBe(j.colocated ? highest : Math.max(highest, j.engine.footprint));
  expect(j.fits).toBe(j.peak <= j.totalBytes);
  expect(j.gpus.total).toBe(j.gpus.trainer + j.gpus.rollout);
}

describe('rlJob', () => {
  it("TRL: grpoStep's phases with the engine TRL builds; the engine's share named in each phase", () => {
    const j = rlJob(model, { framework: 'trl', totalBytes: total, trainer: trl });
    const g = grpoStep(model, { ...trl.config, use_vllm: true }, { prompt: 32, gpuTotalBytes: total });
    expect(j.phases.map((p) => p.peak)).toEqual(g.phases.map((p) => p.peak));
    expect(j.phases.find((p) => p.name === 'rollout')!.engine).toBe(j.engine.footprint);
    expect(j.phases.find((p) => p.name === 'backward')!.engine).toBe(j.engine.resident.idle);
    expect(j.engine.settings.gpuMemoryUtilization).toBe(0.3);
    laws(j);
    const asleep = rlJob(model, { framework: 'trl', totalBytes: total, rollout: { sleep: true }, trainer: trl });
    expect(asleep.phases.find((p) => p.name === 'backward')!.engine).toBe(asleep.engine.resident.asleep);
    expect(asleep.peak).toBeLessThan(j.peak);
  });

  it("verl: the engine asleep (level 2) after the rollout; the update is the actor's estimate; util 0.5, TP 2 by default", () => {
    const j = rlJob(model, { framework: 'verl', totalBytes: total, gpus: 2, trainer: actor });
    expect(j.engine.settings).toMatchObject({ gpuMemoryUtilization: 0.5, tensorParallelSize: 2, maxNumSeqs: 256, maxNumBatchedTokens: 8192 });
    const update = estimate(model, { ...actor.update, mode: 'train' });
    expect(j.phases.find((p) => p.name === 'update')).toMatchObject({ trainer: update.peak.bytes, engine: j.engine.resident.asleep });
    expect(j.phases.find((p) => p.name === 'rollout')!.engine).toBe(j.engine.footprint);
    laws(j);
    // Without free_cache_engine the engine keeps its weights and KV through the update.
    const awake = rlJob(model, { framework: 'verl', totalBytes: total, gpus: 2, rollout: { sleep: false }, trainer: actor });
    expect(awake.phases.find((p) => p.name === 'update')!.engine).toBe(awake.engine.resident.idle);
    // Offloaded parameters and optimizer state leave the GPU during the rollout.
    const offloaded = rlJob(model, { framework: 'verl', totalBytes: total, gpus: 2, trainer: { ...actor, paramOffload: true, optimizerOffload: true } });
    expect(offloaded.phases.find((p) => p.name === 'rollout')!.trainer).toBe(0);
  });

  it('OpenRLHF: engines on GPUs of their own by default (util 0.95), colocated with sleep at level 1 when asked', () => {
    const apart = rlJob(model, { framework: 'openrlhf', totalBytes: total, rollout: { engines: 2 }, trainer: actor });
    expect(apart.colocated).toBe(false);
    expect(apart.gpus).toEqual({ trainer: 1, rollout: 2, total: 3 });
    expect(apart.phases.every((p) => p.engine === 0)).toBe(true);
    laws(apart);
    const together = rlJob(model, { framework: 'openrlhf', totalBytes: total, rollout: { colocate: true, sleep: true }, trainer: actor });
    expect(together.colocated).toBe(true);
    expect(together.phases.find((p) => p.name === 'rollout')!.engine).toBe(together.engine.footprint);
    // Awake without sleep, another process keeps its freed activations reserved.
    const awake = rlJob(model, { framework: 'openrlhf', totalBytes: total, rollout: { colocate: true }, trainer: actor });
    expect(awake.phases.find((p) => p.name === 'update')!.engine).toBe(awake.engine.resident.idle + awake.engine.resident.cachedActivations);
    laws(together);
  });

  it('bad combinations are errors with a path', () => {
    expect(issueOf(() => rlJob(model, { framework: 'trl', totalBytes: total, rollout: { maxNumSeqs: 4 }, trainer: trl }))).toBe(
      'rollout.maxNumSeqs:bad-option',
    );
    expect(issueOf(() => rlJob(model, { framework: 'trl', totalBytes: total, rollout: { engines: 2 }, trainer: trl }))).toBe('rollout.engines:bad-option');
    expect(issueOf(() => rlJob(model, { framework: 'verl', totalBytes: total, trainer: actor }))).toBe('gpus:bad-option');
    expect(issueOf(() => rlJob(model, { framework: 'openrlhf', totalBytes: total, trainer: actor }))).toBe('rollout.engines:missing-option');
    expect(issueOf(() => rlJob(model, { framework: 'openrlhf', totalBytes: total, rollout: { sleep: true, engines: 1 }, trainer: actor }))).toBe(
      'rollout.sleep:bad-option',
    );
    expect(issueOf(() => rlJob(model, { framework: 'nemo' as never, totalBytes: total, trainer: actor }))).toBe('framework:bad-option');
    expect(issueOf(() => rlJob(model, { framework: 'verl', gpus: 2, trainer: actor }))).toBe('totalBytes:missing-option');
  });

  it('property: a larger rollout utilization never lowers the rollout phase, and the job fits only if every phase does', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.2, max: 0.9, noNaN: true }), fc.double({ min: 0.01, max: 0.09, noNaN: true }), (util, more) => {
        const a = rlJob(model, { framework: 'verl', totalBytes: total, gpus: 2, rollout: { gpuMemoryUtilization: util }, trainer: actor });
        const b = rlJob(model, { framework: 'verl', totalBytes: total, gpus: 2, rollout: { gpuMemoryUtilization: util + more }, trainer: actor });
        expect(b.phases[1]!.peak).toBeGreaterThanOrEqual(a.phases[1]!.peak);
        laws(a);
      }),
      { numRuns: 20 },
    );
  });
});

describe("rlJob's verdict counts the trainer process's runtime", () => {
  const model = llm('qwen2.5-0.5b');
  const job = (totalBytes: number) =>
    rlJob(model, { framework: 'trl', totalBytes, trainer: { config: { per_device_train_batch_size: 8, max_completion_length: 512 }, prompt: 256 } });
  it('usable is the total less the CUDA context and two cuBLAS workspaces; fits iff the highest phase stays within it', () => {
    const j = job(80 * 2 ** 30);
    expect(j.runtime.map((l) => l.label)).toEqual(['CUDA context', 'cuBLAS workspace (2 handles)']);
    expect(j.usable).toBe(j.totalBytes - j.runtime.reduce((s, l) => s + l.bytes, 0));
    expect(j.fits).toBe(Math.max(...j.phases.map((p) => p.peak)) <= j.usable);
    fc.assert(
      fc.property(fc.integer({ min: 8, max: 160 }), (gib) => {
        const k = job(gib * 2 ** 30);
        return k.fits === Math.max(...k.phases.map((p) => p.peak)) <= k.usable;
      }),
      { numRuns: 12 },
    );
  });
});
