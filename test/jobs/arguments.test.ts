/**
 * Hostile arguments to rlJob (issue "Hostile inputs everywhere"): a model that is not a catalog
 * decoder, options that are not an object, a trainer whose parts are not what the framework
 * reads — each a VramError with a path, never a TypeError.
 */
import { describe, expect, it } from 'vitest';
import { fromHFConfig, rlJob, seq } from '../../src/index.js';
import { issueOf } from '../helpers/errors.js';

const model = fromHFConfig({
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 64,
});
const trl = { config: { per_device_train_batch_size: 8, max_completion_length: 8 }, prompt: 8 };
const actor = { update: { input: [1, 8] }, logProbs: { input: [1, 8], mode: 'inference' as const } };

describe('rlJob refuses hostile arguments with a path', () => {
  it('a model that is not a catalog decoder', () => {
    expect(issueOf(() => rlJob(undefined as never, { framework: 'trl', gpu: 'H100-80GB', trainer: trl }))).toMatch(/^model[.:]/);
    expect(issueOf(() => rlJob(null as never, { framework: 'verl', gpu: 'H100-80GB', trainer: actor }))).toMatch(/^model[.:]/);
    expect(issueOf(() => rlJob(seq() as never, { framework: 'verl', gpu: 'H100-80GB', trainer: actor }))).toBe('model:not-modelled');
    expect(issueOf(() => rlJob({ ...model, withHead: 'x' } as never, { framework: 'trl', gpu: 'H100-80GB', trainer: trl }))).toBe('model.withHead:bad-layer');
    expect(
      issueOf(() => rlJob({ ...model, repeated: { ...model.repeated, count: -1 } } as never, { framework: 'verl', gpus: 2, gpu: 'H100-80GB', trainer: actor })),
    ).toBe('model.repeated.count:bad-option');
  });

  it('options that are not an object', () => {
    expect(issueOf(() => rlJob(model, null as never))).toBe('options:bad-option');
    expect(issueOf(() => rlJob(model, 'trl' as never))).toBe('options:bad-option');
  });

  it("a TRL trainer's prompt and config", () => {
    expect(issueOf(() => rlJob(model, { framework: 'trl', gpu: 'H100-80GB', trainer: { ...trl, prompt: { __proto__: null } } as never }))).toBe(
      'trainer.prompt:bad-option',
    );
    expect(issueOf(() => rlJob(model, { framework: 'trl', gpu: 'H100-80GB', trainer: { ...trl, config: null } as never }))).toBe('trainer.config:bad-option');
    expect(issueOf(() => rlJob(model, { framework: 'trl', gpu: 'H100-80GB', trainer: null as never }))).toBe('trainer:bad-option');
  });

  it("a verl / OpenRLHF trainer's estimates", () => {
    expect(issueOf(() => rlJob(model, { framework: 'verl', gpus: 2, gpu: 'H100-80GB', trainer: { ...actor, update: null } as never }))).toBe(
      'trainer.update:bad-option',
    );
    expect(issueOf(() => rlJob(model, { framework: 'verl', gpus: 2, gpu: 'H100-80GB', trainer: { ...actor, logProbs: 3 } as never }))).toBe(
      'trainer.logProbs:bad-option',
    );
    expect(issueOf(() => rlJob(model, { framework: 'openrlhf', gpu: 'H100-80GB', trainer: { update: actor.update } as never }))).toBe(
      'trainer.logProbs:missing-option',
    );
  });
});
