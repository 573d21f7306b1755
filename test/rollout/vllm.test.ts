import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { issueOf } from '../helpers/errors.js';
import { llm, vllmEngine, vllmPageBytes } from '../../src/index.js';

const GiB = 2 ** 30;
const measured = { weightsBytes: 0.93 * GiB, activationPeakBytes: 1.4 * GiB, nonTorchBytes: 0.1 * GiB };
const qwen = llm('qwen2.5-0.5b');

describe("vLLM's KV pool at start-up (V1 rule)", () => {
  it('the page: 2 × block × KV heads per rank × head size × dtype; heads replicated when fewer than TP ranks', () => {
    const meta = llm('llama-3-8b').meta!; // 8 KV heads of 128
    expect(vllmPageBytes(meta, { blockSize: 16, tensorParallelSize: 1, dtypeBytes: 2 })).toBe(2 * 16 * 8 * 128 * 2);
    expect(vllmPageBytes(meta, { blockSize: 16, tensorParallelSize: 4, dtypeBytes: 2 })).toBe(2 * 16 * 2 * 128 * 2);
    expect(vllmPageBytes(meta, { blockSize: 16, tensorParallelSize: 16, dtypeBytes: 1 })).toBe(2 * 16 * 1 * 128);
  });

  it('the budget is a fraction of the TOTAL memory, whatever the model; fp8 doubles the tokens', () => {
    const a = vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: 0.9, measured });
    expect(a.requested).toBe(Math.ceil(80 * GiB * 0.9));
    expect(a.kvCache.bytes).toBeCloseTo(80 * GiB * 0.9 - 2.43 * GiB, -3);
    const fp8 = vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: 0.9, kvCacheDtype: 'fp8', measured });
    expect(Math.abs(fp8.kvCache.tokens - 2 * a.kvCache.tokens)).toBeLessThanOrEqual(2 * 16);
    // The default utilization follows the release.
    expect(vllmEngine(qwen, { totalBytes: 80 * GiB, measured, release: '0.8.0' }).requested).toBe(Math.ceil(80 * GiB * 0.9));
    expect(vllmEngine(qwen, { totalBytes: 80 * GiB, measured }).requested).toBe(Math.ceil(80 * GiB * 0.92));
  });

  it("property: tokens are whole blocks, never more than the pool's bytes allow", () => {
    fc.assert(
      fc.property(fc.double({ min: 0.05, max: 1, noNaN: true }), fc.constantFrom(8, 16, 32), fc.constantFrom(1, 2), (util, blockSize, tp) => {
        const e = vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: util, blockSize, tensorParallelSize: tp, measured, maxModelLen: 1024 });
        expect(e.kvCache.tokens % blockSize).toBe(0);
        expect(e.kvCache.blocks * e.kvCache.pageBytes * 24).toBeLessThanOrEqual(Math.max(0, e.kvCache.bytes));
        expect((e.kvCache.blocks + 1) * e.kvCache.pageBytes * 24).toBeGreaterThan(e.kvCache.bytes);
      }),
    );
  });

  it('says what vLLM says when it cannot start', () => {
    const small = vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: 0.02, measured });
    expect(small.starts).toBe(false);
    expect(small.error).toContain('No available memory for the cache blocks');
    const busy = vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: 0.9, freeBytes: 40 * GiB, measured });
    expect(busy.error).toMatch(/^Free memory on device .* is less than desired GPU memory utilization/);
    const long = vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: 0.035, measured });
    expect(long.starts).toBe(false);
    expect(long.error).toContain("To serve at least one request with the models's max seq len (32768)");
  });

  it('bad combinations are errors with a path', () => {
    expect(issueOf(() => vllmEngine(qwen, { totalBytes: 80 * GiB, gpuMemoryUtilization: 1.2, measured }))).toBe('gpuMemoryUtilization:bad-option');
    expect(issueOf(() => vllmEngine(qwen, { totalBytes: 80 * GiB, tensorParallelSize: 3, measured }))).toBe('tensorParallelSize:bad-option');
    expect(issueOf(() => vllmEngine(qwen, { totalBytes: 80 * GiB, maxModelLen: 131072, measured }))).toBe('maxModelLen:bad-option');
    expect(issueOf(() => vllmEngine(qwen, { totalBytes: 80 * GiB, measured: { ...measured, nonTorchBytes: -1 } }))).toBe('measured.nonTorchBytes:bad-option');
    expect(issueOf(() => vllmEngine(qwen, { totalBytes: 80 * GiB, measured, release: '0.6.3' }))).toBe('release:unsupported-release');
  });
});

describe('vllmEngine from the model and the GPU', () => {
  it("a named GPU is torch's total as a vLLM log printed it; one without it recorded is an error, not nvidia-smi's size", () => {
    const e = vllmEngine(qwen, { gpu: 'H100-80GB' });
    expect(e.totalBytes).toBe(Math.round(79.22 * GiB));
    expect(issueOf(() => vllmEngine(qwen, { gpu: 'A800-80GB' }))).toBe('gpu:not-modelled');
    expect(issueOf(() => vllmEngine(qwen, {} as never))).toBe('totalBytes:missing-option');
    expect(issueOf(() => vllmEngine(qwen, { gpu: 'H100-80GB', gpu_memory_utilization: 0.5 } as never))).toBe('gpu_memory_utilization:unknown-option');
  });

  it("vLLM's batch defaults: 8192 tokens and 1024 sequences for the server on ≥ 70 GiB, not an A100; 2048 and 256 otherwise", () => {
    expect(vllmEngine(qwen, { gpu: 'H100-80GB' }).settings).toMatchObject({ maxNumBatchedTokens: 8192, maxNumSeqs: 1024 });
    expect(vllmEngine(qwen, { gpu: 'H100-80GB', entrypoint: 'llm' }).settings).toMatchObject({ maxNumBatchedTokens: 16384, maxNumSeqs: 1024 });
    expect(vllmEngine(qwen, { gpu: 'A100-40GB' }).settings).toMatchObject({ maxNumBatchedTokens: 2048, maxNumSeqs: 256 });
    expect(vllmEngine(qwen, { gpu: 'RTX-3090', entrypoint: 'llm' }).settings).toMatchObject({ maxNumBatchedTokens: 8192, maxNumSeqs: 256 });
  });

  it('every figure names its rule or "measured"; what no rule derives is listed, not guessed', () => {
    const derived = vllmEngine(qwen, { gpu: 'H100-80GB' });
    expect(derived.sources.weights).toMatch(/^vllmWeights/);
    expect(derived.sources.activationPeak).toMatch(/^vllmProfilePeak/);
    expect(derived.assumed.map((a) => a.split(':')[0])).toEqual(['nonTorch', 'cudaGraphs']);
    const given = vllmEngine(qwen, { gpu: 'H100-80GB', measured: { ...measured, cudaGraphBytes: GiB / 2 } });
    expect(given.assumed).toEqual([]);
    expect(given.sources.weights).toBe('measured');
    expect(given.kvCache.bytes).toBe(given.requested - measured.weightsBytes - measured.activationPeakBytes - measured.nonTorchBytes - GiB / 2);
    // Before v0.21 the graphs sit outside the budget: in the footprint, not subtracted from the pool.
    const old = vllmEngine(qwen, { gpu: 'H100-80GB', release: '0.8.0', measured: { ...measured, cudaGraphBytes: GiB / 2 } });
    expect(old.footprint).toBe(old.requested + GiB / 2);
    expect(old.kvCache.bytes).toBe(old.requested - measured.weightsBytes - measured.activationPeakBytes - measured.nonTorchBytes);
  });

  it('cpu_offload_gb moves whole layers of weights off the GPU and the pool grows by them; --dtype float32 doubles the weights', () => {
    const base = vllmEngine(qwen, { gpu: 'H100-80GB', maxNumSeqs: 1 });
    const off = vllmEngine(qwen, { gpu: 'H100-80GB', maxNumSeqs: 1, cpuOffloadGb: 0.1 });
    expect(off.cpuOffloaded).toBeGreaterThanOrEqual(0.1 * GiB);
    expect(off.weights).toBe(base.weights - off.cpuOffloaded);
    expect(off.kvCache.bytes).toBe(base.kvCache.bytes + off.cpuOffloaded);
    expect(vllmEngine(qwen, { gpu: 'H100-80GB', dtype: 'float32' }).weights).toBe(2 * base.weights);
  });

  it('what stays between generations: awake, the weights and KV tensors; asleep, only non-torch memory and graphs', () => {
    const e = vllmEngine(qwen, { gpu: 'H100-80GB', measured: { ...measured, cudaGraphBytes: GiB / 4 } });
    expect(e.resident.idle).toBe(e.weights + e.kvCache.blocks * e.kvCache.pageBytes * 24 + e.nonTorch + e.cudaGraphs);
    expect(e.resident.asleep).toBe(e.nonTorch + e.cudaGraphs);
    expect(e.resident.cachedActivations).toBe(e.activationPeak);
    expect(e.resident.idle).toBeLessThanOrEqual(e.footprint);
  });
});
