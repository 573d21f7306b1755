/**
 * Hostile arguments to the trainers (issue "Hostile inputs everywhere"): a model that is not a
 * catalog decoder, options or fields that are not objects, a release or trainer that is no
 * string, a value that is not its default compared as JSON data — each a VramError with a path,
 * never a TypeError or a silently accepted value.
 */
import { describe, expect, it } from 'vitest';
import { fromHFConfig, grpoStep, relu, resolveTrainerArgs, sftStep, trainerFields, trainerStep } from '../../src/index.js';
import { errorOf, issueOf } from '../helpers/errors.js';

const model = fromHFConfig({
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 64,
});
const args = { per_device_train_batch_size: 1 };
const grpo = { per_device_train_batch_size: 2, num_generations: 2, max_completion_length: 4 };
const odd = { toString: 1, valueOf: 'x' };

describe('trainer steps refuse a model that is not a catalog decoder', () => {
  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a model whose meta has 2^40 layers', { ...model, meta: { ...model.meta, layers: 2 ** 40 } }],
    ['a model whose meta has no vocab', { ...model, meta: { ...model.meta, vocab: undefined } }],
  ])('%s', (_, junk) => {
    expect(issueOf(() => trainerStep(junk as never, args, { sequence: 8 }))).toMatch(/^model[.:]/);
    expect(issueOf(() => sftStep(junk as never, { ...args, max_length: 8 }))).toMatch(/^model[.:]/);
    expect(issueOf(() => grpoStep(junk as never, grpo, { prompt: 4 }))).toMatch(/^model[.:]/);
  });

  it('names the tampered field of the meta, the dtype and withHead', () => {
    const meta = model.meta!;
    expect(issueOf(() => trainerStep({ ...model, meta: { ...meta, layers: [1, 2] } } as never, args, { sequence: 8 }))).toBe('model.meta.layers:bad-option');
    expect(issueOf(() => trainerStep({ ...model, meta: { ...meta, layers: 2 ** 60 } } as never, args, { sequence: 8 }))).toBe('model.meta.layers:bad-option');
    expect(issueOf(() => sftStep({ ...model, withHead: 1 } as never, { max_length: 8 }))).toBe('model.withHead:bad-layer');
    expect(issueOf(() => grpoStep({ ...model, kind: null } as never, grpo, { prompt: 4 }))).toBe('model:bad-layer');
    expect(errorOf(() => trainerStep({ ...model, meta: undefined } as never, args, { sequence: 8 })).message).toMatch(/fromHFConfig, llm or llamaFamily/);
    expect(errorOf(() => sftStep(relu() as never, { max_length: 8 })).message).toMatch(/sftStep needs a decoder model/);
  });
});

describe('trainer steps refuse options that are not objects of their fields', () => {
  it('trainerStep', () => {
    expect(issueOf(() => trainerStep(model, args, undefined as never))).toBe('options:bad-option');
    expect(issueOf(() => trainerStep(model, args, null as never))).toBe('options:bad-option');
    expect(issueOf(() => trainerStep(model, args, {} as never))).toBe('options.sequence:missing-option');
    expect(issueOf(() => trainerStep(model, args, { sequence: 8, device: 'tpu' } as never))).toBe('options.device:bad-option');
    expect(issueOf(() => trainerStep(model, args, { sequence: 8, trl: odd } as never))).toBe('options.trl:bad-option');
    expect(issueOf(() => trainerStep(model, args, { sequence: 8, sequense: 8 } as never))).toBe('options.sequense:unknown-option');
  });

  it('sftStep and grpoStep', () => {
    expect(issueOf(() => sftStep(model, { max_length: 8 }, [] as never))).toBe('options:bad-option');
    expect(issueOf(() => sftStep(model, { max_length: 8 }, { peft: 3 } as never))).toBe('options.peft:bad-option');
    expect(issueOf(() => grpoStep(model, grpo, { prompt: odd } as never))).toBe('options.prompt:bad-option');
    expect(issueOf(() => grpoStep(model, grpo, { prompt: 4, gpuTotalBytes: Number.NaN }))).toBe('options.gpuTotalBytes:bad-option');
    expect(issueOf(() => grpoStep(model, grpo, { prompt: 4, vllm: 'x' } as never))).toBe('options.vllm:bad-option');
  });

  it('fields that are not a plain object', () => {
    expect(issueOf(() => trainerStep(model, null as never, { sequence: 8 }))).toBe('args:bad-option');
    expect(issueOf(() => sftStep(model, new Boolean(false) as never))).toBe('config:bad-option');
    expect(issueOf(() => grpoStep(model, [grpo] as never, { prompt: 4 }))).toBe('config:bad-option');
  });
});

describe('resolveTrainerArgs and trainerFields refuse junk positional arguments', () => {
  it('the trainer', () => {
    expect(issueOf(() => resolveTrainerArgs(Number.NaN as never, {}))).toBe('trainer:bad-option');
    expect(issueOf(() => resolveTrainerArgs('toString' as never, {}))).toBe('trainer:bad-option');
    expect(issueOf(() => trainerFields(odd as never))).toBe('trainer:bad-option');
    expect(issueOf(() => trainerFields(new Boolean(false) as never))).toBe('trainer:bad-option');
  });

  it('the release, read as an own key', () => {
    expect(issueOf(() => trainerFields('grpo', '__proto__'))).toBe('trl:unsupported-release');
    expect(issueOf(() => trainerFields('grpo', odd as never))).toBe('trl:unsupported-release');
    expect(issueOf(() => resolveTrainerArgs('grpo', {}, { trl: 'constructor' }))).toBe('trl:unsupported-release');
  });

  it('the options and the fields', () => {
    expect(issueOf(() => resolveTrainerArgs('grpo', {}, null as never))).toBe('options:bad-option');
    expect(issueOf(() => resolveTrainerArgs('grpo', {}, { trl: '1.13.0', sequence: 8 } as never))).toBe('options.sequence:unknown-option');
    expect(issueOf(() => resolveTrainerArgs('grpo', new Uint8Array(2) as never))).toBe('config:bad-option');
  });

  it('compares a value with its default as JSON data: a bigint or NaN is not the default', () => {
    // optim_args defaults to null; JSON.stringify(NaN) is "null" and JSON.stringify(1n) throws.
    expect(issueOf(() => resolveTrainerArgs('trainer', { optim_args: Number.NaN }))).toBe('args.optim_args:not-modelled');
    expect(issueOf(() => resolveTrainerArgs('trainer', { optim_args: 1n }))).toBe('args.optim_args:not-modelled');
    expect(resolveTrainerArgs('trainer', { gradient_checkpointing_kwargs: { use_reentrant: false } }).checkpointing).toBe(false);
  });

  it('a number field must be finite', () => {
    expect(issueOf(() => resolveTrainerArgs('grpo', { beta: Number.POSITIVE_INFINITY }))).toBe('config.beta:bad-option');
    expect(issueOf(() => resolveTrainerArgs('trainer', { max_grad_norm: Number.POSITIVE_INFINITY }))).toBe('args.max_grad_norm:bad-option');
  });
});
