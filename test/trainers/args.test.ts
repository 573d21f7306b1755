import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { DEFAULT_TRL, TRL_RELEASES, VramError, resolveTrainerArgs } from '../../src/index.js';
import { FIELDS_TRL_1_13_0 } from '../../src/trainers/fields.js';

function issues(f: () => unknown): { path: string; code: string; message: string }[] {
  try {
    f();
  } catch (error) {
    if (error instanceof VramError) return error.issues.map((i) => ({ path: i.path.join('.'), code: i.code, message: i.message }));
    throw error;
  }
  throw new Error('no error');
}

describe('resolveTrainerArgs: the release read and its defaults', () => {
  it('knows the release it was read from', () => {
    expect(TRL_RELEASES).toContain(DEFAULT_TRL);
    expect(FIELDS_TRL_1_13_0.trl).toBe('1.13.0');
    expect(FIELDS_TRL_1_13_0.transformers).toBe('5.18.0');
  });

  it("applies GRPOConfig's defaults and __post_init__ (TRL 1.13)", () => {
    const r = resolveTrainerArgs('grpo', {});
    expect(r.grpo).toEqual({
      numGenerations: 8,
      maxCompletionLength: 512,
      beta: 0,
      temperature: 1,
      numIterations: 1,
      stepsPerGeneration: 1,
      generationBatchSize: 8,
      lossType: 'dapo',
      minNewTokens: 0,
    });
    // base_config.py: bf16 None → not fp16; gradient checkpointing on.
    expect(r.bf16).toBe(true);
    expect(r.checkpointing).toBe(true);
    expect(r.optim).toBe('adamw_torch_fused');
  });

  it('derives steps_per_generation and generation_batch_size from each other', () => {
    expect(resolveTrainerArgs('grpo', { per_device_train_batch_size: 4, gradient_accumulation_steps: 4, num_generations: 4 }).grpo?.generationBatchSize).toBe(
      16,
    );
    expect(resolveTrainerArgs('grpo', { per_device_train_batch_size: 4, generation_batch_size: 12, num_generations: 4 }).grpo?.stepsPerGeneration).toBe(3);
    expect(issues(() => resolveTrainerArgs('grpo', { per_device_train_batch_size: 4, generation_batch_size: 12, steps_per_generation: 3 }))[0]?.path).toBe(
      'config.generation_batch_size',
    );
  });

  it('SFTConfig: chunked_nll by default, TrainingArguments: no checkpointing, fp32', () => {
    const s = resolveTrainerArgs('sft', {});
    expect([s.sftLoss, s.checkpointing, s.bf16, s.maxLength]).toEqual(['chunked_nll', true, true, 1024]);
    const t = resolveTrainerArgs('trainer', {});
    expect([t.batch, t.checkpointing, t.bf16, t.maxGradNorm]).toEqual([8, false, false, 1]);
  });
});

describe('resolveTrainerArgs: nothing is ignored', () => {
  it('an unknown field names itself and the nearest field', () => {
    const [issue] = issues(() => resolveTrainerArgs('grpo', { num_generation: 4 }));
    expect(issue?.path).toBe('config.num_generation');
    expect(issue?.code).toBe('unknown-field');
    expect(issue?.message).toContain("did you mean 'num_generations'");
  });

  it('a field of another release is unknown (max_prompt_length left GRPOConfig before 1.13)', () => {
    expect(issues(() => resolveTrainerArgs('grpo', { max_prompt_length: 512 }))[0]).toMatchObject({ path: 'config.max_prompt_length', code: 'unknown-field' });
  });

  it('a field that is not modelled is accepted only at its default', () => {
    expect(() => resolveTrainerArgs('grpo', { vllm_tensor_parallel_size: 1 })).not.toThrow();
    expect(issues(() => resolveTrainerArgs('grpo', { vllm_tensor_parallel_size: 2 }))[0]).toMatchObject({
      path: 'config.vllm_tensor_parallel_size',
      code: 'not-modelled',
    });
    expect(issues(() => resolveTrainerArgs('trainer', { torch_compile: true }))[0]).toMatchObject({ path: 'args.torch_compile', code: 'not-modelled' });
    expect(issues(() => resolveTrainerArgs('sft', { loss_type: 'dft' }))[0]).toMatchObject({ path: 'config.loss_type', code: 'not-modelled' });
    expect(issues(() => resolveTrainerArgs('grpo', { generation_kwargs: { top_k: 50 } }))[0]).toMatchObject({ path: 'config.generation_kwargs.top_k' });
  });

  it('every issue at once, and PEFT fields by their own names', () => {
    const found = issues(() => resolveTrainerArgs('grpo', { beta: -1, optim: 'lion', num_generations: 3 }, { peft: { r: 0, use_dora: true } })).map(
      (i) => i.path,
    );
    expect(found).toEqual(expect.arrayContaining(['config.beta', 'config.optim', 'config.num_generations', 'peft_config.r', 'peft_config.use_dora']));
  });

  it('an unread release is an error listing the ones read', () => {
    expect(issues(() => resolveTrainerArgs('grpo', {}, { trl: '0.9.6' }))[0]).toMatchObject({ path: 'trl', code: 'unsupported-release' });
  });

  it('property: any field at its own default resolves as if absent', () => {
    const names = Object.entries(FIELDS_TRL_1_13_0.GRPOConfig).filter(([, v]) => v === null || ['number', 'boolean', 'string'].includes(typeof v));
    fc.assert(
      fc.property(fc.subarray(names, { maxLength: 12 }), (picked) => {
        const given = Object.fromEntries(picked);
        expect(resolveTrainerArgs('grpo', given)).toEqual(resolveTrainerArgs('grpo', {}));
      }),
      { numRuns: 60 },
    );
  });

  it('property: a misspelt field (one letter dropped) is always refused by name', () => {
    const names = Object.keys(FIELDS_TRL_1_13_0.SFTConfig).filter((n) => n.length > 4);
    fc.assert(
      fc.property(fc.constantFrom(...names), fc.nat(), (name, k) => {
        const i = k % name.length;
        const typo = name.slice(0, i) + name.slice(i + 1);
        fc.pre(!Object.hasOwn(FIELDS_TRL_1_13_0.SFTConfig, typo));
        expect(issues(() => resolveTrainerArgs('sft', { [typo]: 1 }))[0]).toMatchObject({ path: `config.${typo}`, code: 'unknown-field' });
      }),
      { numRuns: 80 },
    );
  });
});

describe('resolveTrainerArgs: GRPO reference loading and generation kwargs', () => {
  it('model_init_kwargs: float32 or auto weights are modelled, another dtype is refused by name', () => {
    expect(() => resolveTrainerArgs('grpo', { model_init_kwargs: { dtype: 'float32', attn_implementation: 'eager' } })).not.toThrow();
    expect(issues(() => resolveTrainerArgs('grpo', { model_init_kwargs: { dtype: 'bfloat16' } }))[0]).toMatchObject({
      path: 'config.model_init_kwargs.dtype',
      code: 'not-modelled',
    });
  });
  it('generation_kwargs: min_new_tokens is read', () => {
    expect(resolveTrainerArgs('grpo', { generation_kwargs: { min_new_tokens: 16 } }).grpo?.minNewTokens).toBe(16);
  });
  it('Liger: nll by default, chunked_nll refused as SFTTrainer does; GRPO with Liger is not modelled', () => {
    expect(resolveTrainerArgs('sft', { use_liger_kernel: true }).sftLoss).toBe('nll');
    expect(issues(() => resolveTrainerArgs('sft', { use_liger_kernel: true, loss_type: 'chunked_nll' }))[0]?.path).toBe('config.loss_type');
    expect(issues(() => resolveTrainerArgs('grpo', { use_liger_kernel: true }))[0]).toMatchObject({ path: 'config.use_liger_kernel', code: 'not-modelled' });
  });
});
