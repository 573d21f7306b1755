/**
 * `--training-args FILE` and `--accelerate-config FILE` (src/cli/training-args.ts,
 * src/cli/accelerate-config.ts): real files of test/fixtures/configs give, through the command
 * line, exactly the figures of the library run on the options written out by hand; the flags the
 * file decides are refused; the files' errors name the file and the key.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { estimate, estimateRanks, llm, trainerStep, type EstimateOptions, type TrainerArgs } from '../../src/index.js';
import { cli, cliJson } from '../helpers/cli.js';

const T = 'test/fixtures/configs/training-args';
const A = 'test/fixtures/configs/accelerate';
const model = llm('qwen2.5-0.5b');
const json = (...args: string[]) => cliJson<{ peak: number | { bytes: number }; bytes?: { peak: number; reserved: number }; between?: number }>(...args);

describe('vram-ts --training-args FILE', () => {
  const step = (args: TrainerArgs, sequence: number) => {
    const e = trainerStep(model, args, { sequence });
    return { peak: e.peak, between: e.between };
  };

  it('a dump of transformers 5.18 (gradient checkpointing, accumulation 4): the Trainer step of the hand-written arguments', () => {
    const out = json('qwen2.5-0.5b', '--seq', '256', '--training-args', `${T}/perf-gradient-checkpointing.json`);
    expect({ peak: out.peak, between: out.between }).toEqual(
      step({ per_device_train_batch_size: 1, gradient_accumulation_steps: 4, gradient_checkpointing: true }, 256),
    );
    const bf16 = json('qwen2.5-0.5b', '--seq', '256', '--training-args', `${T}/perf-bf16.json`);
    expect({ peak: bf16.peak, between: bf16.between }).toEqual(step({ bf16: true }, 256));
  });

  it('deepspeed given as a dict: one rank under ZeRO-2 on --gpus, its "auto" values from the arguments', () => {
    const out = json('qwen2.5-0.5b', '--seq', '256', '--training-args', `${T}/ds-nested-dict-zero2-bf16.json`, '--gpus', '2');
    const hand: EstimateOptions = {
      input: [4, 256],
      mode: 'train',
      precision: 'bf16',
      optimizer: { name: 'adamw', impl: 'fused' },
      microBatches: 2,
      parallel: {
        engine: 'deepspeed',
        dp: 2,
        zero: 2,
        deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true },
        offload: { optimizer: true, parameters: false },
      },
    };
    const e = estimate(model, hand);
    expect(out.bytes).toMatchObject({ peak: e.bytes.peak, reserved: e.bytes.reserved });
  });

  it("fp16 with a deepspeed path (opened from the working directory): DeepSpeed's fp16 on one rank", () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-ts-fp16-'));
    const file = join(dir, 'args.json');
    writeFileSync(file, JSON.stringify({ per_device_train_batch_size: 2, fp16: true, deepspeed: 'test/fixtures/configs/deepspeed/hf-tests-zero2.json' }));
    const out = json('qwen2.5-0.5b', '--seq', '256', '--training-args', file, '--gpus', '2');
    const e = estimate(model, {
      input: [2, 256],
      mode: 'train',
      precision: 'fp16',
      optimizer: { name: 'adamw', impl: 'fused' },
      microBatches: 1,
      parallel: { engine: 'deepspeed', dp: 2, zero: 2, deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true }, offload: { optimizer: true } },
    });
    expect(out.bytes).toMatchObject({ peak: e.bytes.peak, reserved: e.bytes.reserved });
    rmSync(dir, { recursive: true });
  });

  it('the flags the arguments decide are refused; a deepspeed path is opened from the working directory', () => {
    for (const flag of [['--batch', '2'], ['--micro-batches', '2'], ['--checkpointing'], ['--precision', 'bf16'], ['--optimizer', 'sgd']]) {
      const r = cli('qwen2.5-0.5b', '--training-args', `${T}/perf-bf16.json`, ...flag);
      expect(r.code).toBe(2);
      expect(r.err).toBe(`vram-ts: ${flag[0]}: is decided by --training-args ${T}/perf-bf16.json: leave it out\n`);
    }
    const path = cli('qwen2.5-0.5b', '--training-args', `${T}/ds-notebook-path.json`, '--gpus', '2');
    expect(path.code).toBe(2);
    expect(path.err).toBe('vram-ts: ds_config_zero3.json: cannot read (no such file or directory)\n');
    // transformers' FSDP page's config turns on activation_checkpointing inside the units: not measured.
    const fsdp = cli('qwen2.5-0.5b', '--training-args', `${T}/fsdp2-config.json`, '--gpus', '8');
    expect(fsdp.code).toBe(2);
    expect(fsdp.err).toMatch(new RegExp(`^vram-ts: ${T}/fsdp2-config\\.json: fsdp_config\\.activation_checkpointing: checkpoint_wrapper`));
    const many = cli('qwen2.5-0.5b', '--training-args', `${T}/perf-bf16.json`, '--gpus', '4');
    expect(many.code).toBe(2);
    expect(many.err).toMatch(/^vram-ts: --gpus: the Trainer's arguments say no DeepSpeed/);
  });
});

describe("vram-ts --training-args FILE with the Trainer's FSDP", () => {
  it('one rank under FSDP2 over --gpus, with the units accelerate makes of the model', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-fsdp-'));
    try {
      const file = join(dir, 'args.json');
      writeFileSync(file, JSON.stringify({ per_device_train_batch_size: 2, fsdp: 'full_shard auto_wrap', bf16: true, optim: 'adamw_torch' }));
      const out = json('qwen2.5-0.5b', '--seq', '256', '--training-args', file, '--gpus', '8');
      const units = [
        ...Array.from({ length: 24 }, (_, i) => `model.layers.${i}`),
        { modules: ['model.norm', 'model.embed_tokens', 'lm_head'], reshardAfterForward: false },
      ];
      const e = estimate(model, {
        input: [2, 256],
        mode: 'train',
        dtype: 'float32',
        microBatches: 1,
        optimizer: { name: 'adamw', impl: 'foreach' },
        parallel: { engine: 'fsdp2', dp: 8, units, reshardAfterForward: true, mixedPrecision: { param: 'bfloat16', reduce: 'bfloat16' } },
      });
      expect(out.bytes).toMatchObject({ peak: e.bytes.peak, reserved: e.bytes.reserved });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('vram-ts --accelerate-config FILE', () => {
  const peakOf = (options: Omit<EstimateOptions, 'input'>, input: readonly number[]) => {
    const e = estimate(model, { ...options, input });
    return { peak: e.bytes.peak, reserved: e.bytes.reserved };
  };

  it("TRL's accelerate configs: DDP over 8 with bf16 autocast; ZeRO-2 over 8 with DeepSpeed's bf16", () => {
    const ddp = json('qwen2.5-0.5b', '--seq', '256', '--batch', '2', '--accelerate-config', `${A}/trl-multi-gpu.yaml`);
    expect(ddp.bytes).toMatchObject(peakOf({ precision: 'amp-bf16', parallel: { engine: 'ddp', dp: 8 } }, [2, 256]));
    const zero = json('qwen2.5-0.5b', '--seq', '256', '--accelerate-config', `${A}/trl-deepspeed-zero2.yaml`);
    expect(zero.bytes).toMatchObject(peakOf({ precision: 'bf16', parallel: { engine: 'deepspeed', dp: 8, zero: 2 } }, [1, 256]));
    // --rank: a rank of the file's processes.
    const last = json('qwen2.5-0.5b', '--seq', '256', '--accelerate-config', `${A}/trl-deepspeed-zero2.yaml`, '--rank', '7');
    const ranks = estimateRanks(model, { precision: 'bf16', parallel: { engine: 'deepspeed', dp: 8, zero: 2 }, input: [1, 256] });
    expect(last.bytes!.peak).toBe(ranks[7]!.peak);
  });

  it("TRL's FSDP2 config: accelerate's units of the model (each layer; norm, tied embedding and lm_head together), bf16 policy", () => {
    const units = [
      ...Array.from({ length: 24 }, (_, i) => `model.layers.${i}`),
      { modules: ['model.norm', 'model.embed_tokens', 'lm_head'], reshardAfterForward: false },
    ];
    const explicit = { dtype: 'float32', parallel: { engine: 'fsdp2', dp: 8, units, mixedPrecision: { param: 'bfloat16', reduce: 'bfloat16' } } } as const;
    const out = json('qwen2.5-0.5b', '--seq', '256', '--accelerate-config', `${A}/trl-fsdp2.yaml`);
    expect(out.bytes).toMatchObject(peakOf(explicit, [1, 256]));
  });

  it('the flags the file decides are refused; FSDP and the files it names are errors naming them', () => {
    for (const flag of [
      ['--gpus', '8'],
      ['--precision', 'bf16'],
      ['--zero', '2'],
      ['--engine', 'ddp'],
    ]) {
      const r = cli('qwen2.5-0.5b', '--accelerate-config', `${A}/trl-multi-gpu.yaml`, ...flag);
      expect(r.code).toBe(2);
      expect(r.err).toBe(`vram-ts: ${flag[0]}: is decided by --accelerate-config ${A}/trl-multi-gpu.yaml: leave it out\n`);
    }
    const fsdp = cli('qwen2.5-0.5b', '--accelerate-config', `${A}/trl-fsdp2.yaml`, '--zero', '3');
    expect(fsdp.err).toBe(`vram-ts: --zero: is decided by --accelerate-config ${A}/trl-fsdp2.yaml: leave it out\n`);
    const named = cli('qwen2.5-0.5b', '--accelerate-config', `${A}/accelerate-template-deepspeed.yaml`);
    expect(named.code).toBe(2);
    expect(named.err).toBe('vram-ts: ../deepspeed_config_templates/zero_stage1_config.json: cannot read (no such file or directory)\n');
  });
});
