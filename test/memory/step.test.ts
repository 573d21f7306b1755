import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CONTEXT_DEFAULTS,
  CATEGORIES,
  conv2d,
  estimate,
  evaluate,
  fits,
  linear,
  maxFitting,
  memoryBudget,
  mobilenetV3Small,
  relu,
  replayAllocator,
  runtimeLines,
  seq,
  sym,
  type Dim,
} from '../../src/index.js';
import { cublasWorkspace, paramUpdate, savedStorages } from '../../src/internals.js';
import { seqFromSpecs, type LayerSpec } from '../helpers/layer-spec.js';
import { randomModel } from '../helpers/random-models.js';

const num = (d: Dim) => d as number;

describe('optimizer state', () => {
  const model = mobilenetV3Small({ numClasses: 3 });
  const paramBytes = 1_520_931 * 4;
  it('Adam and AdamW keep 2 × the parameter bytes on the GPU, SGD with momentum 1 ×, plain SGD none', () => {
    expect(estimate(model, { input: [2, 3, 64, 64], optimizer: 'adam' }).bytes.optimizer).toBe(2 * paramBytes);
    expect(estimate(model, { input: [2, 3, 64, 64], optimizer: 'adamw' }).bytes.optimizer).toBe(2 * paramBytes);
    expect(estimate(model, { input: [2, 3, 64, 64], optimizer: 'sgd_momentum' }).bytes.optimizer).toBe(paramBytes);
    expect(estimate(model, { input: [2, 3, 64, 64], optimizer: 'sgd' }).bytes.optimizer).toBe(0);
  });
  it('keeps Adam step counts on the host unless fused, as torch.optim does', () => {
    const fused = estimate(model, { input: [2, 3, 64, 64], optimizer: { name: 'adam', impl: 'fused' } }).bytes.optimizer as number;
    const tensors = estimate(model, { input: [2, 3, 64, 64] }).ir.tensors.filter((t) => t.role === 'param').length;
    expect(fused).toBe(2 * paramBytes + 4 * tensors);
  });
  it('bitsandbytes Adam8bit: uint8 moments with a float32 absmax per 256 elements, 32-bit under 4096 elements', () => {
    const big = paramUpdate({ name: 'adam8bit' }, { shape: [1024, 1000], dtype: 'float32' });
    expect(big.state.filter((s) => s.place === 'device').reduce((a, s) => a + num(s.bytes), 0)).toBe(2 * 1_024_000 + 2 * 4 * 4000);
    const small = paramUpdate({ name: 'adam8bit' }, { shape: [1000], dtype: 'float32' });
    expect(small.state.filter((s) => s.place === 'device').reduce((a, s) => a + num(s.bytes), 0)).toBe(2 * 4000);
  });
  it('Adafactor factors the second moment of matrices into row and column vectors', () => {
    const u = paramUpdate({ name: 'adafactor' }, { shape: [512, 256], dtype: 'float32' });
    expect(u.state.filter((s) => s.place === 'device').map((s) => s.bytes)).toEqual([512 * 4, 256 * 4]);
  });
  it('the for-loop Adam update holds two parameter-sized temporaries, foreach one per tensor for the list, fused none', () => {
    expect(paramUpdate({ name: 'adam' }, { shape: [10, 10], dtype: 'float32' }).temps).toEqual([400, 400]);
    expect(paramUpdate({ name: 'adam', impl: 'foreach' }, { shape: [10, 10], dtype: 'float32' }).listTemps).toBe(400);
    expect(paramUpdate({ name: 'adam', impl: 'fused' }, { shape: [10, 10], dtype: 'float32' })).toMatchObject({ temps: [], listTemps: 0 });
  });
});

describe('the training step (property-based)', () => {
  it('peak >= parameters + buffers + input + optimizer + saved activations, and >= every category at the peak', () => {
    fc.assert(
      fc.property(randomModel, fc.constantFrom('sgd', 'adam', 'sgd_momentum'), fc.constantFrom('cuda', 'cpu'), (m, optimizer, device) => {
        const r = estimate(seqFromSpecs(m.layers), { input: m.input, optimizer, device });
        // The input counts once even when the first layer saves it (then it is in activations too).
        const savedInput = [...savedStorages(r.ir).firstSaver.keys()]
          .filter((s) => r.ir.storages[s]!.role === 'input')
          .reduce((a, s) => a + num(r.ir.storages[s]!.bytes), 0);
        const floor =
          [r.bytes.parameters, r.bytes.buffers, r.bytes.input, r.bytes.optimizer, r.bytes.activations].reduce((a: number, b) => a + num(b), 0) - savedInput;
        // On CUDA every block is counted in 512-byte units, which only adds.
        expect(num(r.bytes.peak)).toBeGreaterThanOrEqual(floor);
        const atPeak = CATEGORIES.map((c) => num(r.peak.byCategory[c]));
        for (const part of atPeak) expect(num(r.bytes.peak)).toBeGreaterThanOrEqual(part);
        expect(atPeak.reduce((a, b) => a + b, 0)).toBe(r.bytes.peak);
        const maxima = CATEGORIES.map((c) => Math.max(...r.timeline.map((e) => num(e.byCategory[c]))));
        expect(num(r.bytes.peak)).toBeLessThanOrEqual(maxima.reduce((a, b) => a + b, 0));
      }),
      { numRuns: 60 },
    );
  });

  it("the timeline's last event equals the steady-state baseline", () => {
    fc.assert(
      fc.property(randomModel, fc.constantFrom('sgd', 'adam', 'sgd_momentum', 'adafactor', 'lion'), (m, optimizer) => {
        const r = estimate(seqFromSpecs(m.layers), { input: m.input, optimizer });
        expect(r.timeline.at(-1)!.live).toBe(r.steps.steady!.baseline);
        expect(r.timeline[0]!.live).toBe(r.steps.steady!.baseline);
      }),
      { numRuns: 60 },
    );
  });

  it('the first step never peaks above the steady one (estimate reports the steady peak without working the first out)', () => {
    fc.assert(
      fc.property(
        randomModel,
        fc.constantFrom('sgd', 'adam', 'sgd_momentum', 'adafactor', 'lion', 'adam8bit'),
        fc.integer({ min: 1, max: 3 }),
        (m, optimizer, microBatches) => {
          const r = estimate(seqFromSpecs(m.layers), { input: m.input, optimizer, microBatches });
          expect(r.steps.first!.peak).toBeLessThanOrEqual(r.steps.steady!.peak as number);
          expect(r.bytes.peak).toBe(r.steps.steady!.peak);
          expect(r.peak.step).toBe('steady');
        },
      ),
      { numRuns: 60 },
    );
  });

  it('checkpointing never raises the activation share (blocks that start with a conv or linear, which keeps its input anyway)', () => {
    fc.assert(
      fc.property(randomModel, fc.integer({ min: 1, max: 4 }), (m, every) => {
        // Checkpoint keeps a block's inputs; a block that begins with a conv keeps no less without it.
        const blocks: LayerSpec[][] = [];
        for (const layer of m.layers) {
          if (layer[0] === 'conv2d' || blocks.length === 0) blocks.push([layer]);
          else blocks[blocks.length - 1]!.push(layer);
        }
        fc.pre(blocks.every((b) => b[0]![0] === 'conv2d'));
        const model = seq(...blocks.map((b) => seqFromSpecs(b)));
        const plain = num(estimate(model, { input: m.input }).bytes.activations);
        const checkpointed = num(estimate(model, { input: m.input, checkpoint: { within: '', every } }).bytes.activations);
        expect(checkpointed).toBeLessThanOrEqual(plain);
      }),
      { numRuns: 60 },
    );
  });

  it('freezing every parameter gives zero gradient and optimizer bytes', () => {
    fc.assert(
      fc.property(randomModel, (m) => {
        const r = estimate(seqFromSpecs(m.layers), { input: m.input, freeze: [''] });
        expect(r.bytes.gradients).toBe(0);
        expect(r.bytes.optimizer).toBe(0);
        expect(r.bytes.activations).toBe(0);
        expect(r.params.trainable).toBe(0);
      }),
      { numRuns: 40 },
    );
  });

  it('mixed precision lowers activation bytes for a conv/linear model (besides the 16-bit weight copies autocast saves)', () => {
    // A model that starts with a conv runs in 16 bits from there on; one that starts with, say, bn
    // keeps fp32 activations until the first conv, which then saves a 16-bit copy as well.
    fc.assert(
      fc.property(randomModel, fc.constantFrom('amp-fp16', 'amp-bf16') as fc.Arbitrary<'amp-fp16' | 'amp-bf16'>, (m, precision) => {
        fc.pre(m.layers[0]![0] === 'conv2d');
        const model = seqFromSpecs(m.layers);
        const fp32 = num(estimate(model, { input: m.input }).bytes.activations);
        const mixed = estimate(model, { input: m.input, precision });
        const copies = new Set(mixed.ir.ops.flatMap((op) => op.paramCopies.map((id) => mixed.ir.tensors[id]!.storage)));
        const copyBytes = [...copies].reduce((a, s) => a + num(mixed.ir.storages[s]!.bytes), 0);
        const withoutCopies = num(mixed.bytes.activations) - copyBytes;
        if (fp32 > 0) expect(withoutCopies).toBeLessThan(fp32);
        else expect(withoutCopies).toBe(0);
      }),
      { numRuns: 60 },
    );
  });

  it('mixed precision lowers the activations and the peak of MobileNetV3 at 224×224', () => {
    const model = mobilenetV3Small({ numClasses: 3 });
    const fp32 = estimate(model, { input: [8, 3, 224, 224] });
    const amp = estimate(model, { input: [8, 3, 224, 224], precision: 'amp-bf16' });
    expect(num(amp.bytes.activations)).toBeLessThan(0.6 * num(fp32.bytes.activations));
    expect(num(amp.bytes.peak)).toBeLessThan(num(fp32.bytes.peak));
  });

  it('maxFitting returns v such that v fits and v + 1 does not', () => {
    fc.assert(
      fc.property(randomModel, fc.integer({ min: 1, max: 400 }), fc.constantFrom('reserved' as const, 'allocated' as const), (m, scale, verdict) => {
        const model = seqFromSpecs(m.layers);
        const [, c, h, w] = m.input;
        // No runtime lines (a budget the size of these small models' steps): reserved or allocated alone.
        const runtime = { context: false, cublas: false };
        const one = fits(model, { input: [1, c, h, w], gpu: 1, verdict, runtime });
        const gpu = Math.floor(one.needed * (1 + scale / 10));
        const B = maxFitting(model, 'B', { input: [sym('B'), c, h, w], gpu, verdict, runtime });
        expect(B).toBeGreaterThanOrEqual(1);
        expect(fits(model, { input: [B, c, h, w], gpu, verdict, runtime }).fits).toBe(true);
        expect(fits(model, { input: [B + 1, c, h, w], gpu, verdict, runtime }).fits).toBe(false);
      }),
      { numRuns: 40 },
    );
  });

  it('symbolic peaks evaluate to the concrete peak (CUDA; on CPU the oneDNN/slow kernel choice depends on the batch value)', () => {
    fc.assert(
      fc.property(randomModel, fc.integer({ min: 1, max: 6 }), fc.constantFrom('cuda' as const), (m, b, device) => {
        const model = seqFromSpecs(m.layers);
        const [, c, h, w] = m.input;
        const symbolic = estimate(model, { input: [sym('B'), c, h, w], device }).bytes.peak;
        expect(evaluate(symbolic, { B: b })).toBe(estimate(model, { input: [b, c, h, w], device }).bytes.peak);
      }),
      { numRuns: 30 },
    );
  });
});

describe('fitting', () => {
  it('solves the largest batch of MobileNetV3-small on a GPU exactly', () => {
    const model = mobilenetV3Small({ numClasses: 3 });
    // The allocated-only verdict: the allocated peak against the nominal memory, as before.
    const B = maxFitting(model, 'B', { input: [sym('B'), 3, 224, 224], gpu: 'RTX-4060', verdict: 'allocated' });
    const budget = memoryBudget('RTX-4060');
    expect(num(estimate(model, { input: [B, 3, 224, 224], timeline: false }).bytes.peak)).toBeLessThanOrEqual(budget);
    expect(num(estimate(model, { input: [B + 1, 3, 224, 224], timeline: false }).bytes.peak)).toBeGreaterThan(budget);
    // The default: the step replayed through the caching allocator within capacity − context − two
    // cuBLAS workspaces (its cached blocks freed and retried before an OOM, as PyTorch does).
    const R = maxFitting(model, 'B', { input: [sym('B'), 3, 224, 224], gpu: 'RTX-4060' });
    const at = (b: number) => fits(model, { input: [b, 3, 224, 224], gpu: 'RTX-4060' });
    expect(at(R).fits).toBe(true);
    expect(at(R).oom).toBeUndefined();
    expect(at(R + 1).fits).toBe(false);
    expect(at(R + 1).oom).toMatch(/^CUDA out of memory\. Tried to allocate /);
    expect(R).toBeLessThan(B);
  });
  it('solves for a resolution with constraints (shapes must exist) and runtime lines', () => {
    const model = seq(conv2d({ out: 8, kernel: 3, stride: 2 }), relu(), conv2d({ out: 8, kernel: 3 }));
    // The allocated-only verdict with the runtime line asked for (64 MB would not hold the default CUDA context).
    const old = { gpu: '64MB', runtime: { cublas: true }, verdict: 'allocated' } as const;
    const H = maxFitting(model, 'H', { input: [1, 3, sym('H'), 64], ...old });
    expect(fits(model, { input: [1, 3, H, 64], ...old }).fits).toBe(true);
    expect(fits(model, { input: [1, 3, H + 1, 64], ...old }).fits).toBe(false);
    // The default on 512 MB: 400 MiB of context and two workspaces off it.
    const R = maxFitting(model, 'H', { input: [1, 3, sym('H'), 64], gpu: '512MB' });
    expect(R).toBeGreaterThan(0);
    expect(fits(model, { input: [1, 3, R, 64], gpu: '512MB' }).fits).toBe(true);
    expect(fits(model, { input: [1, 3, R + 1, 64], gpu: '512MB' }).fits).toBe(false);
    expect(maxFitting(seq(linear({ out: 4 })), 'B', { input: [sym('B'), 8], gpu: 10 })).toBe(0);
  });
});

describe('runtime lines and the allocator replay', () => {
  it('gives the documented cuBLAS workspaces and the configured lines, separately', () => {
    expect(runtimeLines({ cublas: true }, 'ampere')).toEqual([
      { label: 'cuBLAS workspace (1 handle)', bytes: 8_519_680, source: 'PyTorch default CUBLAS_WORKSPACE_CONFIG' },
    ]);
    expect(runtimeLines({ cublas: true, cublasHandles: 2 }, 'hopper')[0]!.bytes).toBe(2 * 32 * 2 ** 20);
    expect(runtimeLines({ context: 123, cudnnWorkspace: 456 }, 'ada').map((l) => l.bytes)).toEqual([123, 456]);
  });
  it('fits counts a cuBLAS workspace per thread: two when training (autograd has its own), one in inference', () => {
    const model = mobilenetV3Small({ numClasses: 3 });
    const input = [1, 3, 224, 224];
    // The allocated-only verdict adds only the lines asked for.
    const old = { gpu: 'H100-80GB', runtime: { cublas: true }, verdict: 'allocated' } as const;
    const train = fits(model, { input, ...old });
    const infer = fits(model, { input, mode: 'inference', ...old });
    expect(train.runtime.map((l) => l.bytes)).toEqual([2 * cublasWorkspace('hopper')]);
    expect(infer.runtime.map((l) => l.bytes)).toEqual([cublasWorkspace('hopper')]);
    expect(train.needed).toBe((train.estimate.bytes.peak as number) + 2 * cublasWorkspace('hopper'));
    expect(fits(model, { input, ...old, runtime: { cublas: true, cublasHandles: 1 } }).runtime[0]!.bytes).toBe(cublasWorkspace('hopper'));
    // The default counts the context and the same workspaces without being asked.
    expect(fits(model, { input, gpu: 'H100-80GB' }).runtime.map((l) => l.bytes)).toEqual([CONTEXT_DEFAULTS.hopper, 2 * cublasWorkspace('hopper')]);
    expect(fits(model, { input, mode: 'inference', gpu: 'H100-80GB' }).runtime.map((l) => l.bytes)).toEqual([
      CONTEXT_DEFAULTS.hopper,
      cublasWorkspace('hopper'),
    ]);
  });
  it('replays the caching allocator: 2 MiB small segments, 20 MiB for 1-10 MiB, reuse after free', () => {
    const MiB = 2 ** 20;
    // 100 B → a 2 MiB small segment; 3 MiB → a 20 MiB segment; after the free, 2 MiB and then
    // 12 MiB are both cut from that 20 MiB segment (best fit, split when > 1 MiB is left).
    const r = replayAllocator([[0, 100], [1, 3 * MiB], [-2], [2, 2 * MiB], [3, 12 * MiB]]);
    expect(r.maxReserved).toBe(22 * MiB);
    expect(r.segments).toBe(2);
    // 12 MiB does not fit the 2 MiB left: a segment of its own, rounded to 2 MiB.
    expect(
      replayAllocator([
        [0, 9 * MiB],
        [1, 12 * MiB + 1],
      ]).maxReserved,
    ).toBe(20 * MiB + 14 * MiB);
  });
});
