import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { run } from '../../src/cli/main.js';
import { readField } from '../../src/cli/fields.js';
import { FIELD_FLAGS } from '../../src/cli/flags.js';
import { grpoStep, llm, sftStep, trainerFields } from '../../src/index.js';
import { cli, scratch } from '../helpers/cli.js';

const { dir: tmp, file } = scratch('cli-trainers');

const peakOf = (r: { out: string }) => (JSON.parse(r.out) as { peak: number }).peak;
const model = llm('qwen2.5-0.5b');

const GRPO_FLAGS = [
  '--per-device-train-batch-size',
  '4',
  '--num-generations',
  '4',
  '--max-completion-length',
  '64',
  '--beta',
  '0.04',
  '--no-gradient-checkpointing',
];
const GRPO_CONFIG = { per_device_train_batch_size: 4, num_generations: 4, max_completion_length: 64, beta: 0.04, gradient_checkpointing: false };

describe('the field flags', () => {
  it('are every field of GRPOConfig and SFTConfig, kebab-case, but --fsdp and --deepspeed (the command’s flags)', () => {
    const names = new Set([...Object.keys(trainerFields('grpo').defaults), ...Object.keys(trainerFields('sft').defaults)]);
    const flags = new Set(Object.values(FIELD_FLAGS).map((s) => s.field));
    expect([...names].filter((n) => !flags.has(n))).toEqual(['fsdp', 'deepspeed']);
    expect(FIELD_FLAGS['num-generations']).toMatchObject({ field: 'num_generations', scope: ['grpo', 'rl'], kind: 'number' });
    expect(FIELD_FLAGS['max-length']).toMatchObject({ scope: ['sft'] });
    expect(FIELD_FLAGS.bf16).toMatchObject({ kind: 'boolean', nullable: true, scope: ['grpo', 'sft', 'rl'] });
    expect(FIELD_FLAGS['loss-type']).toMatchObject({ kind: 'string', nullable: true });
  });

  it('read by the type of their defaults', () => {
    const read = (flag: string, text: string) => readField(FIELD_FLAGS[flag]!, text);
    expect(read('beta', '1e-2')).toBe(0.01);
    expect(read('max-length', 'none')).toBeNull();
    expect(read('loss-type', 'null')).toBeNull();
    expect(read('report-to', 'none')).toBe('none');
    expect(read('bf16', 'True')).toBe(true);
    expect(read('include-for-metrics', 'inputs,loss')).toEqual(['inputs', 'loss']);
    expect(read('gradient-checkpointing-kwargs', '{"use_reentrant": false}')).toEqual({ use_reentrant: false });
    expect(read('generation-batch-size', '16')).toBe(16);
    expect(() => read('beta', '0x10')).toThrow(expect.objectContaining({ path: '--beta', message: 'beta is a number' }));
    expect(() => read('gradient-checkpointing', 'yes')).toThrow(/true or false/);
    expect(() => read('gradient-checkpointing-kwargs', '{bad')).toThrow(/not valid JSON/);
  });

  it('max_length none: the tokens come from --sequence', () => {
    const r = cli('sft', 'qwen2.5-0.5b', '--max-length', 'none', '--sequence', '100', '--format', 'json');
    expect(r.err).toBe('');
    expect(peakOf(r)).toBe(sftStep(model, { max_length: null }, { sequence: 100 }).peak);
    expect(cli('sft', 'qwen2.5-0.5b', '--max-length', 'none').err).toMatch(/^vram-ts: --sequence: max_length is null/);
  });

  it('grpo: the flags give the config fields (the same peak as grpoStep with them)', () => {
    const r = cli('grpo', 'qwen2.5-0.5b', ...GRPO_FLAGS, '--prompt', '32', '--format', 'json');
    expect(r.err).toBe('');
    expect(peakOf(r)).toBe(grpoStep(model, GRPO_CONFIG, { prompt: 32 }).peak);
    expect((JSON.parse(r.out) as { args: { grpo: { beta: number } } }).args.grpo.beta).toBe(0.04);
  });

  it('booleans: --flag, --no-flag, --flag true|false, --flag=false', () => {
    const base = ['sft', 'qwen2.5-0.5b', '--per-device-train-batch-size', '1', '--max-length', '64', '--format', 'json'];
    const off = peakOf(cli(...base, '--no-gradient-checkpointing'));
    expect(off).toBe(sftStep(model, { per_device_train_batch_size: 1, max_length: 64, gradient_checkpointing: false }).peak);
    expect(peakOf(cli(...base, '--gradient-checkpointing', 'false'))).toBe(off);
    expect(peakOf(cli(...base, '--gradient-checkpointing=false'))).toBe(off);
    const on = peakOf(cli(...base, '--gradient-checkpointing'));
    expect(on).toBe(peakOf(cli(...base, '--gradient-checkpointing', 'true')));
    expect(on).toBe(sftStep(model, { per_device_train_batch_size: 1, max_length: 64, gradient_checkpointing: true }).peak);
  });

  it('sft: --sequence, --loss-type, the LoRA flags', () => {
    const r = cli(
      'sft',
      'qwen2.5-0.5b',
      '--sequence',
      '128',
      '--loss-type',
      'nll',
      '--lora-r',
      '16',
      '--lora-target-modules',
      'q_proj,v_proj',
      '--format',
      'json',
    );
    expect(r.err).toBe('');
    const direct = sftStep(model, { loss_type: 'nll' }, { sequence: 128, peft: { r: 16, target_modules: ['q_proj', 'v_proj'] } });
    expect(peakOf(r)).toBe(direct.peak);
    // PEFT's default targets on a Qwen2 are q_proj and v_proj.
    expect(peakOf(cli('sft', 'qwen2.5-0.5b', '--sequence', '128', '--loss-type', 'nll', '--lora-r', '16', '--format', 'json'))).toBe(direct.peak);
  });

  it('errors name the flag, the field or the file', () => {
    const typo = cli('grpo', 'qwen2.5-0.5b', '--num-generation', '8');
    expect(typo).toMatchObject({ code: 2, out: '' });
    expect(typo.err).toContain('did you mean --num-generations?');
    expect(cli('grpo', 'qwen2.5-0.5b', '--max-length', '8').err).toContain('applies to sft only');
    expect(cli('grpo', 'qwen2.5-0.5b', '--per-device-train-batch-size', '0').err).toMatch(
      /^vram-ts: --per-device-train-batch-size: must be a positive integer/,
    );
    expect(cli('grpo', 'qwen2.5-0.5b', '--beta', 'x').err).toContain('--beta');
    expect(cli('grpo', 'qwen2.5-0.5b', '--vllm-tensor-parallel-size', '2').err).toContain('GRPOConfig.vllm_tensor_parallel_size is not modelled');
    expect(cli('grpo', 'qwen2.5-0.5b', '--use-vllm').err).toContain("--gpu: vLLM colocated sizes itself from the GPU's total memory");
    expect(cli('sft', 'qwen2.5-0.5b', '--optimizer', 'adam').err).toContain("SFTConfig's --optim");
  });
});

describe('--config', () => {
  const yaml = file(
    'grpo_config.yaml',
    `# a GRPO run
per_device_train_batch_size: 4
num_generations: 4       # completions per prompt
max_completion_length: 64
beta: 4e-2
gradient_checkpointing: false
gradient_checkpointing_kwargs:
  use_reentrant: false
output_dir: "runs/grpo"
report_to: [none]
`,
  );
  const json = file('grpo_config.json', JSON.stringify({ ...GRPO_CONFIG, output_dir: 'runs/grpo' }));
  const flags = cli('grpo', 'qwen2.5-0.5b', ...GRPO_FLAGS, '--prompt', '32', '--format', 'json');

  it('JSON and YAML give the result of the flags', () => {
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', json, '--prompt', '32', '--format', 'json').out).toBe(
      flags.out.replace('"output_dir": null', '"output_dir": "runs/grpo"'),
    );
    expect(peakOf(cli('grpo', 'qwen2.5-0.5b', '--config', yaml, '--prompt', '32', '--format', 'json'))).toBe(peakOf(flags));
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', yaml, '--prompt', '32').out).toBe(cli('grpo', 'qwen2.5-0.5b', ...GRPO_FLAGS, '--prompt', '32').out);
  });

  it('flags override the file', () => {
    const over = cli('grpo', 'qwen2.5-0.5b', '--config', yaml, '--prompt', '32', '--num-generations', '2', '--gradient-checkpointing', '--format', 'json');
    expect(peakOf(over)).toBe(grpoStep(model, { ...GRPO_CONFIG, num_generations: 2, gradient_checkpointing: true }, { prompt: 32 }).peak);
  });

  it('errors name the line, the key or the file', () => {
    const bad = cli('grpo', 'qwen2.5-0.5b', '--config', file('anchor.yaml', 'beta: 0.04\n\nx: &a 1\n'));
    expect(bad).toMatchObject({ code: 2, out: '' });
    expect(bad.err).toMatch(/anchor\.yaml:3: anchors/);
    // A TRL script's file (ModelConfig, ScriptArguments) is read as TrlParser reads it: test/cli/trl-config.test.ts.
    const cliStyle = cli('grpo', 'qwen2.5-0.5b', '--config', file('trl.yaml', 'model_name_or_path: Qwen/Qwen3-8B\n'));
    expect(cliStyle.err).toMatch(/trl\.yaml: model_name_or_path: names another model than <model>/);
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', file('typo.json', '{"num_generation": 8}')).err).toContain("did you mean 'num_generations'");
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', file('broken.json', '{"beta": ')).err).toMatch(/broken\.json: is not valid JSON/);
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', file('list.json', '[1]')).err).toContain('one mapping');
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', join(tmp, 'missing.yaml')).err).toContain('cannot read');
    expect(cli('grpo', 'qwen2.5-0.5b', '--config', file('c.toml', '')).err).toContain('.json, .yaml or .yml');
  });

  it('--peft-config: a LoraConfig file, the --lora-* flags over it', () => {
    const peft = file('lora.yaml', 'r: 4\ntarget_modules:\n  - q_proj\n  - k_proj\nlora_alpha: 8\n');
    const r = cli('sft', 'qwen2.5-0.5b', '--sequence', '64', '--peft-config', peft, '--lora-r', '8', '--format', 'json');
    expect(r.err).toBe('');
    expect(peakOf(r)).toBe(sftStep(model, {}, { sequence: 64, peft: { r: 8, target_modules: ['q_proj', 'k_proj'], lora_alpha: 8 } }).peak);
    expect(cli('sft', 'qwen2.5-0.5b', '--peft-config', file('bad-lora.json', '{"rank": 8}')).err).toMatch(/bad-lora\.json: rank: not a field of LoraConfig/);
  });
});

describe('output', () => {
  it('the table: phases, the peak and its phase, between steps, generation batch and KV cache', () => {
    const r = cli('grpo', 'qwen2.5-0.5b', ...GRPO_FLAGS, '--prompt', '32', '--gpu', 'A800-80GB');
    const g = grpoStep(model, GRPO_CONFIG, { prompt: 32 });
    expect(r.code).toBe(0);
    for (const phase of g.phases) expect(r.out).toContain(phase.detail);
    expect(r.out).toMatch(new RegExp(`peak\\s+[\\d.]+ \\w+\\s+in ${g.peakPhase}`));
    expect(r.out).toMatch(/Between steps: /);
    expect(r.out).toContain('Generation batch: 4 sequences');
    expect(r.out).toContain('KV cache at the last decode step');
    expect(r.out).toContain('Fits A800-80GB');
  });

  it('--format json parses, with fit when --gpu is given; --check exits 1 when it does not fit', () => {
    const args = ['grpo', 'qwen2.5-0.5b', '--max-completion-length', '64', '--prompt', '32', '--gpu', '1GB'];
    const json = cli(...args, '--format', 'json');
    expect(json.code).toBe(0);
    const parsed = JSON.parse(json.out) as {
      fit: { fits: boolean; needed: number; allocated: number; capacity: number; usable: number };
      peak: number;
      phases: unknown[];
    };
    expect(parsed.fit).toMatchObject({ fits: false, allocated: parsed.peak });
    // The runtime lines (context, cuBLAS workspaces) come on top of the step's peak.
    expect(parsed.fit.needed).toBe(parsed.peak + parsed.fit.capacity - parsed.fit.usable);
    expect(parsed.fit.capacity - parsed.fit.usable).toBeGreaterThan(0);
    expect(cli(...args).out).toContain('Does not fit 1GB');
    expect(cli(...args, '--check').code).toBe(1);
    expect(cli(...args, '--check', '--format', 'json').code).toBe(1);
    expect(cli('sft', 'qwen2.5-0.5b', '--sequence', '64', '--gpu', '1GB', '--check').code).toBe(1);
    expect(cli('sft', 'qwen2.5-0.5b', '--sequence', '64', '--gpu', '80GB', '--check').code).toBe(0);
  });
});

describe("grpo's flags before the trainers' fields", () => {
  it('say which field replaced them', () => {
    for (const [flag, field] of [
      ['--group', '--num-generations'],
      ['--completion', '--max-completion-length'],
      ['--micro-batch', '--per-device-train-batch-size'],
    ] as const) {
      let err = '';
      const code = run(
        ['grpo', 'gpt2', flag, '2'],
        () => undefined,
        (t) => (err += t),
      );
      expect(code).toBe(2);
      expect(err).toContain('is no longer an option');
      expect(err).toContain(field);
    }
  });
});
