/**
 * Issue 24, items 2 (estimate side) and 3: the step's allocation log replayed through the caching
 * allocator (`bytes.reserved`, `peak.reserved`, `peak.fragmentation`), and fits / maxFitting /
 * the CLI comparing capacity − context − workspaces with it by default.
 */
import { describe, expect, it } from 'vitest';
import { estimate, estimateToJSON, fits, gpu, gpuCapacity, llm, maxFitting, mobilenetV3Small, sftStep, sym, usableMemory } from '../../src/index.js';
import { cli } from '../helpers/cli.js';
import { loadCudaFixtures, modelFor, type OracleFixture } from '../helpers/oracle.js';

const MiB = 2 ** 20;
const model = mobilenetV3Small();
const input = [8, 3, 224, 224];

describe('bytes.reserved: the step replayed through the caching allocator', () => {
  it('is at least the allocated peak; at the peak, reserved - allocated is the fragmentation', () => {
    for (const mode of ['train', 'inference'] as const) {
      const r = estimate(model, { input, mode });
      const reserved = r.bytes.reserved!;
      expect(reserved).toBeGreaterThanOrEqual(r.bytes.peak);
      expect(reserved % (2 * MiB)).toBe(0); // whole segments
      expect(r.peak.reserved!).toBeLessThanOrEqual(reserved);
      expect(r.peak.fragmentation).toBe(r.peak.reserved! - r.bytes.peak);
      expect(r.peak.fragmentation!).toBeGreaterThanOrEqual(0);
    }
  });
  it('leaves every existing figure as it was, and is not enumerable (the JSON report writes it)', () => {
    const r = estimate(model, { input });
    expect(Object.keys(r.bytes)).not.toContain('reserved');
    expect(Object.keys(r.peak)).not.toContain('fragmentation');
    expect(r.bytes.peak).toBe(estimate(model, { input, timeline: false }).bytes.peak);
    const json = estimateToJSON(r) as { bytes: { reserved: number }; peak: { reserved: number; fragmentation: number } };
    expect(json.bytes.reserved).toBe(r.bytes.reserved);
    expect(json.peak.fragmentation).toBe(r.peak.fragmentation);
  });
  it('is absent on cpu (no caching allocator) and for symbolic inputs', () => {
    expect(estimate(model, { input, device: 'cpu' }).bytes.reserved).toBeUndefined();
    expect('reserved' in estimate(model, { input, device: 'cpu' }).peak).toBe(false);
    expect(estimate(model, { input: [sym('B'), 3, 224, 224] }).bytes.reserved).toBeUndefined();
  });
  it('replays the full model of an estimate from reduced blocks', () => {
    const r = estimate(llm('qwen2.5-0.5b'), { input: [1, 256] });
    expect(r.bytes.reserved!).toBeGreaterThanOrEqual(r.bytes.peak);
    expect(r.peak.reserved! - r.peak.fragmentation!).toBe(r.bytes.peak);
  });
  it('matches max_memory_reserved of the CUDA fixtures (less the runtime’s 64 MiB of workspaces) within a segment or two', () => {
    const OPT: Record<string, 'sgd' | 'sgd_momentum' | 'adam' | 'adamw'> = { sgd: 'sgd', sgd_momentum: 'sgd_momentum', adam: 'adam', adamw: 'adamw' };
    let compared = 0;
    for (const f of loadCudaFixtures()) {
      const built = modelFor({ case: f.case } as OracleFixture);
      if ('pending' in built) continue;
      const base = { input: f.case.input, device: 'cuda' as const, moduleMode: f.case.mode, timeline: false };
      const runs: [string, number | undefined, number][] = Object.entries(f.train)
        .filter(([name]) => OPT[name] !== undefined)
        .map(([name, m]) => [name, estimate(built.layer, { ...base, optimizer: OPT[name]! }).bytes.reserved, m.maxReserved]);
      runs.push(['inference', estimate(built.layer, { ...base, mode: 'inference' }).bytes.reserved, f.inference.maxReserved]);
      for (const [name, ours, measured] of runs) {
        const own = measured - 64 * MiB;
        expect(Math.abs(ours! - own), `${f.id} ${name}: ours ${ours}, PyTorch ${own}`).toBeLessThanOrEqual(Math.max(24 * MiB, 0.02 * own));
        compared += 1;
      }
    }
    if (compared > 0) expect(compared).toBeGreaterThan(100);
  });
});

describe('fits: capacity − runtime lines against reserved by default', () => {
  const base = fits(model, { input, gpu: '80GB' });
  const runtime = base.runtime.reduce((s, l) => s + l.bytes, 0);
  it('shows every line', () => {
    expect(base.verdict).toBe('reserved');
    expect(base.runtime.map((l) => l.label)).toEqual(['CUDA context', 'cuBLAS workspace (2 handles)']);
    expect(base.usable).toBe(base.capacity - runtime);
    expect(base.reserved).toBe(base.estimate.bytes.reserved);
    expect(base.reservedFrom).toBe('allocator');
    expect(base.allocated).toBe(base.estimate.bytes.peak);
    expect(base.fragmentation).toBe(base.estimate.peak.fragmentation);
    expect(base.needed).toBe(base.reserved + runtime);
    expect(base.headroom).toBe(base.usable - base.reserved);
  });
  it('does not fit where reserved + runtime pass the capacity though the allocated peak + runtime fits', () => {
    const budget = base.allocated + runtime + Math.floor((base.reserved - base.allocated) / 2);
    expect(base.reserved).toBeGreaterThan(base.allocated);
    const now = fits(model, { input, gpu: budget });
    expect(now.fits).toBe(false);
    expect(now.headroom).toBe(budget - runtime - base.reserved);
    // Within that budget the allocator, after freeing its cached blocks and retrying, still fails: PyTorch's message says where.
    expect(now.oom).toMatch(/^CUDA out of memory\. Tried to allocate .* GPU 0 has a total capacity of /);
    // The allocated-only verdict with the same runtime lines fits it.
    expect(fits(model, { input, gpu: budget, verdict: 'allocated', runtime: { context: true, cublas: true } }).fits).toBe(true);
  });
  it("verdict: 'allocated' is the old comparison: the allocated peak against the nominal memory, runtime only if asked", () => {
    const old = fits(model, { input, gpu: 'RTX-3090', verdict: 'allocated' });
    expect(old.runtime).toEqual([]);
    expect(old.capacity).toBe(gpu('RTX-3090').memoryBytes);
    expect(old.needed).toBe(old.allocated);
    expect(old.headroom).toBe(old.capacity - old.allocated);
    expect(old.fits).toBe(old.allocated <= gpu('RTX-3090').memoryBytes);
    // The default starts from the total PyTorch reports for it.
    expect(fits(model, { input, gpu: 'RTX-3090' }).capacity).toBe(gpu('RTX-3090').torchTotal!.bytes);
    expect(() => fits(model, { input, gpu: 'RTX-3090', verdict: 'nominal' as never })).toThrow(/verdict/);
  });
  it('takes NCCL communicator buffers as runtime lines (outside the caching allocator) off the usable memory', () => {
    const plain = fits(model, { input, gpu: 'H100-80GB' });
    const withNccl = fits(model, { input, gpu: 'H100-80GB', runtime: { nccl: { groups: [{ name: 'dp', ranks: 8 }], channels: 16 } } });
    const line = withNccl.runtime.find((l) => l.label.startsWith('NCCL dp'));
    expect(line?.bytes).toBe(16 * 12 * 2 ** 20);
    expect(withNccl.usable).toBe(plain.usable - line!.bytes);
    expect(() => fits(model, { input, gpu: 'H100-80GB', runtime: { nccl: { groups: [] } } as never })).toThrow(/nccl/);
  });
  it('on cpu: the allocated peak, no runtime lines unless asked', () => {
    const r = fits(model, { input, device: 'cpu', gpu: '8GB' });
    expect(r.reservedFrom).toBe('allocated');
    expect(r.reserved).toBe(r.allocated);
    expect(r.fragmentation).toBe(0);
    expect(r.runtime).toEqual([]);
    expect(r.needed).toBe(r.allocated);
    expect(fits(model, { input, device: 'cpu', gpu: '8GB', runtime: { context: true } }).runtime.length).toBe(1);
  });
  it('gpuCapacity: torch’s total for a catalog GPU where recorded, the driver’s otherwise, a size as given', () => {
    expect(gpuCapacity('RTX-3090')).toBe(gpu('RTX-3090').torchTotal!.bytes);
    expect(gpuCapacity('RTX-4060')).toBe(gpu('RTX-4060').capacity!.bytes);
    expect(gpuCapacity('A800-40GB')).toBe(gpu('A800-40GB').memoryBytes);
    expect(gpuCapacity('24GB')).toBe(24 * 2 ** 30);
    expect(gpuCapacity(1000)).toBe(1000);
    // Each capacity says where it comes from.
    expect(fits(model, { input, gpu: 'RTX-3090' }).capacityFrom).toBe('torch');
    expect(fits(model, { input, gpu: 'A800-80GB' }).capacityFrom).toBe('torch');
    expect(fits(model, { input, gpu: 'A800-40GB' }).capacityFrom).toBe('driver');
    expect(fits(model, { input, gpu: '24GB' }).capacityFrom).toBe('given');
    expect(fits(model, { input, gpu: 'RTX-3090', verdict: 'allocated' }).capacityFrom).toBe('nominal');
  });
});

describe('maxFitting with the reserved verdict', () => {
  it('is monotone in the budget, and the value returned fits while the next does not', () => {
    let last = 0;
    for (const gib of [1, 1.5, 2, 3, 4, 6]) {
      const budget = Math.floor(gib * 2 ** 30);
      const B = maxFitting(model, 'B', { input: [sym('B'), 3, 224, 224], gpu: budget });
      expect(B).toBeGreaterThanOrEqual(last);
      last = B;
      if (B > 0) expect(fits(model, { input: [B, 3, 224, 224], gpu: budget }).fits).toBe(true);
      expect(fits(model, { input: [B + 1, 3, 224, 224], gpu: budget }).fits).toBe(false);
      expect(B).toBeLessThanOrEqual(maxFitting(model, 'B', { input: [sym('B'), 3, 224, 224], gpu: budget, verdict: 'allocated' }));
    }
    expect(last).toBeGreaterThan(0);
  });
  it('stays fast on a decoder (the full model is replayed at a handful of values)', () => {
    const started = performance.now();
    const S = maxFitting(llm('qwen2.5-0.5b'), 'S', { input: [1, sym('S')], gpu: 'H100-80GB', precision: 'bf16' });
    expect(S).toBeGreaterThan(1000);
    expect(performance.now() - started).toBeLessThan(10_000);
  });
});

describe('the CLI verdict', () => {
  it('prints capacity, − context, − workspaces, = usable, − reserved (allocated, fragmentation), = headroom', () => {
    const out = cli('mobilenet_v3_small', '--batch', '8', '--gpu', 'H100').out;
    expect(out).toMatch(/Fits H100 \(79\.22 GiB\): needs .*, leaves /);
    expect(out).toMatch(/ {2}capacity +79\.22 GiB/);
    expect(out).toMatch(/ {2}- CUDA context +618\.81 MiB/);
    expect(out).toMatch(/ {2}- cuBLAS workspace \(2 handles\) +64\.00 MiB/);
    expect(out).toMatch(/ {2}= usable +/);
    expect(out).toMatch(/ {2}- reserved \(caching allocator\) +[\d.]+ MiB {2}allocated [\d.]+ MiB \+ fragmentation [\d.]+ MiB at the peak/);
    expect(out).toMatch(/ {2}= headroom +/);
    const json = JSON.parse(cli('mobilenet_v3_small', '--batch', '8', '--gpu', 'H100', '--format', 'json').out) as {
      fit: { usable: number; reserved: number; headroom: number; capacity: number; runtime: { bytes: number }[] };
    };
    expect(json.fit.headroom).toBe(json.fit.usable - json.fit.reserved);
    expect(json.fit.usable).toBe(json.fit.capacity - json.fit.runtime.reduce((s, l) => s + l.bytes, 0));
  });

  it('--verdict allocated keeps the old comparison; --verdict without --gpu is refused', () => {
    const out = cli('mobilenet_v3_small', '--batch', '8', '--gpu', 'H100', '--verdict', 'allocated').out;
    expect(out).toMatch(/ {2}memory +79\.65 GiB +nominal/);
    expect(out).toMatch(/ {2}- allocated peak +[\d.]+ MiB {2}the allocated-only verdict/);
    expect(out).not.toMatch(/CUDA context/);
    expect(cli('mobilenet_v3_small', '--verdict', 'allocated').err).toMatch(/--verdict: .*give --gpu/);
    expect(cli('mobilenet_v3_small', '--gpu', 'H100', '--verdict', 'nominal').err).toMatch(/--verdict/);
    // fit solves on the same verdicts: the allocated one never answers less.
    const reserved = Number(cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--train', '--solve', 'seq', '--precision', 'bf16').out);
    const allocated = Number(
      cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--train', '--solve', 'seq', '--precision', 'bf16', '--verdict', 'allocated').out,
    );
    expect(reserved).toBeGreaterThan(0);
    expect(allocated).toBeGreaterThanOrEqual(reserved);
  });

  it("the trainers' verdict: torch's capacity less the context and two cuBLAS workspaces against the step's peak", () => {
    const out = cli('sft', 'qwen2.5-0.5b', '--per-device-train-batch-size', '4', '--max-length', '2048', '--gpu', 'RTX-3090').out;
    const step = sftStep(llm('qwen2.5-0.5b'), { per_device_train_batch_size: 4, max_length: 2048 });
    const u = usableMemory({ gpu: 'RTX-3090' });
    expect(u.runtime.map((l) => l.label)).toEqual(['CUDA context', 'cuBLAS workspace (2 handles)']);
    expect(out).toMatch(/ {2}capacity +23\.58 GiB +as PyTorch reports it/);
    expect(out).toMatch(/ {2}- CUDA context +400\.00 MiB/);
    expect(out).toMatch(/ {2}- allocated peak .*not replayed through the caching allocator/);
    const json = JSON.parse(
      cli('sft', 'qwen2.5-0.5b', '--per-device-train-batch-size', '4', '--max-length', '2048', '--gpu', 'RTX-3090', '--format', 'json').out,
    ) as {
      fit: { usable: number; allocated: number; headroom: number; fits: boolean };
    };
    expect(json.fit.usable).toBe(u.usable);
    expect(json.fit.allocated).toBe(step.peak);
    expect(json.fit.headroom).toBe(u.usable - step.peak);
    // Over a budget the step's peak passes once the runtime is counted, it does not fit.
    const tight = `${Math.floor((step.peak + 100 * MiB) / 2 ** 20)}MB`;
    const r = cli('sft', 'qwen2.5-0.5b', '--per-device-train-batch-size', '4', '--max-length', '2048', '--gpu', tight, '--check');
    expect(r.out).toMatch(/Does not fit/);
    expect(r.code).toBe(1);
  });
});

describe('usableMemory', () => {
  it('is the capacity less each runtime line: one cuBLAS handle in inference, none on cpu', () => {
    const t = usableMemory({ gpu: 'H100-80GB' });
    const i = usableMemory({ gpu: 'H100-80GB', mode: 'inference' });
    expect(t.capacity).toBe(gpuCapacity('H100-80GB'));
    expect(t.capacityFrom).toBe('torch');
    expect(t.capacity - t.usable).toBe(t.runtime.reduce((s, l) => s + l.bytes, 0));
    expect(t.usable).toBeLessThan(i.usable);
    expect(usableMemory({ gpu: '8GB', device: 'cpu' })).toMatchObject({ runtime: [], usable: 8 * 2 ** 30, capacityFrom: 'given' });
    expect(usableMemory({ gpu: 'H100-80GB', verdict: 'allocated' })).toMatchObject({ capacity: gpu('H100-80GB').memoryBytes, runtime: [] });
    expect(() => usableMemory({ gpu: 'H100-80GB', mode: 'train' as never })).toThrow(/mode/);
    expect(() => usableMemory({ gpu: 'H100-80GB', extra: 1 } as never)).toThrow(/extra/);
  });
});
