/**
 * `--deepspeed ds_config.json` (src/cli/config-options.ts): the real configs of
 * test/fixtures/configs/deepspeed give, through the command line, exactly the estimate of the
 * options written out by hand; the flags fill the "auto" values as the Trainer fills them from
 * its arguments, a flag the file contradicts or decides is an error naming it.
 */
import { describe, expect, it } from 'vitest';
import { estimate, llm, type EstimateOptions } from '../../src/index.js';
import { cli, cliJson } from '../helpers/cli.js';

const D = 'test/fixtures/configs/deepspeed';
const model = llm('qwen2.5-0.5b');
const peakOf = (...args: string[]) => cliJson<{ bytes: { peak: number; reserved: number } }>(...args).bytes;
const explicit = (options: EstimateOptions) => {
  const e = estimate(model, options);
  return { peak: e.bytes.peak, reserved: e.bytes.reserved };
};

describe('vram-ts --deepspeed FILE', () => {
  it('a Megatron test config (train_batch_size 8, fp16, ZeRO-1) on 4 GPUs: micro-batches of 2', () => {
    const bytes = peakOf('qwen2.5-0.5b', '--seq', '256', '--deepspeed', `${D}/ds-megatron-bs8-zero1.json`, '--gpus', '4');
    const hand = explicit({ input: [2, 256], precision: 'fp16', microBatches: 1, parallel: { engine: 'deepspeed', dp: 4, zero: 1 } });
    expect({ peak: bytes.peak, reserved: bytes.reserved }).toEqual(hand);
  });

  it('without --gpus the world is train_batch_size / (micro × accumulation) when the file says both', () => {
    const r = cli('qwen2.5-0.5b', '--seq', '256', '--deepspeed', `${D}/ds-megatron-bs8-zero1.json`);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^vram-ts: --gpus: the data-parallel world size: give --gpus/);
  });

  it('transformers\' zero2 bf16 test config: its "auto" values from --batch, --micro-batches, --precision, --gpus and the model\'s hidden size', () => {
    const args = ['qwen2.5-0.5b', '--seq', '256', '--deepspeed', `${D}/hf-tests-zero2-bf16.json`, '--batch', '2', '--micro-batches', '3', '--gpus', '2'];
    const bytes = peakOf(...args, '--precision', 'bf16');
    const hand = explicit({
      input: [2, 256],
      precision: 'bf16',
      optimizer: { name: 'adamw', impl: 'fused' },
      microBatches: 3,
      parallel: {
        engine: 'deepspeed',
        dp: 2,
        zero: 2,
        deepspeed: { reduceBucketSize: 200_000_000, overlapComm: true },
        offload: { optimizer: true, parameters: false },
      },
    });
    expect({ peak: bytes.peak, reserved: bytes.reserved }).toEqual(hand);
    const missing = cli(...args);
    expect(missing.code).toBe(2);
    expect(missing.err).toBe(
      `vram-ts: ${D}/hf-tests-zero2-bf16.json: bfloat16.enabled: "auto" is filled as the Hugging Face Trainer fills it: give --precision\n`,
    );
  });

  it('a flag the file contradicts, or one it decides, is an error naming the flag', () => {
    const base = ['qwen2.5-0.5b', '--seq', '256', '--deepspeed', `${D}/ds-megatron-bs8-zero1.json`, '--gpus', '4'];
    const batch = cli(...base, '--batch', '4');
    expect(batch.code).toBe(2);
    expect(batch.err).toMatch(/train_batch_size|train_micro_batch_size_per_gpu/);
    const precision = cli(...base, '--precision', 'bf16');
    expect(precision.code).toBe(2);
    expect(precision.err).toMatch(/fp16/);
    for (const flag of [
      ['--zero', '2'],
      ['--engine', 'fsdp2'],
      ['--offload', 'optimizer'],
      ['--tp', '2'],
    ]) {
      const r = cli(...base, ...flag);
      expect(r.code).toBe(2);
      expect(r.err).toBe(`vram-ts: ${flag[0]}: is decided by --deepspeed ${D}/ds-megatron-bs8-zero1.json: leave it out\n`);
    }
    const plan = cli('plan', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--gpus', '4', '--global-batch', '8', '--deepspeed', `${D}/ds-megatron-bs8-zero1.json`);
    expect(plan.code).toBe(2);
    expect(plan.err).toMatch(/--deepspeed/);
  });

  it('an unknown key is an error at its path in the file', () => {
    const r = cli('qwen2.5-0.5b', '--deepspeed', 'test/fixtures/configs/deepspeed/sources.json', '--gpus', '2');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^vram-ts: test\/fixtures\/configs\/deepspeed\/sources\.json: (about|configs): /);
  });
});
