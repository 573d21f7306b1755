/**
 * fromTrainingArguments (src/config/training-args.ts): ten dumps of TrainingArguments made by
 * transformers 5.18 itself from real commands (tools/oracle/training_args_dump.py;
 * test/fixtures/configs/training-args/sources.json), each read into arguments whose trainer step (and,
 * under DeepSpeed, whose rank's estimate) equals exactly that of the arguments written out by hand;
 * real commands vram-ts refuses, at the field; unknown and unmodelled fields; and the laws: a dump
 * reads as the short mapping of its non-default fields, and the reading of that mapping is itself.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/errors.js';
import {
  estimate,
  fromTrainingArguments,
  llm,
  resolveTrainerArgs,
  trainerFields,
  trainerStep,
  VramError,
  type EstimateOptions,
  type TrainerArgs,
  type TrainingArgumentsContext,
} from '../../src/index.js';

const dir = new URL('../fixtures/configs/training-args/', import.meta.url);
const fixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(new URL(`${name}.json`, dir), 'utf8'));
const dsFixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(new URL(`../deepspeed/${name}.json`, dir), 'utf8'));
const sources = JSON.parse(readFileSync(new URL('sources.json', dir), 'utf8')) as {
  examples: { name: string; use: string; url: string; argv: unknown; command: string; commit: string; error?: string[] }[];
};

const FIELDS = Object.keys(trainerFields('trainer').defaults).sort();
const model = llm('qwen2.5-0.5b');
const H = 896; // qwen2.5-0.5b's hidden_size
const SEQ = 32;
const step = (args: TrainerArgs) => trainerStep(model, args, { sequence: SEQ });
/** The estimate less its echo of the plan (the reading writes every knob, defaults too) and its trace. */
const run = (options: EstimateOptions) => {
  const { parallel: _plan, ir: _trace, ...figures } = estimate(model, { timeline: false, ...options });
  return figures;
};

/** Each dump, and the TrainingArguments that matter written out by hand (the rest are neutral or at their defaults). */
const CASES: readonly {
  name: string;
  hand: TrainerArgs;
  context?: TrainingArgumentsContext;
  deepspeed?: { path?: string; explicit: Omit<EstimateOptions, 'input'> };
  /** Arguments only DeepSpeed runs (fp16): no one-GPU trainer step to compare; their resolution is compared instead. */
  deepspeedOnly?: true;
}[] = [
  { name: 'clm-gpt2', hand: { per_device_train_batch_size: 8 } },
  { name: 'mlm-roberta-files', hand: { per_device_train_batch_size: 8 } },
  { name: 'trl-sft-lora-peft', hand: { per_device_train_batch_size: 2, gradient_accumulation_steps: 8 } },
  { name: 'trl-sft-lora-without-regret', hand: { per_device_train_batch_size: 2, gradient_accumulation_steps: 16 } },
  { name: 'trl-grpo-lora-without-regret', hand: { per_device_train_batch_size: 1, gradient_accumulation_steps: 8, max_grad_norm: 1 } },
  { name: 'trl-ssd-bf16', hand: { per_device_train_batch_size: 1, gradient_accumulation_steps: 32, bf16: true } },
  { name: 'perf-gradient-checkpointing', hand: { per_device_train_batch_size: 1, gradient_accumulation_steps: 4, gradient_checkpointing: true } },
  // bf16 is the Trainer's autocast over the model's float32 weights.
  { name: 'perf-bf16', hand: { bf16: true } },
  {
    // The notebook's `deepspeed="ds_config_zero3.json"`: the path comes back; the file (transformers'
    // tests/deepspeed/ds_config_zero3.json, the deepspeed fixtures' hf-tests-zero3) given back in the context.
    name: 'ds-notebook-path',
    hand: {},
    context: { deepspeed: dsFixture('hf-tests-zero3'), worldSize: 2, hiddenSize: H },
    deepspeed: {
      path: 'ds_config_zero3.json',
      explicit: {
        mode: 'train',
        optimizer: { name: 'adamw', impl: 'fused' },
        microBatches: 1,
        parallel: {
          engine: 'deepspeed',
          dp: 2,
          zero: 3,
          deepspeed: { reduceBucketSize: H * H, prefetchBucketSize: 722_534, paramPersistenceThreshold: 10 * H },
          offload: { optimizer: true, parameters: true },
        },
      },
    },
  },
  {
    // transformers' tests/deepspeed/ds_config_zero2_bf16.json as the dict, batch 4, accumulation 2, bf16.
    name: 'ds-nested-dict-zero2-bf16',
    hand: { per_device_train_batch_size: 4, gradient_accumulation_steps: 2, bf16: true },
    context: { worldSize: 2, hiddenSize: H },
    deepspeed: {
      explicit: {
        mode: 'train',
        precision: 'bf16',
        optimizer: { name: 'adamw', impl: 'fused' },
        microBatches: 2,
        parallel: { engine: 'deepspeed', dp: 2, zero: 2, deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true }, offload: { optimizer: true } },
      },
    },
  },
  {
    // `--fp16` with transformers' tests/deepspeed/ds_config_zero2.json (the deepspeed fixtures' hf-tests-zero2):
    // its fp16.enabled "auto" is the Trainer's fp16, DeepSpeed's fp16 engine on one GPU.
    name: 'ds-translation-zero2-fp16',
    hand: { per_device_train_batch_size: 1, fp16: true },
    context: { deepspeed: dsFixture('hf-tests-zero2'), worldSize: 1, hiddenSize: H },
    deepspeed: {
      path: 'tests/deepspeed/ds_config_zero2.json',
      explicit: {
        mode: 'train',
        precision: 'fp16',
        optimizer: { name: 'adamw', impl: 'fused' },
        microBatches: 1,
        parallel: { engine: 'deepspeed', dp: 1, zero: 2, deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true }, offload: { optimizer: true } },
      },
    },
    deepspeedOnly: true,
  },
];

describe('fromTrainingArguments: real dumps', () => {
  it('sources.json records eleven read and three refused examples, each with its url, ref and argv', () => {
    expect(sources.examples.filter((e) => e.use === 'equal').map((e) => e.name)).toEqual(CASES.map((c) => c.name));
    expect(sources.examples.filter((e) => e.use === 'error')).toHaveLength(3);
    for (const e of sources.examples) {
      expect(e.url).toMatch(/^https:\/\/github\.com\/huggingface\/(transformers|trl)\/blob\//);
      expect(e.commit).toMatch(/^[0-9a-f]{40}$/);
      expect(e.command.length).toBeGreaterThan(0);
      expect(e.argv).toBeTruthy();
    }
  });

  for (const c of CASES)
    it(`${c.name}: the step equals the hand-written arguments'`, () => {
      const dump = fixture(c.name);
      expect(Object.keys(dump).sort()).toEqual(FIELDS); // every field of TrainingArguments 5.18
      const reading = fromTrainingArguments(dump, c.context);
      expect(Object.isFrozen(reading) && Object.isFrozen(reading.args)).toBe(true);
      if (c.deepspeedOnly === true) {
        expect(reading.resolved).toEqual(resolveTrainerArgs('trainer', c.hand, { deepspeed: true }));
        // Off DeepSpeed the same arguments are refused (autocast and GradScaler are not modelled).
        expect(errorOf(() => step(reading.args)).issues[0]).toMatchObject({ path: ['args', 'fp16'], code: 'not-modelled' });
      } else {
        const mine = step(reading.args);
        const theirs = step(c.hand);
        expect(mine.peak).toBe(theirs.peak);
        expect(mine.phases).toEqual(theirs.phases);
        expect(mine).toEqual(theirs);
      }
      if (c.deepspeed === undefined) {
        expect(reading.options).toBeUndefined();
        expect(reading.deepspeedPath).toBeUndefined();
        return;
      }
      if (c.deepspeed.path !== undefined) {
        expect(reading.deepspeedPath).toBe(c.deepspeed.path);
        expect(fromTrainingArguments(dump).deepspeed).toBeUndefined();
      }
      const options = reading.options!;
      const input: [number, number] = [reading.resolved.batch, SEQ];
      expect(run({ ...options, input })).toEqual(run({ ...c.deepspeed.explicit, input }));
    });

  for (const e of sources.examples.filter((x) => x.use === 'error'))
    it(`${e.name}: refused at ${e.error!.join('.')}`, () => {
      const err = (() => {
        try {
          fromTrainingArguments(fixture(e.name));
        } catch (error) {
          return error;
        }
      })();
      expect(err).toBeInstanceOf(VramError);
      expect((err as VramError).issues[0]).toMatchObject({ path: e.error, code: 'not-modelled' });
    });
});

/** The issues of a reading that fails. */
const issuesOf = (args: unknown, context?: TrainingArgumentsContext) => errorOf(() => fromTrainingArguments(args, context)).issues;

describe('fromTrainingArguments: fields', () => {
  it('an unknown field is an error at its path with did-you-mean; so are fields of other releases', () => {
    const [typo] = issuesOf({ per_device_train_batch_siz: 2 });
    expect(typo).toMatchObject({ path: ['per_device_train_batch_siz'], code: 'unknown-field' });
    expect(typo!.message).toContain("did you mean 'per_device_train_batch_size'");
    // transformers 4.x dumps held these; 5.18's parser refuses them (parse_dict, allow_extra_keys=False).
    const old = issuesOf({ ...fixture('clm-gpt2'), logging_dir: 'runs', _n_gpu: 1 });
    expect(old.map((i) => i.path)).toEqual([['logging_dir'], ['_n_gpu']]);
  });

  it('a value that moves memory and is not modelled is an error at its path, all at once', () => {
    const issues = issuesOf({ torch_compile: true, debug: ['underflow_overflow'], accelerator_config: { split_batches: true }, optim: 'adamw_bnb_8bit' });
    expect(issues.map((i) => [i.path[0], i.code]).sort()).toEqual([
      ['accelerator_config', 'not-modelled'],
      ['debug', 'not-modelled'],
      ['optim', 'not-modelled'],
      ['torch_compile', 'not-modelled'],
    ]);
    // The Trainer's FSDP2: its units are the model's (context.model), over the world (context.worldSize).
    expect(issuesOf({ fsdp: 'full_shard auto_wrap' })).toMatchObject([{ path: ['context', 'model'], code: 'missing-context' }]);
    const model = llm('qwen2.5-0.5b');
    expect(issuesOf({ fsdp: 'full_shard auto_wrap' }, { model })).toMatchObject([{ path: ['context', 'worldSize'], code: 'missing-context' }]);
    const fsdp = (extra: object) => issuesOf({ fsdp: true, ...extra }, { model, worldSize: 2 }).map((i) => [i.path.join('.'), i.code]);
    expect(fsdp({ fsdp: 'hybrid_shard' })).toEqual([['fsdp', 'bad-option']]);
    expect(fsdp({ fsdp_config: { version: 1 } })).toEqual([['fsdp_config.version', 'not-modelled']]);
    expect(fsdp({ fsdp_config: { fsdp_reshard_after_foward: true } })).toEqual([['fsdp_config.fsdp_reshard_after_foward', 'unknown-option']]);
    expect(fsdp({ fsdp_config: { auto_wrap_policy: 'SIZE_BASED_WRAP' } })).toEqual([['fsdp_config.auto_wrap_policy', 'not-modelled']]);
    expect(fsdp({ fsdp_config: { transformer_layer_cls_to_wrap: ['Qwen2MLP'] } })).toEqual([['fsdp_config.transformer_layer_cls_to_wrap', 'not-modelled']]);
    expect(fsdp({ gradient_checkpointing: true })).toEqual([['gradient_checkpointing', 'not-modelled']]);
    expect(fsdp({ fsdp_config: 'fsdp.json' })).toEqual([['fsdp_config', 'bad-option']]);
    expect(fsdp({ deepspeed: { zero_optimization: { stage: 2 } } })).toEqual([['fsdp', 'bad-option']]);
  });

  it("the Trainer's FSDP2: accelerate's units, shard_grad_op keeps layers gathered, bf16 is the policy over fp32, accumulation reduces last", () => {
    const model = llm('qwen2.5-0.5b');
    const layers = Array.from({ length: 24 }, (_, i) => `model.layers.${i}`);
    const tail = { modules: ['model.norm', 'model.embed_tokens', 'lm_head'], reshardAfterForward: false };
    const read = (args: object) => fromTrainingArguments({ per_device_train_batch_size: 2, ...args }, { model, worldSize: 4 }).options;
    expect(read({ fsdp: 'full_shard auto_wrap', optim: 'adamw_torch' })).toEqual({
      mode: 'train',
      parallel: { engine: 'fsdp2', dp: 4, units: [...layers, tail], reshardAfterForward: true },
      microBatches: 1,
      optimizer: { name: 'adamw', impl: 'foreach' },
    });
    expect(read({ fsdp: 'shard_grad_op' })?.parallel).toMatchObject({ reshardAfterForward: false });
    // An explicit fsdp_config value wins over the legacy word (setdefault, ta:2879-2881).
    expect(read({ fsdp: 'shard_grad_op', fsdp_config: { fsdp_reshard_after_forward: true } })?.parallel).toMatchObject({ reshardAfterForward: true });
    expect(read({ fsdp: 'full_shard offload' })?.parallel).toMatchObject({ offload: { optimizer: true, parameters: true } });
    const bf16 = read({ fsdp: true, bf16: true, gradient_accumulation_steps: 4 })!;
    expect([bf16.dtype, bf16.microBatches]).toEqual(['float32', 4]);
    expect(bf16.parallel).toMatchObject({ mixedPrecision: { param: 'bfloat16', reduce: 'bfloat16' }, gradientSync: 'last' });
  });

  it('post-init values read as the defaults they came from; false-y fsdp is off', () => {
    const r = fromTrainingArguments({ report_to: [], debug: [], disable_tqdm: false, hub_token: '<HUB_TOKEN>', fsdp: '', per_device_train_batch_size: 2 });
    expect(r.args).toEqual({ per_device_train_batch_size: 2 });
  });

  it('dict fields given as JSON strings are parsed as __post_init__ parses them', () => {
    const r = fromTrainingArguments({ gradient_checkpointing: true, gradient_checkpointing_kwargs: '{"use_reentrant": "false"}' });
    expect(r.args.gradient_checkpointing_kwargs).toEqual({ use_reentrant: false });
    expect(issuesOf({ deepspeed: '{not json' })).toMatchObject([{ path: ['deepspeed'], code: 'bad-option' }]);
  });

  it("DeepSpeed's issues are named under deepspeed; context.deepspeed only for a path", () => {
    const nvme = { zero_optimization: { stage: 3, offload_param: { device: 'nvme' } }, train_micro_batch_size_per_gpu: 'auto' };
    expect(issuesOf({ deepspeed: nvme }, { worldSize: 2 })[0]!.path.slice(0, 2)).toEqual(['deepspeed', 'zero_optimization']);
    expect(issuesOf({ deepspeed: 'ds.json' }, { deepspeed: nvme, worldSize: 2 })[0]!.path.slice(0, 3)).toEqual(['context', 'deepspeed', 'zero_optimization']);
    expect(issuesOf({ deepspeed: { zero_optimization: { stage: 1 } } }, { deepspeed: {} })[0]!.path).toEqual(['context', 'deepspeed']);
    expect(issuesOf({ deepspeed: { zero_optimization: { stage: 1 }, train_micro_batch_size_per_gpu: 'auto' } })[0]!.path).toEqual(['context', 'worldSize']);
  });

  it('bf16 with no bf16 section: accelerate adds one, so DeepSpeed holds bf16 parameters', () => {
    const r = fromTrainingArguments({ bf16: true, deepspeed: { zero_optimization: { stage: 1 }, train_micro_batch_size_per_gpu: 'auto' } }, { worldSize: 2 });
    expect(r.options).toMatchObject({ precision: 'bf16', microBatches: 1, parallel: { engine: 'deepspeed', zero: 1, dp: 2 } });
    expect(r.options!.optimizer).toEqual({ name: 'adamw', impl: 'fused' });
  });

  it("a DeepSpeed accumulation that is not the Trainer's is refused, not guessed", () => {
    const ds = { zero_optimization: { stage: 2 }, train_micro_batch_size_per_gpu: 'auto' };
    expect(issuesOf({ gradient_accumulation_steps: 4, deepspeed: ds }, { worldSize: 2 })).toMatchObject([
      { path: ['deepspeed', 'gradient_accumulation_steps'], code: 'not-modelled', expected: '4', received: '1' },
    ]);
    expect(
      fromTrainingArguments({ gradient_accumulation_steps: 4, deepspeed: { ...ds, gradient_accumulation_steps: 'auto' } }, { worldSize: 2 }).options!
        .microBatches,
    ).toBe(4);
    // train_batch_size against the Trainer's world × batch × accumulation: HF's fill_match refuses it.
    expect(issuesOf({ per_device_train_batch_size: 2, deepspeed: { train_batch_size: 8, zero_optimization: { stage: 1 } } }, { worldSize: 2 })).toMatchObject([
      { path: ['deepspeed', 'train_batch_size'], code: 'mismatch' },
    ]);
  });

  it('gradient_checkpointing under DeepSpeed checkpoints every decoder layer (context.layers); Liger there is refused', () => {
    const args = {
      per_device_train_batch_size: 2,
      gradient_checkpointing: true,
      deepspeed: { zero_optimization: { stage: 2 }, train_micro_batch_size_per_gpu: 'auto' },
    };
    expect(issuesOf(args, { worldSize: 2 })).toMatchObject([{ path: ['context', 'layers'], code: 'missing-context' }]);
    const r = fromTrainingArguments(args, { worldSize: 2, layers: 24 });
    expect(r.options!.checkpoint!.modules).toEqual(Array.from({ length: 24 }, (_, i) => `model.layers.${i}`));
    const { checkpoint: _c, ...without } = r.options!;
    const on = estimate(model, { ...r.options!, input: [2, SEQ], timeline: false }).bytes;
    const off = estimate(model, { ...without, input: [2, SEQ], timeline: false }).bytes;
    expect(on.activations).toBeLessThan(off.activations as number);
    expect(issuesOf({ ...args, use_liger_kernel: true }, { worldSize: 2, layers: 24 })).toMatchObject([{ path: ['use_liger_kernel'], code: 'not-modelled' }]);
  });

  it('a value that is not JSON data is refused at its path', () => {
    expect(issuesOf({ output_dir: new Uint8Array(2), lr_scheduler_kwargs: { a: [1, () => 2] } }).map((i) => i.path)).toEqual([
      ['output_dir'],
      ['lr_scheduler_kwargs', 'a', 1],
    ]);
  });

  it("leaves the caller's objects unfrozen", () => {
    const kwargs = { use_reentrant: false };
    fromTrainingArguments({ gradient_checkpointing_kwargs: kwargs });
    expect(Object.isFrozen(kwargs)).toBe(false);
  });
});

describe('fromTrainingArguments: laws', () => {
  const dumps = CASES.filter((c) => c.deepspeed === undefined).map((c) => fixture(c.name));
  const overrides = fc.record(
    {
      per_device_train_batch_size: fc.integer({ min: 1, max: 16 }),
      gradient_accumulation_steps: fc.integer({ min: 1, max: 8 }),
      gradient_checkpointing: fc.boolean(),
      bf16: fc.boolean(),
      optim: fc.constantFrom('adamw_torch_fused', 'adamw_torch', 'sgd'),
      max_grad_norm: fc.constantFrom(0, 0.5, 1),
      report_to: fc.constantFrom('none', [], ['trackio']),
      debug: fc.constantFrom('', []),
    },
    { requiredKeys: [] },
  );

  it('a dump reads as the mapping of its non-default fields, and that mapping reads as itself', () => {
    fc.assert(
      fc.property(fc.constantFrom(...dumps), overrides, (dump, o) => {
        const whole = fromTrainingArguments({ ...dump, ...o });
        const short = fromTrainingArguments(whole.args);
        expect(short).toEqual(whole);
        expect(fromTrainingArguments({ ...fromTrainingArguments(dump).args, ...o })).toEqual(whole);
      }),
      { numRuns: 60 },
    );
  });

  it('the order of the fields does not matter', () => {
    const dump = dumps[0]!;
    const names = Object.keys(dump);
    fc.assert(
      fc.property(fc.shuffledSubarray(names, { minLength: names.length, maxLength: names.length }), (order) => {
        const shuffled = Object.fromEntries(order.map((k) => [k, dump[k]]));
        expect(fromTrainingArguments(shuffled)).toEqual(fromTrainingArguments(dump));
      }),
      { numRuns: 20 },
    );
  });
});

describe('fromTrainingArguments: fp16', () => {
  const zero2 = { zero_optimization: { stage: 2 }, train_micro_batch_size_per_gpu: 'auto', gradient_accumulation_steps: 'auto' };
  it('under DeepSpeed is DeepSpeed\'s fp16 (its section\'s "auto" filled from it); elsewhere not modelled', () => {
    const reading = fromTrainingArguments({ fp16: true, deepspeed: { ...zero2, fp16: { enabled: 'auto' } } }, { worldSize: 2 });
    expect(reading.resolved.fp16).toBe(true);
    expect(reading.options?.precision).toBe('fp16');
    expect(fromTrainingArguments({ fp16: false, deepspeed: { ...zero2, fp16: { enabled: 'auto' } } }, { worldSize: 2 }).options?.precision).toBeUndefined();
    expect(issuesOf({ fp16: true })[0]).toMatchObject({ path: ['fp16'], code: 'not-modelled' });
  });

  it("with no fp16 section, accelerate's added one casts the inputs (auto_cast): refused at fp16", () => {
    expect(issuesOf({ fp16: true, deepspeed: zero2 }, { worldSize: 2 })[0]).toMatchObject({
      path: ['fp16'],
      code: 'not-modelled',
      message: expect.stringMatching(/auto_cast/),
    });
  });

  it('fp16 with bf16 is refused as TrainingArguments refuses it', () => {
    expect(issuesOf({ fp16: true, bf16: true, deepspeed: { ...zero2, fp16: { enabled: 'auto' } } }, { worldSize: 2 })[0]).toMatchObject({
      path: ['fp16'],
      code: 'bad-option',
    });
  });
});
