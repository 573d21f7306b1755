/**
 * `vram-ts vllm <model> --config config.yaml` read as `vllm serve --config` reads it: ten real
 * examples, each the figure of its explicit flags (test/fixtures/configs/vllm/sources.json), the
 * refusals named `file: key`, and keys in dash or underscore form reading the same.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cli, scratch } from '../helpers/cli.js';

const DIR = fileURLToPath(new URL('../fixtures/configs/vllm/', import.meta.url));
interface Example {
  readonly file: string;
  readonly model: string;
  readonly flags?: readonly string[];
  readonly error?: string;
  readonly commit: string;
}
const SOURCES = JSON.parse(readFileSync(join(DIR, 'sources.json'), 'utf8')) as { gpu: string; examples: Example[]; errors: Example[] };
const GPU = ['--gpu', SOURCES.gpu];
const { file } = scratch('cli-vllm-config');

const json = (args: readonly string[]) => {
  const r = cli('vllm', ...args, ...GPU, '--format', 'json');
  expect(r.err).toBe('');
  expect(r.code).toBe(0);
  return r.out;
};

describe('vLLM config files as vllm --config', () => {
  it('has ten real examples, each with its source', () => {
    expect(SOURCES.examples).toHaveLength(10);
    for (const e of [...SOURCES.examples, ...SOURCES.errors]) expect(e).toMatchObject({ repo: expect.any(String), url: expect.stringContaining(e.commit) });
  });

  for (const e of SOURCES.examples)
    it(`${e.file}: the figure of ${e.flags!.join(' ') || 'no flags'}`, () => {
      expect(json([e.model, '--config', join(DIR, e.file)])).toBe(json([e.model, ...e.flags!]));
    });

  for (const e of SOURCES.errors)
    it(`${e.file}: refused at ${e.error}`, () => {
      const path = join(DIR, e.file);
      const r = cli('vllm', e.model, '--config', path, ...GPU);
      expect(r.code).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toContain(`${path}: ${e.error}: `);
    });

  it('puts the flags over the file, and the positional <model> over its model (vLLM: command line > config file)', () => {
    const path = file('over.yaml', 'model: Qwen/Qwen3-32B\nmax-model-len: 8192\ngpu_memory_utilization: 0.5\n');
    expect(json(['qwen3-4b', '--config', path, '--max-model-len', '2048'])).toBe(
      json(['qwen3-4b', '--max-model-len', '2048', '--gpu-memory-utilization', '0.5']),
    );
  });

  it("reads vLLM's value forms: human-readable integers, dtype names, false flags, --no-X keys", () => {
    const path = file(
      'forms.yaml',
      'max_model_len: 4k\nmax-num-batched-tokens: 2K\ndtype: half\nenforce-eager: false\nno-enforce-eager: true\nkv-cache-memory-bytes: 1G\n',
    );
    expect(json(['qwen3-4b', '--config', path])).toBe(
      json(['qwen3-4b', '--max-model-len', '4000', '--max-num-batched-tokens', '2048', '--dtype', 'float16', '--kv-cache-memory', String(2 ** 30)]),
    );
    expect(json(['qwen3-4b', '--config', file('eager.yaml', 'enforce_eager: true\nmax-model-len: auto\n')])).toBe(json(['qwen3-4b', '--enforce-eager']));
    // The same argument twice: argparse keeps the last (vLLM logs "Found duplicate keys").
    expect(json(['qwen3-4b', '--config', file('twice.yaml', 'max-model-len: 4096\nmax_model_len: 2048\nenforce-eager: true\nno_enforce_eager: true\n')])).toBe(
      json(['qwen3-4b', '--max-model-len', '2048']),
    );
  });

  it('names the file and key of each refusal, with did-you-mean for an unknown key', () => {
    const err = (text: string, ...more: string[]) => cli('vllm', 'qwen3-4b', '--config', file('e.yaml', text), ...GPU, ...more).err;
    expect(err('max_modl_len: 4096\n')).toContain('e.yaml: max_modl_len: not a vLLM engine or server argument vram-ts knows; did you mean max-model-len?');
    expect(err('gpu-memory-utilization: 1.5\n')).toContain('e.yaml: gpu-memory-utilization: is a fraction of the GPU');
    expect(err('pipeline-parallel-size: 2\n')).toContain('e.yaml: pipeline-parallel-size: pipeline stages are not modelled');
    expect(err('enable-lora: true\n')).toContain('e.yaml: enable-lora:');
    // vLLM's recipes write both (GPT-OSS): the capture size moves the CUDA graphs, the stream interval nothing on the GPU.
    expect(err('max-cudagraph-capture-size: 2048\n')).toContain('e.yaml: max-cudagraph-capture-size: the CUDA graphs captured are not modelled');
    expect(json(['qwen3-4b', '--config', file('s.yaml', 'stream-interval: 20\nmax_cudagraph_capture_size: null\n')])).toBe(json(['qwen3-4b']));
    expect(err('dtype: int8\n')).toContain("e.yaml: dtype: is one of vLLM's --dtype choices");
    expect(err('max-model-len: 1000000\n')).toContain('e.yaml: max-model-len: ');
    expect(cli('vllm', 'qwen3-4b', '--config', file('c.json', '{}'), ...GPU).err).toContain("c.json: vLLM's config file is YAML");
  });

  it('reads a key in dash or underscore form the same, and the neutral keys never change the result', () => {
    const modelled = fc.record(
      {
        'max-model-len': fc.integer({ min: 256, max: 40960 }),
        'max-num-seqs': fc.integer({ min: 1, max: 512 }),
        'max-num-batched-tokens': fc.integer({ min: 512, max: 16384 }),
        'gpu-memory-utilization': fc.constantFrom(0.5, 0.8, 0.9, 0.95),
        'block-size': fc.constantFrom(16, 32),
        'kv-cache-dtype': fc.constantFrom('auto', 'fp8', 'bfloat16'),
        'enforce-eager': fc.boolean(),
        'tensor-parallel-size': fc.constantFrom(1, 2),
      },
      { requiredKeys: [] },
    );
    const neutral = fc.record(
      { port: fc.integer({ min: 1024, max: 65535 }), seed: fc.nat(100), 'served-model-name': fc.constant('m'), 'enable-prefix-caching': fc.boolean() },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(modelled, neutral, fc.array(fc.boolean(), { minLength: 12, maxLength: 12 }), (keys, quiet, underscores) => {
        const all = Object.entries({ ...keys, ...quiet });
        const yaml = all.map(([k, v], i) => `${underscores[i] ? k.replace(/-/g, '_') : k}: ${v}\n`).join('');
        const flags = Object.entries(keys).flatMap(([k, v]) => (typeof v === 'boolean' ? (v ? [`--${k}`] : []) : [`--${k}`, String(v)]));
        expect(json(['qwen3-0.6b', '--config', file('p.yaml', yaml)])).toBe(json(['qwen3-0.6b', ...flags]));
      }),
      { numRuns: 25 },
    );
  });
});
