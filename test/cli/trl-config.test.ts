/**
 * `vram-ts grpo|sft|rl --config FILE` with TRL script configs (ScriptArguments, GRPOConfig/SFTConfig,
 * ModelConfig, env) read as TRL 1.13.0's TrlParser reads them: ten real examples, each the figure
 * of its explicit flags (test/fixtures/configs/trl/sources.json), the real files refused with
 * `file: key`, and the neutral keys never changing the result.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fromTrlConfig } from '../../src/index.js';
import { cli, scratch } from '../helpers/cli.js';

const DIR = fileURLToPath(new URL('../fixtures/configs/trl/', import.meta.url));
interface Example {
  readonly file: string;
  readonly command: 'sft' | 'grpo';
  readonly model: string;
  readonly flags?: readonly string[];
  readonly error?: string;
  readonly commit: string;
}
const SOURCES = JSON.parse(readFileSync(join(DIR, 'sources.json'), 'utf8')) as { examples: Example[]; errors: Example[] };

const { file } = scratch('cli-trl-config');
/** A small Qwen2 config.json standing in for the models outside the catalog (a config.json <model> is not compared with model_name_or_path). */
const STAND_IN = file(
  'qwen2-stand-in.json',
  JSON.stringify({
    model_type: 'qwen2',
    hidden_act: 'silu',
    hidden_size: 96,
    intermediate_size: 192,
    max_position_embeddings: 256,
    num_attention_heads: 6,
    num_hidden_layers: 2,
    num_key_value_heads: 2,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: false,
    torch_dtype: 'bfloat16',
    vocab_size: 512,
  }),
);
const modelOf = (e: Example) => (e.model === 'stand-in' ? STAND_IN : e.model);
/** Short GRPO steps: the examples' own fields stay, the lengths are the command's. */
const extra = (command: string) => (command === 'grpo' ? ['--prompt', '32', '--max-completion-length', '32'] : ['--sequence', '64']);

const json = (args: string[]) => {
  const r = cli(...args, '--format', 'json');
  expect(r.err).toBe('');
  expect(r.code).toBe(0);
  return r.out;
};

describe('TRL script configs as --config', () => {
  it('has ten real examples, each with its source', () => {
    expect(SOURCES.examples).toHaveLength(10);
    for (const e of [...SOURCES.examples, ...SOURCES.errors])
      expect(e).toMatchObject({ repo: expect.any(String), commit: expect.stringMatching(/^[0-9a-f]{40}$/), url: expect.stringContaining(e.commit) });
  });

  for (const e of SOURCES.examples)
    it(`${e.file}: the figure of ${e.flags!.join(' ') || 'no flags'}`, () => {
      const path = join(DIR, e.file);
      const viaFile = json([e.command, modelOf(e), '--config', path, ...extra(e.command)]);
      const viaFlags = json([e.command, modelOf(e), ...e.flags!, ...extra(e.command)]);
      expect(viaFile).toBe(viaFlags);
    });

  for (const e of SOURCES.errors)
    it(`${e.file}: refused at ${e.error}`, () => {
      const path = join(DIR, e.file);
      const r = cli(e.command, modelOf(e), '--config', path);
      expect(r.code).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toContain(`${path}: ${e.error}: `);
    });

  it('reads ModelConfig: dtype (or its older name torch_dtype) and attn_implementation as --dtype and --attention; the flags win', () => {
    const run = (text: string, ...flags: string[]) => json(['sft', STAND_IN, '--config', file('m.yaml', text), '--sequence', '64', ...flags]);
    const explicit = json(['sft', STAND_IN, '--dtype', 'float32', '--attention', 'eager', '--sequence', '64']);
    expect(run('dtype: float32\nattn_implementation: eager\n')).toBe(explicit);
    expect(run('torch_dtype: float32\nattn_implementation: eager\n')).toBe(explicit);
    expect(run('dtype: bfloat16\nattn_implementation: sdpa\n', '--dtype', 'float32', '--attention', 'eager')).toBe(explicit);
    expect(run('dtype: auto\n')).toBe(json(['sft', STAND_IN, '--sequence', '64']));
  });

  it('builds LoraConfig from use_peft as get_peft_config does (lora_r 16, lora_alpha 32, lora_dropout 0.05 by default)', () => {
    const s = fromTrlConfig('sft', { use_peft: true, lora_target_modules: ['all-linear'], dataset_name: 'x' });
    expect(s.peft).toEqual({ r: 16, lora_alpha: 32, lora_dropout: 0.05, target_modules: 'all-linear', use_rslora: false });
    expect(fromTrlConfig('sft', { lora_r: 64 }).peft).toBeUndefined();
  });

  it('names the file and key of each refusal', () => {
    const err = (text: string, command = 'sft', model = STAND_IN) => cli(command, model, '--config', file('e.yaml', text)).err;
    expect(err('per-device-train-batch-size: 2\n')).toContain(
      "e.yaml: per-device-train-batch-size: not a field of the trl sft script's dataclasses (did you mean 'per_device_train_batch_size'?)",
    );
    expect(err('use_peft: true\nuse_dora: true\n')).toContain('e.yaml: use_dora: DoRA');
    expect(err('attn_implementation: kernels-community/flash-attn2\n')).toContain('e.yaml: attn_implementation: this attention is not modelled');
    expect(err('reward_model_name_or_path: x/y\n', 'grpo')).toContain('e.yaml: reward_model_name_or_path:');
    expect(err('reward_funcs: [a]\n')).toContain('e.yaml: reward_funcs: not a field');
    expect(err('env: 3\n')).toContain('e.yaml: env: `env` field should be a dict');
    expect(err('model_name_or_path: Qwen/Qwen3-8B\n', 'sft', 'qwen2.5-0.5b')).toContain('e.yaml: model_name_or_path: names another model than <model>');
    expect(err('per_device_train_batch_size: 0\n')).toContain('e.yaml: per_device_train_batch_size:');
    expect(cli('sft', 'qwen2.5-0.5b', '--config', file('ok.yaml', 'model_name_or_path: Qwen/Qwen2.5-0.5B\n'), '--sequence', '64').code).toBe(0);
  });

  it('reads the same file for rl --framework trl', () => {
    const path = join(DIR, '02-clis-grpo-config.yaml');
    const rl = (...a: string[]) =>
      json(['rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', 'H100-80GB', '--prompt', '32', '--max-completion-length', '32', ...a]);
    // A script file without dtype: TrlParser's ModelConfig loads the model in float32 (its default); `auto`, as the checkpoint.
    const text = readFileSync(path, 'utf8');
    expect(rl('--config', path)).toBe(rl('--config', file('f32.yaml', `${text}dtype: float32\n`)));
    expect(rl('--config', file('auto.yaml', `${text}dtype: auto\n`))).toBe(rl());
    expect(rl('--config', path)).not.toBe(rl());
  });

  it('a 16-bit model for the trainers is refused, from the flag or the file, not ignored', () => {
    const flag = cli('sft', STAND_IN, '--dtype', 'bfloat16', '--sequence', '64');
    expect(flag.code).toBe(2);
    expect(flag.err).toMatch(/^vram-ts: --dtype: the trainers are estimated on a model loaded in float32/);
    const fromFile = cli('grpo', STAND_IN, '--config', file('bf.yaml', 'torch_dtype: bfloat16\n'));
    expect(fromFile.code).toBe(2);
    expect(fromFile.err).toContain('bf.yaml: torch_dtype: the trainers are estimated on a model loaded in float32');
  });

  it('a one-item lora_target_modules is refused: TRL passes it as a string, a regex PEFT full-matches against module names', () => {
    const r = cli('sft', STAND_IN, '--config', file('one.yaml', 'use_peft: true\nlora_target_modules: [q_proj]\n'), '--sequence', '64');
    expect(r.code).toBe(2);
    expect(r.err).toContain('one.yaml: lora_target_modules: one target: TRL passes it as a string');
  });

  it('never changes the result for the neutral keys (ScriptArguments, datasets, env, LoRA fields without use_peft)', () => {
    const base = 'per_device_train_batch_size: 2\ngradient_checkpointing: false\n';
    const expected = json(['sft', STAND_IN, '--config', file('base.yaml', base), '--sequence', '64']);
    const text = fc.string({ unit: fc.constantFrom('a', 'b', '/', '-', '0'), minLength: 1, maxLength: 12 }).map((s) => JSON.stringify(s));
    const neutral = fc.record(
      {
        model_name_or_path: fc.constant('"some/model"'),
        model_revision: text,
        dataset_name: text,
        dataset_config: text,
        dataset_train_split: text,
        dataset_streaming: fc.boolean().map(String),
        ignore_bias_buffers: fc.boolean().map(String),
        streaming: fc.boolean().map(String),
        test_split_size: fc.double({ min: 0.01, max: 0.5, noNaN: true }).map(String),
        env: fc.constant('{WANDB_PROJECT: "x", CUDA_VISIBLE_DEVICES: 0}'),
        lora_r: fc.integer({ min: 1, max: 64 }).map(String),
        lora_alpha: fc.integer({ min: 1, max: 64 }).map(String),
        load_in_4bit: fc.constant('false'),
        bnb_4bit_quant_type: fc.constantFrom('"nf4"', '"fp4"'),
        main_process_port: fc.integer({ min: 1024, max: 65535 }).map(String),
        report_to: fc.constantFrom('none', '[wandb]', 'trackio'),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(neutral, (keys) => {
        const yaml =
          base +
          Object.entries(keys)
            .map(([k, v]) => `${k}: ${v}\n`)
            .join('');
        expect(json(['sft', STAND_IN, '--config', file('n.yaml', yaml), '--sequence', '64'])).toBe(expected);
      }),
      { numRuns: 25 },
    );
  });
});
