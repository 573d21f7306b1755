import { tmpdir } from 'node:os';
/**
 * A command scripts can trust: exit codes mean one thing each (0 done or fits, 1 does not fit
 * with --check, 2 usage or input error), an error is exactly one line on stderr with nothing on
 * stdout, stdout holds exactly the asked format, numbers are read strictly, and options that do
 * not apply are refused.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { editDistance, nearest, wholeNumber } from '../../src/cli/args.js';
import { CliError } from '../../src/cli/errors.js';
import { FIELD_FLAGS } from '../../src/cli/flags.js';
import { COMPAT_HELP, FIT_HELP, GRPO_HELP, HELP, KORTHIKANTI_HELP, EXPLAIN_CONFIG_HELP, PLAN_HELP, RL_HELP, SFT_HELP, VLLM_HELP } from '../../src/cli/help.js';
import { SCOPE, run, stdoutFailure, type Command, type Flag } from '../../src/cli/main.js';
import { GPUS } from '../../src/index.js';
import { cli, scratch } from '../helpers/cli.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const { dir: tmp, file } = scratch('cli-scripts');

/** A safetensors file: the 8-byte length, then the header bytes, then `data` bytes. */
function safetensors(name: string, header: Uint8Array | string, data = 0, length?: bigint): string {
  const h = typeof header === 'string' ? new TextEncoder().encode(header) : header;
  const bytes = new Uint8Array(8 + h.length + data);
  new DataView(bytes.buffer).setBigUint64(0, length ?? BigInt(h.length), true);
  bytes.set(h, 8);
  return file(name, bytes);
}

mkdirSync(join(tmp, 'a-directory'), { recursive: true });

const gpuNames = GPUS.map((g) => g.name);

/** [name, argv, what stderr names: the problem, and the valid values where there is a set]. */
const BAD: readonly (readonly [string, () => string[], readonly (string | RegExp)[]])[] = [
  // Numbers: decimal digits only, a safe integer, in range.
  ['--batch 1e3', () => ['mobilenet_v3_small', '--batch', '1e3'], ['--batch', '"1e3"', '1 – 1,000,000,000']],
  ['--batch 0x10', () => ['mobilenet_v3_small', '--batch', '0x10'], ['--batch', '"0x10"']],
  ["--batch ' 8 '", () => ['mobilenet_v3_small', '--batch', ' 8 '], ['--batch', '" 8 "']],
  ['--batch 0', () => ['mobilenet_v3_small', '--batch', '0'], ['--batch', 'out of range', '1 – 1,000,000,000']],
  ['--batch 8.0', () => ['mobilenet_v3_small', '--batch', '8.0'], ['--batch', '"8.0"']],
  ['--batch=-2', () => ['mobilenet_v3_small', '--batch=-2'], ['--batch', '"-2"']],
  ['--batch past the limit', () => ['mobilenet_v3_small', '--batch', '1000000001'], ['--batch', 'out of range', '1,000,000,000']],
  ['--batch past 2^53', () => ['mobilenet_v3_small', '--batch', '99999999999999999999'], ['--batch', 'out of range']],
  ['--seq past the limit', () => ['gpt2', '--seq', '2000000000'], ['--seq', '1,000,000,000']],
  ['--classes 3.5', () => ['mobilenet_v3_small', '--classes', '3.5'], ['--classes', '"3.5"']],
  ['--lora-rank 0', () => ['gpt2', '--lora-rank', '0'], ['--lora-rank', 'out of range']],
  ['--num-generations 1e2', () => ['grpo', 'qwen2.5-0.5b', '--num-generations', '1e2'], ['--num-generations', 'multiple of num_generations']],
  ['--prompt -', () => ['grpo', 'qwen2.5-0.5b', '--prompt=-5'], ['--prompt', '"-5"']],
  ['--max-completion-length 0', () => ['grpo', 'qwen2.5-0.5b', '--max-completion-length', '0'], ['--max-completion-length', 'positive integer']],
  ['--per-device-train-batch-size x', () => ['grpo', 'qwen2.5-0.5b', '--per-device-train-batch-size', 'x'], ['--per-device-train-batch-size', '"x"']],
  ['--sequence 0', () => ['sft', 'qwen2.5-0.5b', '--sequence', '0'], ['--sequence', 'out of range']],
  ['--num-generations not dividing the batch', () => ['grpo', 'qwen2.5-0.5b', '--num-generations', '3'], ['--num-generations', 'a divisor of 8']],
  ['--hidden 0x400', () => ['korthikanti', '--hidden', '0x400'], ['--hidden']],
  ['--heads 0', () => ['korthikanti', '--heads', '0'], ['--heads']],
  ['--heads not dividing --hidden', () => ['korthikanti', '--hidden', '100', '--heads', '3'], ['--heads', 'divide']],
  ['--input 3x224', () => ['mobilenet_v3_small', '--input', '3x224'], ['--input', '"3x224"', '3x224x224']],
  ['--input 3x2e2x224', () => ['mobilenet_v3_small', '--input', '3x2e2x224'], ['--input']],
  ['--input 3x0x224', () => ['mobilenet_v3_small', '--input', '3x0x224'], ['--input', 'out of range']],
  ['--input with spaces', () => ['mobilenet_v3_small', '--input', '3x 224x224'], ['--input']],
  // Options that do not apply.
  ['--seq on a CNN', () => ['mobilenet_v3_small', '--seq', '128'], ['--seq', 'applies to LLMs', 'mobilenet_v3_small is a CNN', '--input']],
  ['--input on an LLM', () => ['gpt2', '--input', '3x224x224'], ['--input', 'applies to CNNs', 'gpt2 is an LLM', '--seq']],
  ['--classes on an LLM', () => ['gpt2', '--classes', '3'], ['--classes', 'gpt2 is an LLM']],
  ['--qlora without --lora-rank', () => ['gpt2', '--qlora'], ['--qlora', '--lora-rank']],
  ['--train --infer', () => ['gpt2', '--train', '--infer'], ['--train', '--infer']],
  ['--optimizer with --infer', () => ['gpt2', '--infer', '--optimizer', 'adam'], ['--optimizer', 'training']],
  ['--checkpointing with --infer', () => ['gpt2', '--infer', '--checkpointing'], ['--checkpointing', 'training']],
  ['--dtype with --precision', () => ['gpt2', '--dtype', 'float32', '--precision', 'bf16'], ['--dtype', '--precision']],
  ['--solve without fit', () => ['gpt2', '--solve', 'seq'], ['--solve', 'fit']],
  ['--transformers on a CNN', () => ['mobilenet_v3_small', '--transformers', '4.40.2'], ['--transformers', 'applies to LLMs', 'CNN']],
  ['--dtype on a CNN', () => ['mobilenet_v3_small', '--dtype', 'float16'], ['--dtype', 'applies to LLMs']],
  ['--no-cache on a CNN', () => ['mobilenet_v3_small', '--no-cache'], ['--no-cache', 'applies to LLMs']],
  ['--attention on a CNN', () => ['mobilenet_v3_small', '--attention', 'sdpa'], ['--attention', 'applies to LLMs']],
  ['--lora-rank on a CNN', () => ['mobilenet_v3_small', '--lora-rank', '8'], ['--lora-rank', 'applies to LLMs']],
  ['--num-generations outside grpo', () => ['gpt2', '--num-generations', '8'], ['--num-generations', 'grpo']],
  ['--prompt in fit', () => ['fit', 'gpt2', '--gpu', 'H100', '--prompt', '2'], ['--prompt', 'grpo', 'not to fit']],
  ['--max-length in grpo', () => ['grpo', 'qwen2.5-0.5b', '--max-length', '8'], ['--max-length', 'sft only', 'SFTConfig']],
  ['--optimizer in sft', () => ['sft', 'qwen2.5-0.5b', '--optimizer', 'adam'], ['--optimizer', "SFTConfig's --optim"]],
  [
    'an unknown --config field',
    () => ['grpo', 'qwen2.5-0.5b', '--config', file('cli-style.json', '{"datset_name": "x"}')],
    ['cli-style.json: datset_name', "not a field of the trl grpo script's dataclasses (did you mean 'dataset_name'?)"],
  ],
  ['--hidden outside korthikanti', () => ['gpt2', '--hidden', '768'], ['--hidden', 'korthikanti']],
  ['--heads in grpo', () => ['grpo', 'gpt2', '--heads', '12'], ['--heads', 'korthikanti']],
  ['--batch in grpo', () => ['grpo', 'gpt2', '--batch', '2'], ['--batch', '--per-device-train-batch-size']],
  ['--infer in grpo', () => ['grpo', 'gpt2', '--infer'], ['--infer', 'grpo']],
  ['--gpu in korthikanti', () => ['korthikanti', '--gpu', 'H100'], ['--gpu', 'korthikanti']],
  ['--format in fit', () => ['fit', 'gpt2', '--gpu', 'H100', '--format', 'json'], ['--format', 'one number']],
  ['--svg in grpo', () => ['grpo', 'gpt2', '--svg', join(tmp, 'x.svg')], ['--svg']],
  ['--batch with --solve batch', () => ['fit', 'gpt2', '--gpu', 'H100', '--solve', 'batch', '--batch', '4'], ['--batch', '--solve batch']],
  ['--seq with --solve seq', () => ['fit', 'gpt2', '--gpu', 'H100', '--solve', 'seq', '--seq', '64'], ['--seq', '--solve seq']],
  ['--solve seq on a CNN', () => ['fit', 'mobilenet_v3_small', '--gpu', 'H100', '--solve', 'seq'], ['--solve', 'CNN', 'batch or resolution']],
  ['--solve resolution on an LLM', () => ['fit', 'gpt2', '--gpu', 'H100', '--solve', 'resolution'], ['--solve', 'LLM', 'batch or seq']],
  ['--check without --gpu', () => ['mobilenet_v3_small', '--check'], ['--check', '--gpu']],
  ['--check without --gpu in grpo', () => ['grpo', 'gpt2', '--check'], ['--check', '--gpu']],
  ['fit without --gpu', () => ['fit', 'gpt2'], ['--gpu', 'fit', '24GB']],
  ['--gpu with a format that has no verdict', () => ['mobilenet_v3_small', '--format', 'torchsummary', '--gpu', 'H100'], ['--gpu', 'torchsummary', '--check']],
  ['--batch with --safetensors', () => ['--safetensors', join(tmp, 'model.safetensors'), '--batch', '2'], ['--batch', '--safetensors']],
  ['a model with --safetensors', () => ['gpt2', '--safetensors', join(tmp, 'model.safetensors')], ['gpt2', 'unexpected argument']],
  ['grpo on a CNN', () => ['grpo', 'mobilenet_v3_small'], ['grpo needs an LLM']],
  // Values with a set of valid ones: the error lists them.
  ['unknown --gpu', () => ['mobilenet_v3_small', '--gpu', 'B200'], ['--gpu', '"B200"', 'unknown GPU', '24GB', ...gpuNames]],
  ['--gpu 0GB', () => ['mobilenet_v3_small', '--gpu', '0GB'], ['--gpu', '"0GB"']],
  [
    'unknown --optimizer',
    () => ['gpt2', '--optimizer', 'adamww'],
    ['--optimizer', '"adamww"', 'sgd, sgd_momentum, adam, adamw, adafactor, lion, adam8bit', 'did you mean adamw?'],
  ],
  ['unknown --precision', () => ['gpt2', '--precision', 'fp8'], ['--precision', '"fp8"', 'fp32, bf16, fp16, amp-bf16, amp-fp16']],
  ['unknown --device', () => ['mobilenet_v3_small', '--device', 'tpu'], ['--device', '"tpu"', 'cuda, cpu']],
  ['unknown --framework', () => ['mobilenet_v3_small', '--framework', 'torch-3'], ['--framework', '"torch-3"', 'torch-2, torch-1.13']],
  ['unknown --attention', () => ['gpt2', '--attention', 'flash2'], ['--attention', 'eager, sdpa, flash']],
  ['unknown --dtype', () => ['gpt2', '--dtype', 'int3'], ['--dtype', '"int3"', 'float32, bfloat16, float16']],
  ['unknown --format', () => ['gpt2', '--format', 'yaml'], ['--format', '"yaml"', 'table, json, markdown, torchsummary, torchinfo, explain, svg']],
  ['unknown grpo --format', () => ['grpo', 'gpt2', '--format', 'markdown'], ['--format', 'table, json']],
  ['unknown --solve', () => ['fit', 'gpt2', '--gpu', 'H100', '--solve', 'context'], ['--solve', 'batch, seq, resolution']],
  ['unknown --transformers', () => ['gpt2', '--transformers', '5.3.0'], ['--transformers', '"5.3.0"', '4.40.0 – 4.57.6']],
  ['unknown model', () => ['no-such-model'], ['unknown model', '"no-such-model"', 'mobilenet_v3_small', 'qwen2.5-0.5b', 'gpt2', 'config.json']],
  ['a typo in a model', () => ['qwen2.5-0.5'], ['did you mean qwen2.5-0.5b?']],
  ['no model', () => [], ['no model', 'mobilenet_v3_small']],
  ['fit with no model', () => ['fit', '--gpu', 'H100'], ['no model']],
  ['a typo in a command', () => ['fitt', 'gpt2'], ['fitt', 'did you mean fit?']],
  ['an extra argument', () => ['gpt2', 'llama-3-8b'], ['llama-3-8b', 'unexpected argument']],
  ['korthikanti with a model', () => ['korthikanti', 'gpt2'], ['gpt2', 'unexpected argument']],
  // Flags node's parser refuses: the nearest valid flag.
  ['a misspelt flag', () => ['mobilenet_v3_small', '--precison', 'bf16'], ['--precison', 'did you mean --precision?']],
  ['another misspelt flag', () => ['gpt2', '--lora-rnak', '8'], ['--lora-rnak', 'did you mean --lora-rank?']],
  ['an unknown flag', () => ['mobilenet_v3_small', '--nope'], ['--nope', 'unknown option']],
  ['a flag without its value', () => ['mobilenet_v3_small', '--batch'], ['--batch', 'needs a value']],
  ['a flag followed by a flag', () => ['mobilenet_v3_small', '--batch', '--seq', '3'], ['--batch', 'needs a value']],
  ['a boolean with a value', () => ['mobilenet_v3_small', '--check=yes'], ['--check', 'takes no value']],
  // Files.
  ['a config.json that is a directory', () => [`${join(tmp, 'a-directory')}/`], ['a-directory', 'is a directory']],
  ['a missing config.json', () => [join(tmp, 'missing.json')], ['missing.json', 'cannot read', 'no such file']],
  ['a config.json that is not JSON', () => [file('broken.json', '{"model_type": ')], ['broken.json', 'not valid JSON']],
  ['a config.json that is an array', () => [file('array.json', '[]')], ['array.json', 'JSON object']],
  ['a config.json with an unknown model_type', () => [file('bert.json', '{"model_type": "bert"}')], ['model_type']],
  ['--safetensors: a directory', () => ['--safetensors', join(tmp, 'a-directory')], ['a-directory', 'is a directory']],
  ['--safetensors: a missing file', () => ['--safetensors', join(tmp, 'nothing.safetensors')], ['nothing.safetensors', 'cannot read']],
  ['--safetensors: shorter than 8 bytes', () => ['--safetensors', file('short.safetensors', 'abc')], ['short.safetensors', 'too short', '3 bytes']],
  ['--safetensors: an empty file', () => ['--safetensors', file('empty.safetensors', '')], ['empty.safetensors', 'too short', '0 bytes']],
  [
    '--safetensors: truncated header',
    () => ['--safetensors', safetensors('truncated.safetensors', '{"a":', 0, 1000n)],
    ['truncated.safetensors', 'past the end', '1000 bytes'],
  ],
  [
    '--safetensors: absurd header length',
    () => ['--safetensors', safetensors('absurd.safetensors', '{}', 0, 10n ** 12n)],
    ['absurd.safetensors', 'implausible header length', '100,000,000'],
  ],
  ['--safetensors: zero header length', () => ['--safetensors', safetensors('zero.safetensors', '', 0, 0n)], ['zero.safetensors', 'implausible header length']],
  ['--safetensors: not JSON', () => ['--safetensors', safetensors('text.safetensors', 'hello')], ['text.safetensors', 'not JSON']],
  [
    '--safetensors: not UTF-8',
    () => ['--safetensors', safetensors('latin1.safetensors', new Uint8Array([0xff, 0xfe, 0x7b, 0x7d]))],
    ['latin1.safetensors', 'UTF-8'],
  ],
  ['--safetensors: a JSON array', () => ['--safetensors', safetensors('array.safetensors', '[]')], ['array.safetensors', 'JSON object']],
  [
    '--safetensors: a bad entry',
    () => ['--safetensors', safetensors('entry.safetensors', '{"w": {"dtype": "F32"}}')],
    ['entry.safetensors', 'header.w', 'dtype, shape and data_offsets'],
  ],
  [
    // JSON.parse, like serde_json in the safetensors library, refuses a byte-order mark.
    '--safetensors: a header starting with a byte-order mark',
    () => ['--safetensors', safetensors('bom.safetensors', '\uFEFF{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 16)],
    ['bom.safetensors', 'header is not JSON'],
  ],
  [
    '--safetensors: data past the last tensor',
    () => ['--safetensors', safetensors('trailing.safetensors', '{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 20)],
    ['trailing.safetensors', 'data past its last tensor'],
  ],
  [
    '--safetensors: offsets past the data',
    () => ['--safetensors', safetensors('offsets.safetensors', '{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 8)],
    ['offsets.safetensors', 'data_offsets', 'end ≤ 8'],
  ],
  [
    '--svg into a missing directory',
    () => ['mobilenet_v3_small', '--svg', join(tmp, 'no', 'such', 'dir', 'step.svg')],
    ['--svg', 'cannot write', 'no such file'],
  ],
  ['--svg onto a directory', () => ['mobilenet_v3_small', '--svg', join(tmp, 'a-directory')], ['--svg', 'cannot write', 'is a directory']],
  // Library errors: one line too.
  ['a step past 2^53 bytes', () => ['qwen2.5-0.5b', '--seq', '1000000000', '--batch', '1000'], ['past 2^53']],
  ['a GPT-2 context past n_positions', () => ['gpt2', '--seq', '2048'], ['n_positions = 1024']],
];

describe('every error: exit 2, one line on stderr naming the problem, nothing on stdout', () => {
  it.each(BAD.map(([name, args, names]) => ({ name, args, names })))('$name', ({ args, names }) => {
    const r = cli(...args());
    expect(r.out).toBe('');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^vram-ts: [^\n]+\n$/);
    for (const n of names) expect(r.err).toEqual(typeof n === 'string' ? expect.stringContaining(n) : expect.stringMatching(n));
  });

  it('a VramError with several issues shows the first and counts the rest', () => {
    // Three problems in one config: the first is shown, the other two counted.
    const bad = file(
      'many.json',
      JSON.stringify({
        model_type: 'llama',
        hidden_size: 64,
        intermediate_size: 128,
        num_hidden_layers: 1,
        num_attention_heads: 5,
        num_key_value_heads: 3,
        vocab_size: 100,
        torch_dtype: 'float99',
      }),
    );
    const r = cli(bad);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toMatch(/^vram-ts: [^\n]+ \(and \d+ more\)\n$/);
  });
});

describe('unexpected errors', () => {
  it('print one line "internal error" and exit 2, or rethrow with VRAM_TS_DEBUG', () => {
    let err = '';
    const boom = () => {
      throw new Error('boom\nsecond line');
    };
    const previous = process.env.VRAM_TS_DEBUG;
    delete process.env.VRAM_TS_DEBUG;
    try {
      expect(run(['mobilenet_v3_small'], boom, (t) => (err += t))).toBe(2);
      expect(err).toBe('vram-ts: internal error: boom second line\n');
      process.env.VRAM_TS_DEBUG = '1';
      expect(() => run(['mobilenet_v3_small'], boom, () => {})).toThrow('boom');
    } finally {
      if (previous === undefined) delete process.env.VRAM_TS_DEBUG;
      else process.env.VRAM_TS_DEBUG = previous;
    }
  });
});

describe('stdout holds exactly the asked format', () => {
  const jsonCases: readonly (readonly string[])[] = [
    ['mobilenet_v3_small', '--format', 'json'],
    ['mobilenet_v3_small', '--format', 'json', '--gpu', '24GB', '--check'],
    ['mobilenet_v3_small', '--format', 'json', '--infer', '--gpu', '1KB'],
    ['gpt2', '--seq', '32', '--format', 'json'],
    ['gpt2', '--seq', '32', '--infer', '--format', 'json'],
    ['gpt2', '--seq', '32', '--infer', '--no-cache', '--format', 'json', '--gpu', 'H100', '--check'],
    ['llama-3-8b', '--infer', '--batch', '32', '--seq', '8192', '--precision', 'bf16', '--gpu', 'H100', '--check', '--format', 'json'],
    ['grpo', 'qwen2.5-0.5b', '--num-generations', '2', '--prompt', '8', '--max-completion-length', '8', '--format', 'json', '--gpu', 'H100', '--check'],
    ['sft', 'qwen2.5-0.5b', '--sequence', '16', '--format', 'json', '--gpu', 'H100', '--check'],
  ];
  it.each(jsonCases.map((args) => ({ args, name: args.join(' ') })))('json parses: $name', ({ args }) => {
    const r = cli(...args);
    expect(r.err).toBe('');
    expect([0, 1]).toContain(r.code);
    expect(() => JSON.parse(r.out)).not.toThrow();
  });

  it('json carries the KV cache and the fit verdict as fields, and --check reads the same verdict', () => {
    const r = cli(
      'llama-3-8b',
      '--infer',
      '--batch',
      '32',
      '--seq',
      '8192',
      '--precision',
      'bf16',
      '--attention',
      'sdpa',
      '--gpu',
      'H100',
      '--check',
      '--format',
      'json',
    );
    expect(r.code).toBe(1);
    const json = JSON.parse(r.out) as {
      kvCache: { batch: number; seq: number; bytes: number; inPeak: boolean };
      fit: { gpu: string; fits: boolean; needed: number; budget: number; headroom: number };
    };
    expect(json.kvCache).toMatchObject({ batch: 32, seq: 8192, bytes: 34_359_738_368, inPeak: true });
    expect(json.fit).toMatchObject({ gpu: 'H100', fits: false });
    expect(json.fit.headroom).toBe(json.fit.budget - json.fit.needed);
    const fitsJson = JSON.parse(cli('mobilenet_v3_small', '--format', 'json', '--gpu', '24GB').out) as { fit: { fits: boolean }; kvCache?: unknown };
    expect(fitsJson.fit.fits).toBe(true);
    expect(fitsJson.kvCache).toBeUndefined();
  });

  it('torchsummary and torchinfo are the tables alone, and --check still decides the exit code', () => {
    const plain = cli('mobilenet_v3_small', '--classes', '3', '--format', 'torchsummary');
    const tight = cli('mobilenet_v3_small', '--classes', '3', '--format', 'torchsummary', '--gpu', '1KB', '--check');
    expect(tight.code).toBe(1);
    expect(tight.out).toBe(plain.out);
    const roomy = cli('mobilenet_v3_small', '--classes', '3', '--format', 'torchinfo', '--gpu', '24GB', '--check');
    expect(roomy.code).toBe(0);
    expect(roomy.out).toBe(cli('mobilenet_v3_small', '--classes', '3', '--format', 'torchinfo').out);
    expect(cli('gpt2', '--seq', '16', '--infer', '--format', 'explain', '--gpu', '1KB', '--check').code).toBe(1);
    expect(cli('gpt2', '--seq', '16', '--infer', '--format', 'explain').out).not.toContain('KV cache for');
    const svg = cli('mobilenet_v3_small', '--format', 'svg', '--gpu', '1KB', '--check');
    expect(svg.code).toBe(1);
    expect(svg.out.trimEnd()).toMatch(/^<svg[\s\S]*<\/svg>$/);
  });

  it('the table and markdown keep their notes', () => {
    expect(cli('gpt2', '--seq', '16', '--infer', '--gpu', 'H100').out).toMatch(/KV cache for 1 × 16 tokens[\s\S]*Fits H100/);
    expect(cli('gpt2', '--seq', '16', '--infer', '--gpu', 'H100', '--format', 'markdown').out).toMatch(/\| GPT2LMHeadModel[\s\S]*KV cache for[\s\S]*Fits H100/);
  });

  it('writes the --svg file before anything reaches stdout', () => {
    const path = join(tmp, 'first.svg');
    rmSync(path, { force: true });
    let existedAtOutput = false;
    expect(
      run(
        ['mobilenet_v3_small', '--svg', path],
        () => (existedAtOutput = existsSync(path)),
        () => {},
      ),
    ).toBe(0);
    expect(existedAtOutput).toBe(true);
  });
});

describe('exit 1 means "does not fit", and only with --check', () => {
  it('fit prints 0 and exits 0 when nothing fits, 1 with --check', () => {
    const r = cli('fit', 'mobilenet_v3_small', '--gpu', '1KB');
    expect(r).toEqual({ code: 0, out: '0\n', err: '' });
    expect(cli('fit', 'mobilenet_v3_small', '--gpu', '1KB', '--check')).toEqual({ code: 1, out: '0\n', err: '' });
    const roomy = cli('fit', 'mobilenet_v3_small', '--gpu', '24GB', '--check');
    expect(roomy.code).toBe(0);
    expect(Number(roomy.out)).toBeGreaterThan(0);
  });

  it('an estimate that does not fit exits 0 without --check, 1 with it, for every format', () => {
    expect(cli('llama-3-8b', '--seq', '4096', '--gpu', '24GB').code).toBe(0);
    for (const format of ['table', 'json', 'markdown', 'torchsummary', 'torchinfo', 'explain', 'svg']) {
      expect(cli('mobilenet_v3_small', '--gpu', '1KB', '--check', '--format', format).code, format).toBe(1);
      expect(cli('mobilenet_v3_small', '--gpu', '24GB', '--check', '--format', format).code, format).toBe(0);
    }
  });

  it('grpo exits 1 only with --check', () => {
    const args = ['grpo', 'qwen2.5-0.5b', '--num-generations', '2', '--prompt', '8', '--max-completion-length', '8', '--gpu', '1GB'];
    expect(cli(...args).code).toBe(0);
    expect(cli(...args).out).toContain('Does not fit 1GB');
    expect(cli(...args, '--check').code).toBe(1);
  });
});

describe('numbers are read strictly', () => {
  it('accepts decimal digits only, within the range', () => {
    expect(wholeNumber('8', '--batch', 1, 10)).toBe(8);
    expect(wholeNumber('010', '--batch', 1, 10)).toBe(10);
    for (const bad of ['1e3', '0x10', ' 8 ', '8 ', '+8', '-8', '8.0', '8.5', '', '٣', 'Infinity', '11', '0']) {
      expect(() => wholeNumber(bad, '--batch', 1, 10), JSON.stringify(bad)).toThrow(CliError);
    }
  });
});

describe('options that apply give what they say', () => {
  it('LoRA on GPT-2 adapts c_attn, as PEFT does, instead of training nothing', () => {
    const params = (JSON.parse(cli('gpt2', '--seq', '16', '--lora-rank', '8', '--format', 'json').out) as { params: { trainable: number } }).params;
    // 12 layers × rank 8 × (768 in + 2304 out).
    expect(params.trainable).toBe(12 * 8 * (768 + 2304));
  });
});

describe('help', () => {
  const helps: Record<Exclude<Command, 'safetensors'>, string> = {
    estimate: HELP,
    fit: FIT_HELP,
    plan: PLAN_HELP,
    compat: COMPAT_HELP,
    grpo: GRPO_HELP,
    sft: SFT_HELP,
    vllm: VLLM_HELP,
    rl: RL_HELP,
    korthikanti: KORTHIKANTI_HELP,
    'explain-config': EXPLAIN_CONFIG_HELP,
  };

  it('each command has its --help', () => {
    expect(cli('--help').out).toBe(HELP);
    expect(cli('fit', '--help').out).toBe(FIT_HELP);
    expect(cli('fit', 'gpt2', '-h').out).toBe(FIT_HELP);
    expect(cli('grpo', '--help').out).toBe(GRPO_HELP);
    expect(cli('sft', '--help').out).toBe(SFT_HELP);
    expect(cli('plan', '--help').out).toBe(PLAN_HELP);
    expect(cli('compat', '--help').out).toBe(COMPAT_HELP);
    expect(cli('korthikanti', '--help').out).toBe(KORTHIKANTI_HELP);
    expect(cli('vllm', '--help').out).toBe(VLLM_HELP);
    expect(cli('rl', '--help').out).toBe(RL_HELP);
    expect(cli('korthikanti', '--help').code).toBe(0);
  });

  it('lists every flag each command takes, and no other', () => {
    for (const [command, text] of Object.entries(helps) as [Command, string][]) {
      const listed = new Set([...text.matchAll(/^\s+(?:-h, )?(--[\w-]+)(?: \| (--[\w-]+))?/gm)].flatMap((m) => [m[1]!, ...(m[2] !== undefined ? [m[2]] : [])]));
      const takes = (Object.keys(SCOPE) as Flag[]).filter((f) => SCOPE[f].includes(command) && f !== 'safetensors').map((f) => `--${f}`);
      // grpo and sft list the trainer fields they model too (every field is a flag: the help says so).
      const fields = [...listed].filter((f) => FIELD_FLAGS[f.slice(2)]?.scope.includes(command as 'grpo' | 'sft'));
      if (command === 'grpo' || command === 'sft') expect(fields.length, command).toBeGreaterThan(5);
      expect([...listed].sort(), command).toEqual([...takes, ...fields].sort());
    }
    expect(HELP).toContain('--safetensors FILE');
  });

  it('shows defaults that are the defaults: passing one changes nothing', () => {
    const base: Record<Exclude<Command, 'safetensors'>, Record<'cnn' | 'llm', string[] | undefined>> = {
      estimate: { cnn: ['mobilenet_v3_small'], llm: ['gpt2', '--seq', '16'] },
      fit: { cnn: ['fit', 'mobilenet_v3_small', '--gpu', '4GB'], llm: ['fit', 'gpt2', '--gpu', '8GB'] },
      compat: { cnn: undefined, llm: ['compat', 'zero-paper', 'gpt2', '--seq', '16'] },
      plan: {
        cnn: ['plan', 'mobilenet_v3_small', '--gpu', '4GB', '--gpus', '2', '--global-batch', '4'],
        llm: ['plan', 'gpt2', '--gpu', '8GB', '--gpus', '2', '--global-batch', '2'],
      },
      // GPT-2 reads at most 1024 positions: the default prompt + completion (1536) needs another model.
      grpo: { cnn: undefined, llm: ['grpo', 'qwen2.5-0.5b'] },
      sft: { cnn: undefined, llm: ['sft', 'qwen2.5-0.5b'] },
      vllm: { cnn: undefined, llm: ['vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB'] },
      rl: { cnn: undefined, llm: ['rl', 'qwen2.5-0.5b', '--framework', 'verl', '--gpu', 'H100-80GB', '--gpus', '2'] },
      korthikanti: { cnn: ['korthikanti'], llm: undefined },
      'explain-config': { cnn: ['explain-config', 'test/fixtures/configs/deepspeed/ds-megatron-bs8-zero1.json', '--gpus', '4'], llm: undefined },
    };
    const cnnOnly = new Set(['--input', '--classes']);
    let checked = 0;
    for (const [command, text] of Object.entries(helps) as [Exclude<Command, 'safetensors'>, string][]) {
      for (const block of text.split(/\n(?=\s+-)/)) {
        const flag = /^\s+(--[\w-]+)/.exec(block)?.[1];
        const value = /\bdefault ([^\s):;,]+)[);,]/.exec(block)?.[1];
        if (flag === undefined || value === undefined) continue;
        // --timeout applies to a Hub model only (refused with a catalog name): test/hub/hub.test.ts checks it.
        if (flag === '--timeout') continue;
        const kind = command === 'korthikanti' || cnnOnly.has(flag) ? 'cnn' : 'llm';
        let args = base[command][kind]!;
        // The LLM base fixes --seq; fit's --batch needs another --solve than batch.
        if (flag === '--seq' && command === 'estimate') args = ['gpt2'];
        if (flag === '--seq' && command === 'compat') args = ['compat', 'zero-paper', 'gpt2'];
        if (flag === '--batch' && command === 'fit') args = ['fit', 'gpt2', '--gpu', '8GB', '--solve', 'seq'];
        // rl's GRPOConfig inputs belong to --framework trl (and verl's default rollout spans 2 GPUs).
        if (command === 'rl' && ['--prompt', '--config', '--gpus'].includes(flag)) args = ['rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', 'H100-80GB'];
        // A pipeline's flags need a pipeline (virtual stages: the interleaved schedule's).
        // --chart picks what --svg writes.
        if (flag === '--chart') args = [...args, '--svg', join(tmpdir(), `vram-ts-defaults-${process.pid}.svg`)];
        // GPT-2 is not cut into stages: a Qwen2 is.
        if (['--stage', '--schedule', '--virtual-stages'].includes(flag))
          args = [
            ...args.map((a) => (a === 'gpt2' ? 'qwen2.5-0.5b' : a)),
            '--gpus',
            '2',
            '--pp',
            '2',
            '--micro-batches',
            '2',
            ...(flag === '--virtual-stages' ? ['--schedule', 'interleaved-1f1b'] : []),
          ];
        const without = cli(...args);
        const withDefault = cli(...args, flag, value);
        expect(without.code, `${command} ${flag}`).toBe(0);
        expect(withDefault.err, `${command} ${flag} ${value}`).toBe('');
        expect(withDefault.out, `${command} ${flag} ${value}`).toBe(without.out);
        checked += 1;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(20);
  });
});

describe('did you mean', () => {
  it('edit distance and the nearest flag', () => {
    expect(editDistance('precison', 'precision')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(nearest('--precison', ['--precision', '--prompts'])).toBe('--precision');
    expect(nearest('--zzzzzz', ['--precision', '--prompts'])).toBeUndefined();
  });
});

describe('a closed pipe (vram-ts … | head -1)', () => {
  it('stdoutFailure: EPIPE ends quietly with the exit code so far; other failures are one line and 2', () => {
    const epipe = Object.assign(new Error('write EPIPE'), { code: 'EPIPE' });
    expect(stdoutFailure(epipe, 0)).toEqual({ exitCode: 0, line: undefined });
    expect(stdoutFailure(epipe, 1)).toEqual({ exitCode: 1, line: undefined });
    const full = Object.assign(new Error('no space'), { code: 'ENOSPC' });
    expect(stdoutFailure(full, 0)).toEqual({ exitCode: 2, line: 'vram-ts: stdout: cannot write (no space left on the device)\n' });
  });

  describe('the bin, bundled from the sources', () => {
    const bundle = join(tmp, 'cli.mjs');
    beforeAll(() => {
      execFileSync(
        join(root, 'node_modules', '.bin', 'esbuild'),
        [join(root, 'src', 'cli', 'bin.ts'), '--bundle', '--platform=node', '--format=esm', `--outfile=${bundle}`, '--log-level=error'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
    }, 60_000);

    const piped = (args: string) =>
      spawnSync('bash', ['-o', 'pipefail', '-c', `"${process.execPath}" "${bundle}" ${args} | head -c 16 > /dev/null`], { encoding: 'utf8' });

    it('ends quietly with exit 0 when the reader goes away', () => {
      // Large output (GPT-2's JSON is ~190 kB), so the write outlives the reader.
      const r = piped('gpt2 --seq 16 --format json');
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
    });

    it('keeps the verdict: exit 1 with --check when it does not fit', () => {
      const r = piped('gpt2 --seq 16 --format json --gpu 1GB --check');
      expect(r.stderr).toBe('');
      expect(r.status).toBe(1);
    });

    it('exits 2 with one line for bad input, and shows a stack only with VRAM_TS_DEBUG', () => {
      const r = spawnSync(process.execPath, [bundle, 'mobilenet_v3_small', '--batch', '1e3'], { encoding: 'utf8' });
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^vram-ts: --batch: [^\n]+\n$/);
    });
  });
});
