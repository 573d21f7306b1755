/**
 * Never a wrong number silently. A property over random models, inputs and random option
 * objects (misspelt keys, wrong types, out-of-range values included): every call returns
 * exact non-negative safe integers or throws a VramError — no other exception, no NaN, no
 * ignored key. Then one test per failure the issue listed, each of which passed silently (or
 * crashed) before.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CATEGORIES,
  CONTEXT_DEFAULTS,
  GPUS,
  LLMS,
  VramError,
  conv2d,
  estimate,
  evaluate,
  fits,
  fromHFConfig,
  generation,
  gpu,
  grpoStep,
  korthikanti,
  kvCache,
  linear,
  llm,
  maxFitting,
  memoryBudget,
  mobilenetV3Small,
  relu,
  safetensorsSummary,
  seq,
  summary,
  sym,
  traceModel,
  type Dim,
  type Layer,
} from '../../src/index.js';
import { TRANSFORMERS_RULES } from '../../src/internals.js';
import { randomModel } from '../helpers/random-models.js';
import { seqFromSpecs } from '../helpers/layer-spec.js';

const seed = 20261130;

/** Runs f; returns 'vram' for a VramError, the value otherwise; any other exception fails the test. */
function outcome<T>(f: () => T): T | 'vram' {
  try {
    return f();
  } catch (error) {
    if (error instanceof VramError) {
      expect(error.issues.length).toBeGreaterThan(0);
      for (const issue of error.issues) expect(Array.isArray(issue.path)).toBe(true);
      return 'vram';
    }
    throw error;
  }
}

function exactBytes(value: Dim, env: Readonly<Record<string, number>>): void {
  const n = typeof value === 'number' ? value : evaluate(value, env);
  expect(Number.isSafeInteger(n), String(n)).toBe(true);
  expect(n).toBeGreaterThanOrEqual(0);
}

const VALID: Readonly<Record<string, readonly unknown[]>> = {
  mode: ['train', 'inference'],
  moduleMode: ['train', 'eval'],
  precision: ['fp32', 'bf16', 'amp-bf16', 'fp16', 'amp-fp16'],
  device: ['cuda', 'cpu'],
  framework: ['torch-2', 'torch-1.13'],
  optimizer: ['sgd', 'adam', 'adamw', null, { name: 'adam', impl: 'foreach' }, { name: 'sgd_momentum', weightDecay: 0.1 }],
  microBatches: [1, 2, 3],
  timeline: [true, false],
  inputRequiresGrad: [true, false],
  loss: ['cross_entropy', 'none'],
};
const INVALID: Readonly<Record<string, readonly unknown[]>> = {
  mode: ['training', 'Train', '', 3],
  precision: ['bf32', 'constructor', 'toString', true],
  device: ['CUDA', 'gpu', null],
  framework: ['torch-3', 2],
  optimizer: ['adamm', { name: 'adam', impl: 'fast' }, { nam: 'sgd' }, 7],
  microBatches: [0, -3, 2.5, Number.NaN, Infinity, 2e6, '2'],
  timeline: ['yes', 1],
  loss: ['mse', 'cross-entropy'],
};
const MISSPELT = ['presicion', 'optimiser', 'devcie', 'microbatches', 'attention', 'checkpoints', 'modee'];

/** Random estimate options: valid entries, invalid values and misspelt keys; `bad` says whether any was put in. */
const optionsArbitrary = fc
  .record({
    valid: fc.uniqueArray(fc.constantFrom(...Object.keys(VALID)), { maxLength: 5 }),
    invalid: fc.uniqueArray(fc.constantFrom(...Object.keys(INVALID)), { maxLength: 2 }),
    misspelt: fc.uniqueArray(fc.constantFrom(...MISSPELT), { maxLength: 2 }),
    pick: fc.nat(),
  })
  .map(({ valid, invalid, misspelt, pick }) => {
    const options: Record<string, unknown> = {};
    for (const key of valid) options[key] = VALID[key]![pick % VALID[key]!.length];
    for (const key of invalid) options[key] = INVALID[key]![pick % INVALID[key]!.length];
    for (const key of misspelt) options[key] = 'bf16';
    return { options, bad: invalid.length + misspelt.length > 0 };
  });

describe('random calls: exact non-negative integers or a VramError, never a silent wrong number', () => {
  it('estimate, summary and fits on random CNNs with random option objects', () => {
    fc.assert(
      fc.property(randomModel, optionsArbitrary, fc.boolean(), (m, { options, bad }, symbolic) => {
        const model = seqFromSpecs(m.layers);
        const input = symbolic ? [sym('B'), ...m.input.slice(1)] : m.input;
        const env = { B: m.input[0] };
        const r = outcome(() => estimate(model, { input, ...options }));
        if (bad) expect(r).toBe('vram');
        if (r === 'vram') return;
        for (const value of Object.values(r.bytes)) exactBytes(value, env);
        const text = outcome(() => summary(model, { input: m.input, ...options, format: 'breakdown' }));
        if (text !== 'vram') expect(text).not.toContain('NaN');
        if (!symbolic) {
          const verdict = outcome(() => fits(model, { input, ...options, gpu: '24GB' }));
          if (verdict !== 'vram') exactBytes(verdict.needed, env);
        }
      }),
      { numRuns: 120, seed },
    );
  });

  it('LLM helpers with random counts, wrong types included', () => {
    const model = fromHFConfig({
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 96,
      num_hidden_layers: 1,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 64,
    });
    const count = fc.oneof(fc.integer({ min: -5, max: 64 }), fc.constantFrom(0.5, Number.NaN, '8', null, 2 ** 60));
    fc.assert(
      fc.property(count, count, count, (a, b, c) => {
        const valid = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 1;
        const kv = outcome(() => kvCache(model, { batch: a as number, seq: b as number }));
        if (!valid(a) || !valid(b)) expect(kv).toBe('vram');
        else if (kv !== 'vram') exactBytes(kv, {});
        const gen = outcome(() => generation(model, { batch: a as number, prompt: b as number, generate: c as number, timeline: false }));
        if (!valid(a) || !valid(b) || !(valid(c) || c === 0)) expect(gen).toBe('vram');
        const k = outcome(() => korthikanti({ seq: a as number, batch: b as number, hidden: 64, heads: 4 }));
        if (!valid(a) || !valid(b)) expect(k).toBe('vram');
        const g = outcome(() => grpoStep(model, { per_device_train_batch_size: a, num_generations: 2, max_completion_length: 4 }, { prompt: b as number }));
        if (!valid(a) || !valid(b)) expect(g).toBe('vram');
      }),
      { numRuns: 150, seed },
    );
  });
});

describe('each failure the issue found', () => {
  const model = mobilenetV3Small({ numClasses: 3 });
  const input = [1, 3, 64, 64];
  const codes = (f: () => unknown): string[] => {
    try {
      f();
    } catch (error) {
      if (error instanceof VramError) return error.issues.map((i) => `${i.path.join('.')}:${i.code}`);
      return [`not a VramError: ${(error as Error).constructor.name}`];
    }
    return [];
  };

  it('misspelt or misplaced options are errors naming the right key', () => {
    expect(codes(() => estimate(model, { input, presicion: 'bf16' } as never))).toEqual(['presicion:unknown-option']);
    expect(codes(() => estimate(model, { input, optimiser: 'sgd' } as never))).toEqual(['optimiser:unknown-option']);
    expect(codes(() => estimate(llm('gpt2'), { input: [1, 8], attention: 'sdpa' } as never))).toEqual(['attention:unknown-option']);
    // Every problem at once, not the first only.
    expect(codes(() => estimate(model, { input, presicion: 'bf16', optimizer: 'adamm', microBatches: 0 } as never))).toHaveLength(3);
    expect(() => estimate(model, { input, presicion: 'bf16' } as never)).toThrow(/did you mean "precision"/);
  });

  it('enums are checked with own properties and list the valid values', () => {
    for (const [key, value] of [
      ['framework', 'torch-3'],
      ['device', 'CUDA'],
      ['precision', 'constructor'],
      ['loss', 'mse'],
      ['optimizer', 'adamm'],
    ] as const) {
      expect(codes(() => estimate(model, { input, [key]: value } as never))).toEqual([`${key}:bad-option`]);
    }
    expect(() => estimate(model, { input, device: 'CUDA' } as never)).toThrow(/cuda \| cpu/);
    expect(() => fromHFConfig(LLMS[0]!.config, { attention: 'flash2' } as never)).toThrow(VramError);
  });

  it('counts are safe integers in range; lists are lists', () => {
    for (const microBatches of [Number.NaN, 0, -3, 2.5, 2_000_000])
      expect(codes(() => estimate(model, { input, microBatches }))).toEqual(['microBatches:bad-option']);
    expect(codes(() => estimate(model, { input, checkpoint: { modules: 'features.3' } } as never))).toEqual(['checkpoint.modules:bad-option']);
    expect(codes(() => estimate(model, { input, freeze: 'features' } as never))).toEqual(['freeze:bad-option']);
  });

  it('LoRA targets that match nothing, and integer parameters, never train silently', () => {
    expect(codes(() => estimate(llm('gpt2'), { input: [1, 8], lora: { rank: 4, targets: ['q_proj'] } }))).toEqual(['lora.targets:no-lora-target']);
    const embeddingOnly = fromHFConfig({ ...LLMS[0]!.config, num_hidden_layers: 1, quantization_config: { quant_method: 'bitsandbytes', load_in_8bit: true } });
    const r = estimate(embeddingOnly, { input: [1, 8], timeline: false });
    // int8 weights have no gradients: only the bf16 embedding, norms and head train.
    expect(r.params.trainable).toBeLessThan(r.params.total);
  });

  it('architecture fields of a config are honoured or refused, never ignored', () => {
    const mistral = LLMS.find((e) => e.id === 'mistral-7b')!.config;
    expect(codes(() => fromHFConfig({ ...mistral, num_local_experts: 8 }))).toEqual(['num_local_experts:unsupported-model']);
    expect(codes(() => fromHFConfig({ ...mistral, vision_config: {} }))).toEqual(['vision_config:unsupported-model']);
    expect(codes(() => fromHFConfig({ ...mistral, architectures: ['MixtralForCausalLM'] }))).toEqual(['architectures:unsupported-model']);
    expect(codes(() => estimate(llm('gpt2'), { input: [1, 1025], mode: 'inference' }))).toEqual(['transformer:bad-input']);
    expect(codes(() => fromHFConfig({ ...LLMS[0]!.config, num_hidden_layers: 100_000 }))).toEqual(['num_hidden_layers:bad-config']);
    // A symbolic context carries n_positions as a constraint: maxFitting stops there.
    expect(maxFitting(llm('gpt2'), 'S', { input: [1, sym('S')], mode: 'inference', gpu: 'H200' })).toBe(1024);
  });

  it('negative or non-integer counts are errors, not negative bytes', () => {
    expect(codes(() => kvCache(llm('gpt2'), { batch: -1, seq: 8 }))).toEqual(['batch:bad-option']);
    expect(codes(() => kvCache(llm('gpt2'), { batch: 1.5, seq: 8 }))).toEqual(['batch:bad-option']);
    expect(codes(() => kvCache(llm('gpt2'), { batch: '8', seq: 8 } as never))).toEqual(['batch:bad-option']);
    expect(codes(() => generation(llm('gpt2'), { batch: 1, prompt: 8, generate: -5 }))).toEqual(['generate:bad-option']);
    // steps_per_generation 8: the generation batch (1 × 8, the bad batch read as 1) stays a multiple of num_generations.
    expect(codes(() => grpoStep(llm('gpt2'), { per_device_train_batch_size: -1, steps_per_generation: 8 }, { prompt: 8 }))).toEqual([
      'config.per_device_train_batch_size:bad-option',
    ]);
    expect(codes(() => grpoStep(llm('gpt2'), { num_generation: 8 }, { prompt: 8 }))).toEqual(['config.num_generation:unknown-field']);
    expect(() => grpoStep(llm('gpt2'), { num_generation: 8 }, { prompt: 8 })).toThrow(/did you mean 'num_generations'/);
    expect(codes(() => korthikanti({ seq: -1, batch: 1, hidden: 64, heads: 4 }))).toEqual(['seq:bad-option']);
    expect(codes(() => fits(model, { input, gpu: '24GB', runtime: { context: -5 } }))).toEqual(['runtime.context:bad-option']);
    expect(codes(() => fits(model, { input, gpu: '24GB', runtime: { cublas: '1big' } } as never))).toEqual(['runtime.cublas:bad-option']);
    expect(codes(() => memoryBudget('0GB'))).toEqual(['gpu:bad-option']);
  });

  it('exact or refused: totals past 2^53 are overflow errors', () => {
    expect(codes(() => estimate(linear({ out: 2 ** 26 }), { input: [2 ** 26, 2 ** 6], timeline: false }))).toContain(':overflow');
    const header = { a: { dtype: 'F32', shape: [2 ** 30, 2 ** 30], data_offsets: [0, 2 ** 52] } };
    expect(codes(() => safetensorsSummary(header))[0]).toMatch(/overflow|bad-safetensors/);
    expect(codes(() => safetensorsSummary({ a: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }))).toEqual(['header.a.data_offsets:bad-safetensors']);
    expect(codes(() => safetensorsSummary({ a: { dtype: 'F33', shape: [2], data_offsets: [0, 8] } }))).toEqual(['header.a.dtype:bad-safetensors']);
    expect(codes(() => safetensorsSummary([]))).toEqual(['header:bad-safetensors']);
    // Mult-adds are informational: a 1M-token context estimates, and a solve past it answers.
    const qwen = llm('qwen2.5-0.5b', { attention: 'sdpa' });
    expect(typeof estimate(qwen, { input: [1, 1_000_000], mode: 'inference', timeline: false }).bytes.peak).toBe('number');
  });

  it('symbolic and concrete agree on the CPU convolution the issue found (7,536 vs 10,616)', () => {
    const conv = conv2d({ out: 2, kernel: 1, stride: 2, padding: 1 });
    for (const device of ['cpu', 'cuda'] as const) {
      const concrete = estimate(conv, { input: [1, 6, 19, 11], device }).bytes.peak;
      expect(evaluate(estimate(conv, { input: [sym('B'), 6, 19, 11], device }).bytes.peak, { B: 1 })).toBe(concrete);
      // The allocated peak as the budget: the allocated-only verdict (the default adds the runtime and reserves in segments).
      expect(maxFitting(conv, 'B', { input: [sym('B'), 6, 19, 11], device, gpu: concrete, verdict: 'allocated' })).toBeGreaterThanOrEqual(1);
    }
  });

  it('TypeErrors become VramErrors', () => {
    expect(codes(() => estimate(model, undefined as never))[0]).toMatch(/bad-option/);
    expect(codes(() => estimate(null as never, { input }))).toEqual(['model:bad-model']);
    expect(codes(() => estimate(model, { input: { shape: null } } as never))).toEqual(['input:bad-option']);
    expect(codes(() => conv2d({ out: 8, kernel: 3, stirde: 2 } as never))).toEqual(['conv2d.stirde:unknown-option']);
    expect(codes(() => gpu(3 as never))).toEqual(['gpu:unknown-gpu']);
  });

  it('deep or huge models are refused with a limit, and reports stay linear in depth', () => {
    let deep: Layer = linear({ out: 4 });
    for (let i = 0; i < 1300; i += 1) deep = seq(deep);
    expect(codes(() => estimate(deep, { input: [1, 4] }))).toEqual(['model:too-deep']);
    let nested: Layer = seq(linear({ out: 4 }), relu());
    for (let i = 0; i < 60; i += 1) nested = seq(nested);
    const started = performance.now();
    summary(nested, { input: [1, 4], format: 'torchinfo' });
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('shared tables are frozen, and results own their arrays', () => {
    expect(Object.isFrozen(GPUS) && Object.isFrozen(GPUS[0])).toBe(true);
    expect(() => {
      (GPUS[0] as { memoryBytes: number }).memoryBytes = 1;
    }).toThrow(TypeError);
    expect(gpu('V100-16GB').memoryBytes).toBeGreaterThan(1);
    expect(
      Object.isFrozen(CONTEXT_DEFAULTS) && Object.isFrozen(CATEGORIES) && Object.isFrozen(LLMS[0]!.config) && Object.isFrozen(TRANSFORMERS_RULES[0]!.variants),
    ).toBe(true);
    const shape = [1, 3, 32, 32];
    const ir = traceModel(model, { input: shape });
    shape[0] = 99;
    expect(ir.tensors[ir.inputs[0]!]!.spec.shape[0]).toBe(1);
  });
});
