/** `vram-ts vllm` and `vram-ts rl`: vLLM's own flag names, the frameworks' placements, errors naming the flag. */
import { describe, expect, it } from 'vitest';
import { llm, rlJob, vllmEngine } from '../../src/index.js';
import { cli } from '../helpers/cli.js';

const GiB = 2 ** 30;

describe('vram-ts vllm', () => {
  it('prints the budget, the pool and the log lines vLLM would, as vllmEngine computes them', () => {
    const r = cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--gpu-memory-utilization', '0.9', '--max-model-len', '32768');
    expect(r.code).toBe(0);
    const e = vllmEngine(llm('qwen2.5-0.5b'), { gpu: 'H100-80GB', gpuMemoryUtilization: 0.9, maxModelLen: 32768 });
    expect(r.out).toContain(`GPU KV cache size: ${e.kvCache.tokens.toLocaleString('en-US')} tokens`);
    expect(r.out).toContain('Maximum concurrency for 32,768 tokens per request');
    expect(r.out).toContain('Not counted: nonTorch');
    const json = JSON.parse(
      cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--gpu-memory-utilization', '0.9', '--max-model-len', '32768', '--format', 'json').out,
    );
    expect(json.vllm.kvCache.tokens).toBe(e.kvCache.tokens);
  });

  it('a size is the torch total; measured figures and every engine argument reach the rule', () => {
    const r = JSON.parse(
      cli(
        'vllm',
        'qwen2.5-0.5b',
        '--gpu',
        '79.22GiB',
        '--non-torch-memory',
        '0.25GiB',
        '--cuda-graph-memory',
        '0.5GiB',
        '--kv-cache-dtype',
        'fp8',
        '--block-size',
        '32',
        '--format',
        'json',
      ).out,
    );
    expect(r.vllm.totalBytes).toBe(Math.round(79.22 * GiB));
    expect(r.vllm.nonTorch).toBe(0.25 * GiB);
    expect(r.vllm.assumed).toEqual([]);
    expect(r.vllm.kvCache.pageBytes).toBe(2 * 32 * 2 * 64);
  });

  it("with --mem-fraction-static, SGLang's pool beside it", () => {
    expect(cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--mem-fraction-static', '0.8').out).toMatch(
      /^SGLang \(mem_fraction_static 0.8\): [0-9,]+ tokens/m,
    );
  });

  it("says why it does not start; --check exits 1; vLLM's errors and bad values name the flag", () => {
    const small = cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--gpu-memory-utilization', '0.02', '--check');
    expect(small.code).toBe(1);
    expect(small.out).toContain('Does not start: No available memory for the cache blocks');
    expect(cli('vllm', 'qwen2.5-0.5b', '--gpu', 'A800-80GB').err).toMatch(/^vram-ts: --gpu: the total PyTorch reports for A800-80GB is not recorded/);
    expect(cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--gpu-memory-utilization', '1.5').err).toMatch(
      /^vram-ts: --gpu-memory-utilization: is a fraction/,
    );
    expect(cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--tensor-parallel-size', '3').err).toMatch(
      /^vram-ts: --tensor-parallel-size: the attention heads \(14\)/,
    );
    expect(cli('vllm', 'qwen2.5-0.5b', '--gpu', 'H100-80GB', '--max-model-len', '131072').err).toMatch(
      /^vram-ts: --max-model-len: max_model_len 131072 is beyond/,
    );
    expect(cli('vllm', 'qwen2.5-0.5b').err).toMatch(/^vram-ts: --gpu: vLLM takes a fraction/);
  });
});

/** The TRL job of both tests: a small GRPOConfig. */
const TRL_FLAGS = ['--per-device-train-batch-size', '4', '--num-generations', '4', '--max-completion-length', '64', '--prompt', '32'];

describe('vram-ts rl', () => {
  it('TRL: GRPOConfig fields, the engine TRL builds; the table is rlJob', () => {
    const r = cli('rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', 'H100-80GB', ...TRL_FLAGS, '--format', 'json');
    expect(r.err).toBe('');
    const j = rlJob(llm('qwen2.5-0.5b'), {
      framework: 'trl',
      gpu: 'H100-80GB',
      trainer: { config: { per_device_train_batch_size: 4, num_generations: 4, max_completion_length: 64 }, prompt: 32 },
    });
    expect(JSON.parse(r.out).peak).toBe(j.peak);
    expect(cli('rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', 'H100-80GB', '--batch', '2').err).toMatch(
      /^vram-ts: --batch: TRL's trainer takes GRPOConfig's fields/,
    );
    expect(cli('rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', 'H100-80GB', '--max-num-seqs', '8').err).toMatch(/^vram-ts: --max-num-seqs: TRL's LLM/);
  });

  it('verl and OpenRLHF: the actor from the estimate flags; the GPUs the job needs', () => {
    const verl = cli('rl', 'qwen2.5-0.5b', '--framework', 'verl', '--gpu', 'H100-80GB', '--gpus', '2', '--batch', '2', '--seq', '256');
    expect(verl.code).toBe(0);
    expect(verl.out).toMatch(/^ {2}update /m);
    expect(verl.out).toContain('sleep(level=2) after each rollout');
    const apart = cli('rl', 'qwen2.5-0.5b', '--framework', 'openrlhf', '--gpu', 'H100-80GB', '--engines', '2', '--batch', '2', '--seq', '256');
    expect(apart.out).toContain('GPUs: 1 for the trainer + 2 for the engines = 3');
    expect(cli('rl', 'qwen2.5-0.5b', '--framework', 'verl', '--gpu', 'H100-80GB', '--gpus', '2', '--num-generations', '4').err).toMatch(
      /^vram-ts: --num-generations: is a TRL GRPOConfig input/,
    );
    expect(cli('rl', 'qwen2.5-0.5b', '--gpu', 'H100-80GB').err).toMatch(/^vram-ts: --framework: rl needs the framework/);
    expect(cli('rl', 'qwen2.5-0.5b', '--framework', 'verl', '--gpu', 'H100-80GB').err).toMatch(/^vram-ts: --gpus: verl's rollout spans/);
  });
});
