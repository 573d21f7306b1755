/**
 * fromDeepSpeedConfig (src/config/deepspeed.ts): ten real DeepSpeed configs (verbatim from
 * DeepSpeed's repository and transformers' DeepSpeed tests: test/fixtures/configs/deepspeed/sources.json)
 * each read into options whose estimate equals, exactly, the estimate of the options written out by
 * hand; real configs vram-ts refuses, with their paths; "auto" without the context that fills it;
 * and the laws: DeepSpeed's defaults are vram-ts's, reading ignores key order, and the batch sizes
 * always multiply out as DeepSpeed asserts.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { issuesOf as issues } from '../helpers/errors.js';
import { estimate, fromDeepSpeedConfig, llm, type VramError, type DeepSpeedContext, type EstimateOptions } from '../../src/index.js';
import { DEEPSPEED_DEFAULTS, deepspeedSettings } from '../../src/parallel/engines/deepspeed/settings.js';

const dir = new URL('../fixtures/configs/deepspeed/', import.meta.url);
const fixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(new URL(`${name}.json`, dir), 'utf8'));
const sources = JSON.parse(readFileSync(new URL('sources.json', dir), 'utf8')) as { configs: { name: string; use: string; commit: string; url: string }[] };

const model = llm('qwen2.5-0.5b');
const H = 896; // qwen2.5-0.5b's hidden_size
const SEQ = 128;
/** The estimate less its echo of the plan (the reading writes it in full, defaults and all: compared as settings below) and its trace (closures, one per trace). */
const run = (options: EstimateOptions) => {
  const { parallel: _plan, ir: _trace, ...figures } = estimate(model, { timeline: false, ...options });
  return figures;
};
/** The engine's settings a plan resolves to (DeepSpeed's defaults for what it leaves out). */
const settingsOf = (plan: EstimateOptions['parallel']) =>
  deepspeedSettings(plan!.zero!, plan!.dp, 0, {
    ...plan!.deepspeed,
    offloadOptimizer: plan!.offload?.optimizer === true,
    offloadParam: plan!.offload?.parameters === true,
  });

/** The Trainer's arguments for the transformers test configs: batch 1, no accumulation, two GPUs. */
const trainer = (precision: { bf16?: boolean; fp16?: boolean }): DeepSpeedContext => ({
  trainer: { perDeviceTrainBatchSize: 1, gradientAccumulationSteps: 1, worldSize: 2, ...precision },
  hiddenSize: H,
});

/** Each config, the context it runs in, and the flags it means, written out by hand. */
const CASES: readonly { name: string; context: DeepSpeedContext; micro: number; explicit: Omit<EstimateOptions, 'input'> }[] = [
  {
    // bf16, AdamW (FusedAdam), ZeRO-3 with 5e7 reduce bucket, sub-groups of 1e12.
    name: 'ds-sdma-zero3',
    context: { worldSize: 2 },
    micro: 1,
    explicit: {
      precision: 'bf16',
      optimizer: { name: 'adamw', impl: 'fused' },
      microBatches: 1,
      parallel: { engine: 'deepspeed', dp: 2, zero: 3, deepspeed: { reduceBucketSize: 50_000_000, overlapComm: true, subGroupSize: 1e12 } },
    },
  },
  // train_batch_size 4 over 2 GPUs, no accumulation: micro-batches of 2; fp16; the client's optimizer.
  { name: 'ds-megatron-bs4-zero1', context: { worldSize: 2 }, micro: 2, explicit: { precision: 'fp16', parallel: { engine: 'deepspeed', dp: 2, zero: 1 } } },
  { name: 'ds-megatron-bs8-zero1', context: { worldSize: 4 }, micro: 2, explicit: { precision: 'fp16', parallel: { engine: 'deepspeed', dp: 4, zero: 1 } } },
  {
    name: 'ds-megatron-scheduler-zero2',
    context: { worldSize: 2 },
    micro: 2,
    explicit: { precision: 'fp16', parallel: { engine: 'deepspeed', dp: 2, zero: 2 } },
  },
  // disable_allgather is read and used by nothing.
  {
    name: 'ds-megatron-perf-bs8-zero1',
    context: { worldSize: 4 },
    micro: 2,
    explicit: { precision: 'fp16', parallel: { engine: 'deepspeed', dp: 4, zero: 1 } },
  },
  {
    // 24 = 3 × accumulation × 2: accumulation 4; Adam means AdamW (adam_w_mode defaults to true).
    name: 'ds-bingbert-bsz24-fp16-zero2',
    context: { worldSize: 2 },
    micro: 3,
    explicit: { precision: 'fp16', optimizer: { name: 'adamw', impl: 'fused' }, microBatches: 4, parallel: { engine: 'deepspeed', dp: 2, zero: 2 } },
  },
  {
    name: 'hf-tests-zero2',
    context: trainer({ fp16: true }),
    micro: 1,
    explicit: {
      precision: 'fp16',
      optimizer: { name: 'adamw', impl: 'fused' },
      parallel: { engine: 'deepspeed', dp: 2, zero: 2, deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true }, offload: { optimizer: true } },
    },
  },
  {
    // The Trainer's auto: reduce bucket h², prefetch ⌊0.9·h²⌋, persistence 10·h.
    name: 'hf-tests-zero3',
    context: trainer({ fp16: true }),
    micro: 1,
    explicit: {
      precision: 'fp16',
      optimizer: { name: 'adamw', impl: 'fused' },
      parallel: {
        engine: 'deepspeed',
        dp: 2,
        zero: 3,
        deepspeed: { reduceBucketSize: H * H, prefetchBucketSize: 722_534, paramPersistenceThreshold: 8960, subGroupSize: 1e14 },
        offload: { optimizer: true, parameters: true },
      },
    },
  },
  {
    // "bfloat16": DeepSpeed's old name for bf16.
    name: 'hf-tests-zero2-bf16',
    context: trainer({ bf16: true }),
    micro: 1,
    explicit: {
      precision: 'bf16',
      optimizer: { name: 'adamw', impl: 'fused' },
      parallel: { engine: 'deepspeed', dp: 2, zero: 2, deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true }, offload: { optimizer: true } },
    },
  },
  {
    name: 'hf-tests-zero3-bf16',
    context: trainer({ bf16: true }),
    micro: 1,
    explicit: {
      precision: 'bf16',
      optimizer: { name: 'adamw', impl: 'fused' },
      parallel: {
        engine: 'deepspeed',
        dp: 2,
        zero: 3,
        deepspeed: { reduceBucketSize: H * H, prefetchBucketSize: 722_534, paramPersistenceThreshold: 10 * H },
        offload: { optimizer: true, parameters: true },
      },
    },
  },
];

describe('the fixtures', () => {
  it('ten configs to read, each with its source at a commit', () => {
    const equal = sources.configs.filter((c) => c.use === 'equal').map((c) => c.name);
    expect(equal).toEqual(CASES.map((c) => c.name));
    for (const c of sources.configs) expect(c.url).toContain(c.commit);
  });
});

describe('fromDeepSpeedConfig: ten real configs, estimated as their flags', () => {
  for (const c of CASES) {
    it(c.name, () => {
      const reading = fromDeepSpeedConfig(fixture(c.name), c.context);
      expect(reading.microBatchSize).toBe(c.micro);
      expect(reading.trainBatchSize).toBe(c.micro * reading.options.microBatches * reading.options.parallel.dp);
      const input = [reading.microBatchSize, SEQ];
      expect(run({ ...reading.options, input })).toEqual(run({ ...c.explicit, input: [c.micro, SEQ] }));
      expect(settingsOf(reading.options.parallel)).toEqual(settingsOf(c.explicit.parallel));
      expect([reading.options.precision, reading.options.optimizer, reading.options.microBatches]).toEqual([
        c.explicit.precision,
        c.explicit.optimizer,
        c.explicit.microBatches ?? 1,
      ]);
    });
  }

  it('what it ignores, and why', () => {
    const reading = fromDeepSpeedConfig(fixture('hf-tests-zero3'), trainer({ fp16: true }));
    const ignored = reading.ignored.map((i) => i.path.join('.'));
    expect(ignored).toEqual(
      expect.arrayContaining(['scheduler', 'gradient_clipping', 'steps_per_print', 'wall_clock_breakdown', 'optimizer.params.lr', 'fp16.loss_scale']),
    );
    expect(ignored).toContain('zero_optimization.stage3_gather_fp16_weights_on_model_save');
    expect(reading.ignored.every((i) => i.why.length > 0)).toBe(true);
    expect(reading.sources).toContainEqual({
      path: ['zero_optimization', 'stage3_prefetch_bucket_size'],
      from: 'auto',
      value: 722_534,
      why: expect.any(String),
    });
    expect(Object.isFrozen(reading.options.parallel)).toBe(true);
  });
});

describe('fromDeepSpeedConfig: what it refuses, with paths', () => {
  it('real configs: no ZeRO; contiguous_gradients false; deepspeed.checkpointing partitions; NVMe and a key ZeRO does not take', () => {
    expect(issues(() => fromDeepSpeedConfig(fixture('ds-unit-batch-no-zero'), { worldSize: 2 }))).toEqual([
      { path: ['zero_optimization', 'stage'], code: 'not-modelled' },
    ]);
    expect(issues(() => fromDeepSpeedConfig(fixture('ds-torch-compile-z2'), { worldSize: 2 }))).toEqual([
      { path: ['zero_optimization', 'contiguous_gradients'], code: 'not-modelled' },
    ]);
    expect(issues(() => fromDeepSpeedConfig(fixture('ds-megatron-bs8-zero2-offload'), { worldSize: 2 }))).toEqual([
      { path: ['activation_checkpointing', 'partition_activations'], code: 'not-modelled' },
      { path: ['activation_checkpointing', 'contiguous_memory_optimization'], code: 'not-modelled' },
    ]);
    expect(issues(() => fromDeepSpeedConfig(fixture('hf-docs-zero3-nvme'), trainer({ fp16: true })))).toEqual([
      { path: ['zero_optimization', 'aio'], code: 'unknown-option' },
      { path: ['zero_optimization', 'offload_optimizer', 'device'], code: 'not-modelled' },
      { path: ['zero_optimization', 'offload_param', 'device'], code: 'not-modelled' },
    ]);
  });

  it('an unknown key, at any depth, with the name it missed', () => {
    const config = { ...fixture('ds-megatron-bs4-zero1'), train_batch_sizes: 4, zero_optimization: { stage: 1, reduce_bucket_sise: 5e8 } };
    expect(issues(() => fromDeepSpeedConfig(config, { worldSize: 2 }))).toEqual([
      { path: ['train_batch_sizes'], code: 'unknown-option' },
      { path: ['zero_optimization', 'reduce_bucket_sise'], code: 'unknown-option' },
    ]);
    try {
      fromDeepSpeedConfig(config, { worldSize: 2 });
    } catch (error) {
      expect((error as VramError).issues[1]!.message).toContain('did you mean "reduce_bucket_size"?');
    }
  });

  it('memory that moves in ways vram-ts does not model: ZeRO++, optimizers it does not know', () => {
    const base = { train_micro_batch_size_per_gpu: 1 };
    expect(issues(() => fromDeepSpeedConfig({ ...base, zero_optimization: { stage: 3, zero_hpz_partition_size: 8 } }, { worldSize: 16 }))).toEqual([
      { path: ['zero_optimization', 'zero_hpz_partition_size'], code: 'not-modelled' },
    ]);
    expect(issues(() => fromDeepSpeedConfig({ ...base, zero_optimization: { stage: 2 }, optimizer: { type: 'Lamb' } }, { worldSize: 2 }))).toEqual([
      { path: ['optimizer', 'type'], code: 'not-modelled' },
    ]);
    expect(issues(() => fromDeepSpeedConfig({ ...base, zero_optimization: { stage: 2 }, amp: { enabled: true } }, { worldSize: 2 }))).toEqual([
      { path: ['amp', 'enabled'], code: 'not-modelled' },
    ]);
  });

  it('"auto" without the context that fills it: each path, and what to give', () => {
    expect(issues(() => fromDeepSpeedConfig(fixture('hf-tests-zero3')))).toEqual([
      { path: ['train_micro_batch_size_per_gpu'], code: 'unresolved-auto' },
      { path: ['gradient_accumulation_steps'], code: 'unresolved-auto' },
      { path: ['train_batch_size'], code: 'unresolved-auto' },
      { path: ['fp16', 'enabled'], code: 'unresolved-auto' },
      { path: ['zero_optimization', 'reduce_bucket_size'], code: 'unresolved-auto' },
      { path: ['zero_optimization', 'stage3_prefetch_bucket_size'], code: 'unresolved-auto' },
      { path: ['zero_optimization', 'stage3_param_persistence_threshold'], code: 'unresolved-auto' },
    ]);
    // The Trainer fills the ZeRO-3 keys only under stage 3; elsewhere DeepSpeed drops "auto" (its default).
    const z2 = fromDeepSpeedConfig(
      { train_micro_batch_size_per_gpu: 1, zero_optimization: { stage: 2, stage3_prefetch_bucket_size: 'auto' } },
      { worldSize: 2 },
    );
    expect(z2.options.parallel.deepspeed.prefetchBucketSize).toBe(DEEPSPEED_DEFAULTS.prefetchBucketSize);
    try {
      fromDeepSpeedConfig(fixture('hf-tests-zero3'), { trainer: { perDeviceTrainBatchSize: 1, gradientAccumulationSteps: 1, worldSize: 2, fp16: true } });
    } catch (error) {
      expect((error as VramError).issues[0]).toMatchObject({
        path: ['zero_optimization', 'reduce_bucket_size'],
        expected: "context.hiddenSize (the model config's hidden_size)",
      });
    }
  });

  it('DeepSpeed’s batch assertion, the world size, and the Trainer’s mismatches', () => {
    const zero = { zero_optimization: { stage: 1 } };
    expect(
      issues(() => fromDeepSpeedConfig({ ...zero, train_batch_size: 8, train_micro_batch_size_per_gpu: 3, gradient_accumulation_steps: 1 }, { worldSize: 2 })),
    ).toEqual([{ path: ['train_batch_size'], code: 'bad-option' }]);
    expect(issues(() => fromDeepSpeedConfig({ ...zero, train_micro_batch_size_per_gpu: 2 }))).toEqual([
      { path: ['context', 'worldSize'], code: 'missing-context' },
    ]);
    expect(issues(() => fromDeepSpeedConfig(fixture('ds-sdma-zero3'), { trainer: { perDeviceTrainBatchSize: 2, worldSize: 2 } }))).toEqual([
      { path: ['train_micro_batch_size_per_gpu'], code: 'mismatch' },
    ]);
    // All three given: the world is what they say it is.
    expect(fromDeepSpeedConfig({ ...zero, train_batch_size: 24, train_micro_batch_size_per_gpu: 3, gradient_accumulation_steps: 2 }).options.parallel.dp).toBe(
      4,
    );
    expect(issues(() => fromDeepSpeedConfig([]))).toEqual([{ path: [], code: 'bad-option' }]);
    expect(issues(() => fromDeepSpeedConfig({}, { hiddenSize: 0 }))).toEqual([{ path: ['context', 'hiddenSize'], code: 'bad-option' }]);
  });
});

/** The same object with every key order shuffled (recursively), by a seed. */
function shuffled(value: unknown, seed: number): unknown {
  if (Array.isArray(value)) return value.map((v) => shuffled(v, seed));
  if (typeof value !== 'object' || value === null) return value;
  const keys = Object.keys(value);
  const order = keys.map((k, i) => [k, Math.sin(seed * 997 + i * 31 + k.length)] as const).sort((a, b) => a[1] - b[1]);
  return Object.fromEntries(order.map(([k]) => [k, shuffled((value as Record<string, unknown>)[k], seed)]));
}

describe('laws', () => {
  it('DeepSpeed’s defaults are the engine’s: a config silent on every knob reads to deepspeedSettings', () => {
    fc.assert(
      fc.property(fc.constantFrom(1, 2, 3), fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 8 }), (stage, world, micro) => {
        const reading = fromDeepSpeedConfig({ train_micro_batch_size_per_gpu: micro, zero_optimization: { stage } }, { worldSize: world });
        const { stage: _s, shards: _n, rank: _r, offloadOptimizer, offloadParam, ...knobs } = deepspeedSettings(stage as 1 | 2 | 3, world, 0);
        expect(reading.options.parallel.deepspeed).toEqual(knobs);
        expect(reading.options.parallel.offload).toEqual({ optimizer: offloadOptimizer, parameters: offloadParam });
        expect([reading.microBatchSize, reading.options.microBatches, reading.trainBatchSize]).toEqual([micro, 1, micro * world]);
      }),
    );
  });

  it('reading does not depend on key order', () => {
    fc.assert(
      fc.property(fc.constantFrom(...CASES), fc.integer(), (c, seed) => {
        const a = fromDeepSpeedConfig(fixture(c.name), c.context);
        const b = fromDeepSpeedConfig(shuffled(fixture(c.name), seed), c.context);
        expect(b.options).toEqual(a.options);
        expect(b.microBatchSize).toBe(a.microBatchSize);
        const key = (i: { path: readonly (string | number)[] }) => i.path.join('.');
        expect(b.ignored.map(key).sort()).toEqual(a.ignored.map(key).sort());
      }),
      { numRuns: 60 },
    );
  });

  it('train_batch_size = micro × accumulation × world, whichever two or three of them are given', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 16 }),
        fc.integer({ min: 1, max: 16 }),
        fc.integer({ min: 1, max: 16 }),
        fc.subarray(['train_batch_size', 'train_micro_batch_size_per_gpu', 'gradient_accumulation_steps'] as const, { minLength: 1 }),
        (micro, accumulation, world, keys) => {
          const all = { train_batch_size: micro * accumulation * world, train_micro_batch_size_per_gpu: micro, gradient_accumulation_steps: accumulation };
          if (!keys.includes('train_batch_size') && !keys.includes('train_micro_batch_size_per_gpu')) return;
          const config = { zero_optimization: { stage: 2 }, ...Object.fromEntries(keys.map((k) => [k, all[k]])) };
          const r = fromDeepSpeedConfig(config, { worldSize: world });
          expect(r.trainBatchSize).toBe(r.microBatchSize * r.options.microBatches * world);
          for (const k of keys)
            expect(k === 'train_batch_size' ? r.trainBatchSize : k === 'train_micro_batch_size_per_gpu' ? r.microBatchSize : r.options.microBatches).toBe(
              all[k],
            );
        },
      ),
    );
  });
});
