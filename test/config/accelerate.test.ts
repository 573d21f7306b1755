/**
 * fromAccelerateConfig (src/config/accelerate.ts): real accelerate config files (verbatim from
 * huggingface/trl's and huggingface/accelerate's repositories, and two written by accelerate 1.15.0
 * itself: test/fixtures/configs/accelerate/sources.json), parsed with the CLI's YAML reader, each
 * read into options whose estimate (the peak and every rank's figures) equals, exactly, the estimate
 * of the options written out by hand; real configs vram-ts refuses, with their paths; and the laws:
 * neutral keys never change the reading, key order does not matter, and the DeepSpeed config
 * accelerate builds is the one DeepSpeedPlugin prints.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { issuesOf as issues } from '../helpers/errors.js';
import { parseYaml } from '../../src/cli/config-file.js';
import { estimate, estimateRanks, fromAccelerateConfig, llm, type VramError, type AccelerateContext, type EstimateOptions } from '../../src/index.js';
import { fromDeepSpeedConfig } from '../../src/config/deepspeed.js';

const dir = new URL('../fixtures/configs/accelerate/', import.meta.url);
const fixture = (name: string): Record<string, unknown> => parseYaml(readFileSync(new URL(`${name}.yaml`, dir), 'utf8'), `${name}.yaml`);
const json = (name: string): Record<string, unknown> => JSON.parse(readFileSync(new URL(`${name}.json`, dir), 'utf8'));
const sources = JSON.parse(readFileSync(new URL('sources.json', dir), 'utf8')) as {
  configs: { name: string; use: string; commit: string; url: string; expected?: string[] }[];
  generated: { name: string; use: string; expected?: string[] }[];
};

const model = llm('qwen2.5-0.5b');
const H = 896; // qwen2.5-0.5b's hidden_size
const SEQ = 32;
const input = [1, SEQ];
/** The estimate less its echo of the plan and its trace (closures, one per trace). */
const run = (options: Omit<EstimateOptions, 'input'>) => {
  const { parallel: _plan, ir: _trace, ...figures } = estimate(model, { timeline: false, ...options, input });
  return figures;
};
/** Every rank's figures (less its whole estimate, compared through the peak and the kept bytes). */
const ranks = (options: Omit<EstimateOptions, 'input'>) =>
  estimateRanks(model, { timeline: false, ...options, input }).map(({ estimate: _e, ...figures }) => figures);

/** Each config, the context it runs in, and what it means, written out by hand. */
const CASES: readonly { name: string; context?: AccelerateContext; explicit: Omit<EstimateOptions, 'input'>; ranks?: boolean }[] = [
  // distributed_type "NO", bf16: autocast over the float32 parameters.
  { name: 'trl-single-gpu', explicit: { precision: 'amp-bf16' } },
  // MULTI_GPU: DDP over 8 processes with its default buckets, autocast.
  { name: 'trl-multi-gpu', explicit: { precision: 'amp-bf16', parallel: { engine: 'ddp', dp: 8 } }, ranks: true },
  // DEEPSPEED: the config DeepSpeedPlugin builds; bf16 is DeepSpeed's (16-bit parameters, fp32 master).
  { name: 'trl-deepspeed-zero1', explicit: { precision: 'bf16', microBatches: 1, parallel: { engine: 'deepspeed', dp: 8, zero: 1 } } },
  { name: 'trl-deepspeed-zero2', explicit: { precision: 'bf16', parallel: { engine: 'deepspeed', dp: 8, zero: 2 } }, ranks: true },
  { name: 'trl-deepspeed-zero3', explicit: { precision: 'bf16', parallel: { engine: 'deepspeed', dp: 8, zero: 3 } } },
  {
    // The file it names: ZeRO-1, DeepSpeed's fp16, torch AdamW, reduce_bucket_size "auto" = h².
    name: 'accelerate-template-deepspeed',
    context: { deepspeedConfig: json('accelerate-zero-stage1-config'), hiddenSize: H },
    explicit: {
      precision: 'fp16',
      optimizer: { name: 'adamw', impl: 'foreach' },
      parallel: { engine: 'deepspeed', dp: 2, zero: 1, deepspeed: { reduceBucketSize: H * H, overlapComm: true } },
    },
  },
  // accelerate's own test configs of releases 0.11 and 0.12: one process, no mixed precision.
  { name: 'accelerate-test-0-11-0', explicit: {} },
  { name: 'accelerate-test-0-12-0', explicit: {} },
  // accelerate's templates: DDP over 2 GPUs with bf16 autocast; one GPU with bf16 autocast.
  { name: 'accelerate-template-multi-gpu', explicit: { precision: 'amp-bf16', parallel: { engine: 'ddp', dp: 2 } }, ranks: true },
  { name: 'accelerate-template-single-accelerator', explicit: { precision: 'amp-bf16' } },
  // Two machines, eight processes in all, no mixed precision: DDP over 8 ranks in the model's dtype.
  { name: 'accelerate-template-multi-node', explicit: { parallel: { engine: 'ddp', dp: 8 } } },
  {
    // FSDP2 over 8 processes, bf16: each decoder layer a unit, then [norm, embed_tokens, lm_head] (qwen2.5 ties
    // them) never resharded; MixedPrecisionPolicy bf16 over float32 parameters, no autocast.
    name: 'trl-fsdp2',
    context: { model },
    explicit: {
      dtype: 'float32',
      parallel: {
        engine: 'fsdp2',
        dp: 8,
        reshardAfterForward: true,
        mixedPrecision: { param: 'bfloat16', reduce: 'bfloat16' },
        units: [
          ...Array.from({ length: 24 }, (_, i) => `model.layers.${i}`),
          { modules: ['model.norm', 'model.embed_tokens', 'lm_head'], reshardAfterForward: false },
        ],
      },
    },
    ranks: true,
  },
  {
    // Written by accelerate: ZeRO-3 with the optimizer and the parameters on the host, 4 steps accumulated.
    name: 'generated-deepspeed-zero3-offload',
    explicit: { precision: 'bf16', microBatches: 4, parallel: { engine: 'deepspeed', dp: 4, zero: 3, offload: { optimizer: true, parameters: true } } },
    ranks: true,
  },
];

describe('the fixtures', () => {
  it('real configs, each with its source at a commit, and two accelerate wrote', () => {
    const equal = [...sources.configs, ...sources.generated].filter((c) => c.use === 'equal').map((c) => c.name);
    expect(equal.sort()).toEqual(CASES.map((c) => c.name).sort());
    expect(sources.configs.length).toBeGreaterThanOrEqual(10);
    for (const c of sources.configs) expect(c.url).toContain(c.commit);
  });
});

describe('fromAccelerateConfig: real configs, estimated as their options', () => {
  for (const c of CASES) {
    it(c.name, () => {
      const reading = fromAccelerateConfig(fixture(c.name), c.context);
      expect(run(reading.options)).toEqual(run(c.explicit));
      if (c.ranks === true) expect(ranks(reading.options)).toEqual(ranks(c.explicit));
      expect(reading.ignored.every((i) => i.why.length > 0)).toBe(true);
      expect(Object.isFrozen(reading.options)).toBe(true);
    });
  }

  it('what it reads besides the options: processes, the DeepSpeed file, autocast, what it ignores', () => {
    const ddp = fromAccelerateConfig(fixture('trl-multi-gpu'));
    expect([ddp.distributedType, ddp.processes, ddp.machines, ddp.autocastForward]).toEqual(['MULTI_GPU', 8, 1, true]);
    expect(ddp.ignored.map((i) => i.path.join('.'))).toEqual(expect.arrayContaining(['rdzv_backend', 'downcast_bf16', 'gpu_ids', 'tpu_env', 'debug']));
    const node = fromAccelerateConfig(fixture('accelerate-template-multi-node'));
    expect([node.processes, node.machines, node.options.precision]).toEqual([8, 2, undefined]);
    const file = fromAccelerateConfig(fixture('accelerate-template-deepspeed'), {
      deepspeedConfig: json('accelerate-zero-stage1-config'),
      hiddenSize: H,
      batchSize: 4,
    });
    expect(file.deepspeedConfigFile).toBe('../deepspeed_config_templates/zero_stage1_config.json');
    expect([file.microBatchSize, file.deepspeed?.trainBatchSize, file.autocastForward]).toEqual([4, 8, false]);
    expect(file.ignored.map((i) => i.path.join('.'))).toContain('context.deepspeedConfig.scheduler');
    const cpu = fromAccelerateConfig({ ...fixture('trl-single-gpu'), use_cpu: true });
    expect(cpu.options).toEqual({ precision: 'amp-bf16', device: 'cpu' });
    expect(run(cpu.options)).toEqual(run({ precision: 'amp-bf16', device: 'cpu' }));
    // FSDP2: accelerate's units of the model itself, so the model is needed.
    expect(issues(() => fromAccelerateConfig(fixture('trl-fsdp2')))).toEqual([{ path: ['context', 'model'], code: 'missing-context' }]);
    const fsdp = fromAccelerateConfig(fixture('trl-fsdp2'), { model, gradientAccumulationSteps: 4 });
    expect([fsdp.distributedType, fsdp.processes, fsdp.autocastForward]).toEqual(['FSDP', 8, false]);
    expect(fsdp.options).toMatchObject({ microBatches: 4, parallel: { gradientSync: 'last' } });
    expect(fsdp.approximations.map((a) => a.path.join('.'))).toEqual(['mixed_precision']);
  });
});

describe('fromAccelerateConfig: what it refuses, with paths', () => {
  it('real configs: FSDP1, CPU processes, a parallelism config', () => {
    for (const c of [...sources.configs, ...sources.generated].filter((s) => s.use === 'error'))
      expect(issues(() => fromAccelerateConfig(fixture(c.name), { model }))[0]).toEqual({ path: c.expected, code: 'not-modelled' });
  });

  it('a named DeepSpeed file not given: missing-context with its path; keys accelerate refuses beside it', () => {
    const config = fixture('accelerate-template-deepspeed');
    expect(issues(() => fromAccelerateConfig(config))).toEqual([{ path: ['context', 'deepspeedConfig'], code: 'missing-context' }]);
    try {
      fromAccelerateConfig(config);
    } catch (error) {
      expect((error as VramError).issues[0]!.received).toBe('"../deepspeed_config_templates/zero_stage1_config.json"');
    }
    const both = { ...config, mixed_precision: 'bf16', deepspeed_config: { ...(config.deepspeed_config as object), zero_stage: 2 } };
    expect(issues(() => fromAccelerateConfig(both, { deepspeedConfig: json('accelerate-zero-stage1-config'), hiddenSize: H }))).toEqual([
      { path: ['deepspeed_config', 'zero_stage'], code: 'bad-option' },
      { path: ['mixed_precision'], code: 'bad-option' },
    ]);
    // The file's "auto" buckets need the model's hidden size, as Accelerator.prepare reads model.config.
    expect(issues(() => fromAccelerateConfig(config, { deepspeedConfig: json('accelerate-zero-stage1-config') }))).toEqual([
      { path: ['context', 'deepspeedConfig', 'zero_optimization', 'reduce_bucket_size'], code: 'unresolved-auto' },
    ]);
  });

  it('an unknown key, at any depth, with the name it missed', () => {
    const base = fixture('trl-fsdp2');
    const config = { ...base, num_process: 8, fsdp_config: { ...(base.fsdp_config as object), fsdp_reshard_after_foward: true } };
    expect(issues(() => fromAccelerateConfig(config, { model }))).toEqual([
      { path: ['num_process'], code: 'unknown-option' },
      { path: ['fsdp_config', 'fsdp_reshard_after_foward'], code: 'unknown-option' },
    ]);
    try {
      fromAccelerateConfig(config, { model });
    } catch (error) {
      expect((error as VramError).issues.map((i) => i.message)).toEqual([
        expect.stringContaining('did you mean "num_processes"?'),
        expect.stringContaining('did you mean "fsdp_reshard_after_forward"?'),
      ]);
    }
  });

  it('memory that moves in ways vram-ts does not model, each at its key', () => {
    const ddp = fixture('trl-multi-gpu');
    const zero = fixture('trl-deepspeed-zero2');
    const fsdp = fixture('trl-fsdp2');
    const fsdpWith = (extra: object) => ({ ...fsdp, fsdp_config: { ...(fsdp.fsdp_config as object), ...extra } });
    const dsWith = (extra: object) => ({ ...zero, deepspeed_config: { ...(zero.deepspeed_config as object), ...extra } });
    const cases: [object, (string | number)[], string][] = [
      [{ ...ddp, mixed_precision: 'fp8' }, ['mixed_precision'], 'not-modelled'],
      [{ ...ddp, mixed_precision: 'fp16' }, ['mixed_precision'], 'not-modelled'],
      [{ ...ddp, distributed_type: 'MEGATRON_LM' }, ['distributed_type'], 'not-modelled'],
      [{ ...ddp, distributed_type: false }, ['distributed_type'], 'bad-option'],
      [{ ...ddp, dynamo_config: { dynamo_backend: 'INDUCTOR' } }, ['dynamo_config', 'dynamo_backend'], 'not-modelled'],
      [{ ...ddp, num_processes: -1 }, ['num_processes'], 'missing-option'],
      [{ ...ddp, gpu_ids: '0' }, ['gpu_ids'], 'bad-option'],
      // DeepSpeed fp16 through accelerate adds fp16.auto_cast: true (dc:1423-1424).
      [{ ...zero, mixed_precision: 'fp16' }, ['mixed_precision'], 'not-modelled'],
      [dsWith({ zero_stage: 0 }), ['deepspeed_config', 'zero_stage'], 'not-modelled'],
      [dsWith({ offload_optimizer_device: 'disk' }), ['deepspeed_config', 'offload_optimizer_device'], 'bad-option'],
      [dsWith({ zero_stage: 3, offload_param_device: 'nvme' }), ['deepspeed_config', 'offload_param_device'], 'not-modelled'],
      [fsdpWith({ fsdp_auto_wrap_policy: 'SIZE_BASED_WRAP' }), ['fsdp_config', 'fsdp_auto_wrap_policy'], 'not-modelled'],
      [fsdpWith({ fsdp_reshard_after_forward: 'FULL_SHARD' }), ['fsdp_config', 'fsdp_reshard_after_forward'], 'bad-option'],
      [
        fsdpWith({ fsdp_activation_checkpointing: false, fsdp_activation_checkpointing_offload: true }),
        ['fsdp_config', 'fsdp_activation_checkpointing_offload'],
        'bad-option',
      ],
      // checkpoint_wrapper inside FSDP2's units is not measured; a class other than the decoder layer is not modelled.
      [fsdpWith({ fsdp_activation_checkpointing: true }), ['fsdp_config', 'fsdp_activation_checkpointing'], 'not-modelled'],
      [fsdpWith({ fsdp_transformer_layer_cls_to_wrap: 'Qwen2DecoderLayer,Qwen2MLP' }), ['fsdp_config', 'fsdp_transformer_layer_cls_to_wrap'], 'not-modelled'],
      [fsdpWith({ fsdp_transformer_layer_cls_to_wrap: ['Qwen2DecoderLayer'] }), ['fsdp_config', 'fsdp_transformer_layer_cls_to_wrap'], 'bad-option'],
      [{ ...fsdp, mixed_precision: 'fp16' }, ['mixed_precision'], 'not-modelled'],
      [fsdpWith({ fsdp_state_dict_type: 'LOCAL_STATE_DICT' }), ['fsdp_config', 'fsdp_state_dict_type'], 'bad-option'],
      [fsdpWith({ fsdp_sync_module_states: false }), ['fsdp_config', 'fsdp_sync_module_states'], 'bad-option'],
    ];
    for (const [config, path, code] of cases) expect(issues(() => fromAccelerateConfig(config, { model }))).toEqual([{ path, code }]);
  });

  it('context and input checks', () => {
    expect(issues(() => fromAccelerateConfig([]))).toEqual([{ path: [], code: 'bad-option' }]);
    expect(issues(() => fromAccelerateConfig({}))).toEqual([{ path: ['distributed_type'], code: 'missing-option' }]);
    expect(issues(() => fromAccelerateConfig(fixture('trl-multi-gpu'), { batchSize: 0 }))).toEqual([{ path: ['context', 'batchSize'], code: 'bad-option' }]);
    expect(issues(() => fromAccelerateConfig(fixture('trl-deepspeed-zero2'), { deepspeedConfig: {} }))).toEqual([
      { path: ['context', 'deepspeedConfig'], code: 'bad-option' },
    ]);
    expect(issues(() => fromAccelerateConfig(fixture('trl-fsdp2'), { model: {} as never }))).toEqual([{ path: ['context', 'model'], code: 'bad-option' }]);
    // A model that records no decoder roles (a plain module) has no units accelerate would make.
    const plain = { kind: 'module', className: 'Net', body: { kind: 'seq', layers: [] } } as never;
    expect(issues(() => fromAccelerateConfig(fixture('trl-fsdp2'), { model: plain }))).toEqual([{ path: ['context', 'model'], code: 'not-modelled' }]);
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

/** Neutral top-level keys and values accelerate accepts for them. */
const NEUTRAL = {
  debug: fc.boolean(),
  machine_rank: fc.nat(8),
  main_process_ip: fc.constantFrom('127.0.0.1', '10.0.0.1', null),
  main_process_port: fc.option(fc.integer({ min: 1024, max: 65535 })),
  rdzv_backend: fc.constantFrom('static', 'c10d'),
  same_network: fc.boolean(),
  main_training_function: fc.constantFrom('main', 'train'),
  enable_cpu_affinity: fc.boolean(),
  downcast_bf16: fc.constantFrom('no', false, true),
  tpu_env: fc.constant([]),
  tpu_use_cluster: fc.boolean(),
  tpu_use_sudo: fc.boolean(),
};

describe('laws', () => {
  it('neutral keys never change the options', () => {
    fc.assert(
      fc.property(fc.constantFrom(...CASES), fc.record(NEUTRAL, { requiredKeys: [] }), (c, neutral) => {
        const config = fixture(c.name);
        const a = fromAccelerateConfig(config, c.context);
        const b = fromAccelerateConfig({ ...config, ...neutral }, c.context);
        expect(b.options).toEqual(a.options);
        for (const key of Object.keys(neutral)) expect(b.ignored.map((i) => i.path.join('.'))).toContain(key);
      }),
      { numRuns: 80 },
    );
  });

  it('reading does not depend on key order', () => {
    fc.assert(
      fc.property(fc.constantFrom(...CASES), fc.integer(), (c, seed) => {
        const a = fromAccelerateConfig(fixture(c.name), c.context);
        const b = fromAccelerateConfig(shuffled(fixture(c.name), seed), c.context);
        expect(b.options).toEqual(a.options);
        const key = (i: { path: readonly (string | number)[] }) => i.path.join('.');
        expect(b.ignored.map(key).sort()).toEqual(a.ignored.map(key).sort());
      }),
      { numRuns: 60 },
    );
  });

  it('the DeepSpeed config it builds reads as the one accelerate 1.15.0 builds (accelerate-built-deepspeed.json)', () => {
    const built = json('accelerate-built-deepspeed').configs as Record<string, { config: Record<string, unknown> }>;
    expect(Object.keys(built).sort()).toEqual(
      CASES.filter((c) => c.explicit.parallel?.engine === 'deepspeed' && c.context === undefined)
        .map((c) => c.name)
        .sort(),
    );
    for (const [name, { config }] of Object.entries(built)) {
      const reading = fromAccelerateConfig(fixture(name), { batchSize: 2 });
      const world = reading.processes;
      // The "auto"s Accelerator._prepare_deepspeed fills for a data loader of batch 2 (accelerator.py:2179-2235).
      const gas = config.gradient_accumulation_steps === 'auto' ? 1 : (config.gradient_accumulation_steps as number);
      const filled = {
        ...config,
        train_micro_batch_size_per_gpu: 2,
        gradient_accumulation_steps: gas,
        train_batch_size: 2 * gas * world,
        gradient_clipping: config.gradient_clipping === 'auto' ? 1.0 : config.gradient_clipping,
      };
      const { ignored: _a, sources: _b, ...ours } = reading.deepspeed!;
      const { ignored: _c, sources: _d, ...theirs } = fromDeepSpeedConfig(filled, { worldSize: world });
      expect(ours).toEqual(theirs);
      expect(reading.microBatchSize).toBe(2);
    }
  });
});
