/**
 * `vram-ts explain-config FILE` for the two other file kinds the command line reads: TRL script
 * configs (`trl sft|grpo --config`, read by fromTrlConfig and resolveTrainerArgs as `vram-ts
 * sft|grpo --config` reads them) and vLLM's config.yaml (`vllm serve --config`, read by
 * readVllmConfig as `vram-ts vllm --config` reads it). Every fixture in test/fixtures/configs/trl
 * and vllm explains, each value shown is the one the estimating reader holds, every key of the file
 * is on a row, and the refused files stay errors naming `file: key`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { formatCount, fromTrlConfig, resolveTrainerArgs, trainerFields } from '../../src/index.js';
import { readConfigFile } from '../../src/cli/config-file.js';
import { RESOLVED } from '../../src/cli/trainer.js';
import { readVllmConfig } from '../../src/cli/vllm-config.js';
import { cli, scratch } from '../helpers/cli.js';

interface Example {
  readonly file: string;
  readonly command?: 'sft' | 'grpo';
  readonly flags?: readonly string[];
  readonly error?: string;
}
const dir = (kind: string) => fileURLToPath(new URL(`../fixtures/configs/${kind}/`, import.meta.url));
const sources = (kind: string) => JSON.parse(readFileSync(join(dir(kind), 'sources.json'), 'utf8')) as { examples: Example[]; errors: Example[] };
const TRL = sources('trl');
const VLLM = sources('vllm');

/** A value as the explanation words it (counts with separators, None as none, lists and mappings as JSON). */
const words = (v: unknown) =>
  typeof v === 'number' && Number.isInteger(v) ? formatCount(v) : v === null ? 'none' : typeof v === 'object' ? JSON.stringify(v) : String(v);
const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** The section of the output before "Accepted", and the rest. */
const sections = (out: string) => out.split('\nAccepted, moving no memory\n') as [string, string?];
/** The value and the source of `key`'s row in the table of what the file decides. */
function rowOf(out: string, key: string): { value: string; from: string } | undefined {
  const m = new RegExp(`\\n {2}${literal(key)} +(\\S+) +(file|default|derived) `).exec(sections(out)[0]);
  return m === null ? undefined : { value: m[1]!, from: m[2]! };
}

const { file } = scratch('cli-explain-trl-vllm');

describe('explain-config: TRL script configs', () => {
  for (const e of TRL.examples)
    it(`${e.file}: each value as trl ${e.command} reads it`, () => {
      const path = join(dir('trl'), e.file);
      const r = cli('explain-config', path, '--trainer', e.command!);
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      const mapping = readConfigFile(path);
      const reading = fromTrlConfig(e.command!, mapping);
      const resolved = resolveTrainerArgs(e.command!, reading.config, reading.peft !== undefined ? { peft: reading.peft } : {});
      const fields = trainerFields(e.command!);
      expect(r.out.split('\n')[0]).toBe(`${path}: a trl ${e.command} config, read as TRL ${resolved.trl} reads it (fromTrlConfig, resolveTrainerArgs)`);
      expect(r.out.split('\n')[1]).toContain(`  batch ${resolved.batch} × ${resolved.accumulation} accumulation;`);
      // Every field the estimate resolves, with the value it resolves to; the file's own ones from the file.
      let resolvedRows = 0;
      for (const [field, get] of Object.entries(RESOLVED)) {
        const value = get(resolved);
        if (!fields.modelled.includes(field) || value === undefined) continue;
        const row = rowOf(r.out, field);
        expect(row?.value, field).toBe(words(value));
        if (Object.hasOwn(mapping, field)) expect(row!.from, field).toBe('file');
        else expect(row!.from, field).toBe(JSON.stringify(fields.defaults[field]) === JSON.stringify(value) ? 'default' : 'derived');
        resolvedRows++;
      }
      expect(resolvedRows).toBeGreaterThanOrEqual(7);
      // ModelConfig's dtype and the LoraConfig use_peft builds, under the file's keys.
      expect(rowOf(r.out, reading.keys.dtype ?? 'dtype')?.value).toBe(reading.dtype);
      for (const [field, value] of Object.entries(reading.peft ?? {}))
        expect(rowOf(r.out, reading.keys[`peft_config.${field}`]!)?.value, field).toBe(words(value));
      if (reading.peft !== undefined) expect(r.out).toContain(`; LoRA r ${resolved.lora!.rank};`);
      // Every key of the file on a row; the neutral ones among those accepted.
      for (const key of Object.keys(mapping)) expect(r.out, key).toMatch(new RegExp(`\\n {2}${literal(key)} `));
      const accepted = sections(r.out)[1] ?? '';
      for (const key of reading.neutral.filter((k) => Object.hasOwn(mapping, k))) expect(accepted, key).toMatch(new RegExp(`^ {2}${literal(key)} `, 'm'));
      expect(r.out).toContain(`\nThe same estimate: vram-ts ${e.command} <model> --config ${path}\n`);
    });

  it("gives every field it decides by a meaning: GRPO's vLLM fields and generation_kwargs too", () => {
    const path = file(
      'vllm-grpo.yaml',
      'model_name_or_path: Qwen/Qwen2.5-0.5B\nreward_funcs: [accuracy_reward]\nuse_vllm: true\nvllm_mode: colocate\nvllm_enable_sleep_mode: true\nvllm_gpu_memory_utilization: 0.3\nvllm_max_model_length: 1024\nvllm_importance_sampling_correction: false\ngeneration_kwargs: {min_new_tokens: 8}\n',
    );
    const r = cli('explain-config', path);
    expect(r.err).toBe('');
    const lines = sections(r.out)[0]!.split('\n');
    const rows = lines.slice(lines.findIndex((l) => l.startsWith('  key ')) + 1).filter((l) => l.startsWith('  '));
    for (const key of [
      'use_vllm',
      'vllm_mode',
      'vllm_enable_sleep_mode',
      'vllm_gpu_memory_utilization',
      'vllm_max_model_length',
      'vllm_importance_sampling_correction',
      'generation_kwargs',
    ])
      expect(
        rows.some((l) => l.startsWith(`  ${key} `)),
        key,
      ).toBe(true);
    // key, value, from, meaning: four columns on every row.
    for (const row of rows) expect(row.trim().split(/ {2,}/), row).toHaveLength(4);
  });

  it('tells grpo from sft by the keys only one trainer has; else --trainer is required, never a default', () => {
    const told = TRL.examples.filter((e) => cli('explain-config', join(dir('trl'), e.file)).code === 0);
    expect(told.map((e) => e.file)).toEqual(['02-clis-grpo-config.yaml', '06-clis-grpo-datasets.yaml']);
    for (const e of told)
      expect(cli('explain-config', join(dir('trl'), e.file)).out).toBe(cli('explain-config', join(dir('trl'), e.file), '--trainer', 'grpo').out);
    const open = cli('explain-config', join(dir('trl'), '01-clis-sft-config.yaml'));
    expect(open.code).toBe(2);
    expect(open.out).toBe('');
    expect(open.err).toBe(
      `vram-ts: --trainer: ${join(dir('trl'), '01-clis-sft-config.yaml')}: its keys do not tell trl sft from trl grpo (expected sft | grpo)\n`,
    );
    const sft = cli('explain-config', file('packing.yaml', 'model_name_or_path: Qwen/Qwen2.5-0.5B\npacking: false\n'));
    expect(sft.out.split('\n')[0]).toContain(': a trl sft config');
    // A file with keys of both trainers tells neither.
    expect(cli('explain-config', file('both.yaml', 'dataset_name: x\npacking: false\nnum_generations: 4\n')).err).toMatch(/^vram-ts: --trainer: /);
    // The flag given wins: the other trainer's reader refuses the key it does not have, by its path.
    const wrong = cli('explain-config', join(dir('trl'), '02-clis-grpo-config.yaml'), '--trainer', 'sft');
    expect(wrong.code).toBe(2);
    expect(wrong.err).toContain('02-clis-grpo-config.yaml: reward_funcs: not a field of the trl sft script');
  });

  for (const e of TRL.errors)
    it(`${e.file}: refused at ${e.error}, as trl ${e.command} refuses it`, () => {
      const path = join(dir('trl'), e.file);
      const r = cli('explain-config', path, '--trainer', e.command!);
      expect(r.code).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toContain(`${path}: ${e.error}: `);
      expect(r.err).toBe(cli(e.command!, 'qwen2.5-0.5b', '--config', path).err);
    });

  it('refuses what the trainers refuse (a 16-bit model, a value out of range), by the key; and the other kinds’ flags', () => {
    const bf16 = cli('explain-config', file('bf.yaml', 'model_name_or_path: x\ntorch_dtype: bfloat16\n'), '--trainer', 'sft');
    expect(bf16.err).toContain('bf.yaml: torch_dtype: the trainers are estimated on a model loaded in float32');
    const zero = cli('explain-config', file('zero.yaml', 'dataset_name: x\nper_device_train_batch_size: 0\n'), '--trainer', 'sft');
    expect(zero.code).toBe(2);
    expect(zero.err).toContain('zero.yaml: per_device_train_batch_size: ');
    const gpus = cli('explain-config', join(dir('trl'), '02-clis-grpo-config.yaml'), '--gpus', '8');
    expect(gpus.err).toMatch(/^vram-ts: --gpus: does not apply to .*02-clis-grpo-config\.yaml, a trl config/);
    const ds = cli('explain-config', 'test/fixtures/configs/deepspeed/ds-sdma-zero3.json', '--gpus', '2', '--trainer', 'sft');
    expect(ds.code).toBe(2);
  });
});

describe('explain-config: vLLM config.yaml', () => {
  for (const e of VLLM.examples)
    it(`${e.file}: the vllm command's flags it sets, each under its key`, () => {
      const path = join(dir('vllm'), e.file);
      const r = cli('explain-config', path);
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      const c = readVllmConfig(path);
      const flags = Object.entries(c.values).flatMap(([f, v]) => (v === true ? [`--${f}`] : [`--${f}`, String(v)]));
      expect(r.out.split('\n')[1]).toBe(`  as the flags: ${flags.join(' ') || 'none'}`);
      // sources.json writes each example's flags out by hand: the same flags.
      const pairs = (list: readonly string[]) =>
        list
          .join(' ')
          .split(/ (?=--)/)
          .filter(Boolean)
          .sort();
      expect(pairs(flags)).toEqual(pairs(e.flags!));
      for (const [flag, origin] of c.origins) {
        const row = rowOf(r.out, origin.slice(path.length + 2));
        expect(row?.value, flag).toBe(String(c.values[flag]));
        expect(['file', 'derived'], flag).toContain(row?.from);
      }
      for (const key of Object.keys(readConfigFile(path))) expect(r.out, key).toMatch(new RegExp(`\\n {2}${literal(key)} `));
      const accepted = sections(r.out)[1] ?? '';
      for (const k of c.keys.filter((k) => k.flag === undefined)) expect(accepted, k.key).toMatch(new RegExp(`^ {2}${literal(k.key)} `, 'm'));
      // The arguments the file leaves out are vLLM's defaults, each listed.
      if (c.values['block-size'] === undefined) expect(rowOf(r.out, 'block-size')?.from).toBe('default');
      expect(r.out).toContain(`\nThe same estimate: vram-ts vllm <model> --gpu GPU --config ${path}\n`);
    });

  it('words what vLLM derives from the text (1k, half, no-X) and names the flag it sets', () => {
    const path = file('derived.yaml', 'max_model_len: 1k\ndtype: half\nenforce-eager: true\nno-enable-prefix-caching: true\ndata_parallel_size: 1\n');
    const r = cli('explain-config', path);
    expect(r.err).toBe('');
    expect(r.out.split('\n')[1]).toBe('  as the flags: --max-model-len 1000 --dtype float16 --enforce-eager');
    expect(rowOf(r.out, 'max_model_len')).toEqual({ value: '1000', from: 'derived' });
    expect(rowOf(r.out, 'dtype')).toEqual({ value: 'float16', from: 'derived' });
    expect(rowOf(r.out, 'enforce-eager')).toEqual({ value: 'true', from: 'file' });
    expect(sections(r.out)[1]).toMatch(/\n {2}data_parallel_size +vLLM's default \(another value: data-parallel engines are not modelled\)/);
  });

  for (const e of VLLM.errors)
    it(`${e.file}: refused at ${e.error}, as vllm --config refuses it`, () => {
      const path = join(dir('vllm'), e.file);
      const r = cli('explain-config', path);
      expect(r.code).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toContain(`${path}: ${e.error}: `);
    });

  it("tells a vLLM file by a dashed key too (a flag's name, which no other kind writes): vllm-project/recipes' Llama3.3_Hopper.yaml", () => {
    // vllm-project/recipes Llama/Llama3.3_Hopper.yaml at 8959cf64189c71d36e11c6a30335f923f261b1f7: none of the keys above.
    const path = file('hopper.yaml', 'kv-cache-dtype: fp8\nasync-scheduling: true\nno-enable-prefix-caching: true\nmax-num-batched-tokens: 8192\n');
    const r = cli('explain-config', path);
    expect(r.err).toBe('');
    expect(r.out.split('\n')[1]).toBe('  as the flags: --kv-cache-dtype fp8 --max-num-batched-tokens 8192');
    expect(cli('explain-config', file('none.yaml', 'seed: 1\n')).err).toMatch(/none\.yaml: is not a config file vram-ts reads/);
  });

  it('takes none of the training flags', () => {
    const r = cli('explain-config', join(dir('vllm'), '01-vllm-test-config.yaml'), '--batch', '2');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^vram-ts: --batch: does not apply to /);
  });
});
