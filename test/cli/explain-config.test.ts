/**
 * `vram-ts explain-config FILE` (src/cli/commands/explain-config.ts): every value the estimate
 * reads from a real DeepSpeed config, where it came from and what it means; the keys that move no
 * memory listed apart; the estimate line it prints gives the same figures; errors name the key.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fromDeepSpeedConfig } from '../../src/index.js';
import { cli } from '../helpers/cli.js';

const D = 'test/fixtures/configs/deepspeed';

describe('vram-ts explain-config FILE', () => {
  it('a transformers test config: each value read, its source, its meaning; the ignored keys apart', () => {
    const args = ['--batch', '2', '--micro-batches', '4', '--gpus', '8', '--precision', 'bf16', '--hidden', '896'];
    const r = cli('explain-config', `${D}/hf-tests-zero2-bf16.json`, ...args);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const reading = fromDeepSpeedConfig(JSON.parse(readFileSync(`${D}/hf-tests-zero2-bf16.json`, 'utf8')), {
      trainer: { perDeviceTrainBatchSize: 2, gradientAccumulationSteps: 4, worldSize: 8, bf16: true, fp16: false },
      worldSize: 8,
      hiddenSize: 896,
    });
    expect(r.out.split('\n')[1]).toBe(
      '  ZeRO-2 over 8 data-parallel GPUs; micro-batch 2 × 4 accumulation × 8 GPUs = 64 samples per step; bf16 parameters (fp32 master); optimizer adamw (fused); optimizer offloaded to the cpu',
    );
    const [decides, accepted] = r.out.split('\nAccepted, moving no memory');
    expect(decides).toMatch(/\n {2}train_micro_batch_size_per_gpu +2 +auto +the batch of each forward and backward on each GPU/);
    expect(decides).toMatch(/\n {2}zero_optimization\.reduce_bucket_size +200,000,000 +file +elements per gradient-reduction bucket/);
    expect(decides).toMatch(/\n {2}context\.worldSize +8 +flag /);
    // Stage 3's knobs at their defaults are not listed under stage 2.
    expect(decides).not.toContain('stage3_prefetch_bucket_size');
    for (const ignored of reading.ignored) expect(accepted).toContain(`  ${ignored.path.join('.')}`);
    expect(accepted).toContain('zero_optimization.offload_optimizer.pin_memory  page-locked host memory: the same bytes');
    expect(r.out).toContain(
      `The same estimate: vram-ts <model> --deepspeed ${D}/hf-tests-zero2-bf16.json --batch 2 --micro-batches 4 --precision bf16 --gpus 8\n`,
    );
  });

  it("TrainingArguments' fp16 under DeepSpeed: DeepSpeed's fp16, in the summary, the field's meaning and the config's auto", () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-ts-explain-'));
    const file = join(dir, 'args.json');
    writeFileSync(file, JSON.stringify({ per_device_train_batch_size: 2, fp16: true, deepspeed: `${D}/hf-tests-zero2.json` }));
    const r = cli('explain-config', file, '--gpus', '2');
    rmSync(dir, { recursive: true });
    expect(r.err).toBe('');
    expect(r.out.split('\n')[1]).toBe(
      "  batch 2 × 1 accumulation; no checkpointing; DeepSpeed's fp16; optim adamw_torch_fused; under DeepSpeed ZeRO-2 (below)",
    );
    expect(r.out).toMatch(/\n {2}fp16 +true +under DeepSpeed: its fp16 engine/);
    expect(r.out).toMatch(/\n {2}fp16\.enabled +true +auto +the parameters, gradients and activations in fp16/);
  });

  it('under ZeRO-3 the stage-3 knobs are listed with DeepSpeed’s defaults', () => {
    const r = cli('explain-config', `${D}/ds-sdma-zero3.json`, '--gpus', '2');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/\n {2}zero_optimization\.stage3_model_persistence_threshold +unlimited +default /);
    expect(r.out).toMatch(/\n {2}zero_optimization\.sub_group_size +1,000,000,000,000 +file /);
  });

  it('errors name the key, the flag an "auto" needs, or the file', () => {
    const auto = cli('explain-config', `${D}/hf-tests-zero2-bf16.json`, '--gpus', '8');
    expect(auto.code).toBe(2);
    expect(auto.err).toMatch(
      /^vram-ts: test\/fixtures\/configs\/deepspeed\/hf-tests-zero2-bf16\.json: train_micro_batch_size_per_gpu: "auto" is filled as the Hugging Face Trainer fills it: give --batch/,
    );
    const nvme = cli(
      'explain-config',
      `${D}/hf-docs-zero3-nvme.json`,
      '--batch',
      '1',
      '--micro-batches',
      '1',
      '--gpus',
      '2',
      '--precision',
      'bf16',
      '--hidden',
      '64',
    );
    expect(nvme.code).toBe(2);
    // transformers' docs put aio inside zero_optimization, whose pydantic model forbids extra keys (DeepSpeed edaa7221 runtime/config_utils.py:110): DeepSpeed refuses it too.
    expect(nvme.err).toMatch(/hf-docs-zero3-nvme\.json: zero_optimization\.aio: DeepSpeed has no such key here /);
    const none = cli('explain-config', 'test/fixtures/configs/deepspeed/sources.json');
    expect(none.code).toBe(2);
    expect(none.err).toMatch(/sources\.json: is not a config file vram-ts reads/);
    const missing = cli('explain-config');
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/^vram-ts: FILE: no file given/);
    const model = cli('explain-config', `${D}/ds-sdma-zero3.json`, '--seq', '128');
    expect(model.code).toBe(2);
    expect(model.err).toMatch(/^vram-ts: --seq: applies to /);
  });
});

describe('vram-ts explain-config: TrainingArguments and accelerate configs', () => {
  it('a TrainingArguments dump: the fields set, the modelled ones with their meaning, the rest host-side', () => {
    const r = cli('explain-config', 'test/fixtures/configs/training-args/trl-sft-lora-peft.json');
    expect(r.err).toBe('');
    expect(r.out.split('\n')[1]).toBe('  batch 2 × 8 accumulation; no checkpointing; fp32; optim adamw_torch_fused');
    expect(r.out).toMatch(/\n {2}gradient_accumulation_steps +8 +micro-batches per optimizer step/);
    expect(r.out).toMatch(/\n {2}learning_rate +0\.0002 +decides nothing on the GPU/);
  });

  it('an accelerate config: its engine, the keys accepted, and the DeepSpeed config accelerate builds, key by key', () => {
    const r = cli('explain-config', 'test/fixtures/configs/accelerate/trl-deepspeed-zero3.yaml');
    expect(r.err).toBe('');
    expect(r.out.split('\n')[1]).toBe("  DEEPSPEED: DeepSpeed ZeRO-3 over 8 processes (below) on 1 machine; DeepSpeed's bf16");
    expect(r.out).toMatch(/\n {2}deepspeed_config\.zero3_init_flag +deepspeed\.zero\.Init while the model is built/);
    expect(r.out).toMatch(/\n {2}zero_optimization\.stage +3 +file /);
    const fsdp = cli('explain-config', 'test/fixtures/configs/accelerate/trl-fsdp2.yaml');
    expect(fsdp.code).toBe(2);
    // FSDP2's units are the model's modules: explained against a model only (vram-ts fit MODEL --accelerate-config).
    expect(fsdp.err).toMatch(/^vram-ts: MODEL \(an FSDP config is read against the model/);
  });
});
