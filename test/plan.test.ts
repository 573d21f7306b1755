import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimateRanks, estimate, fromHFConfig, gpusOf, memoryBudget, plan, type Layout } from '../src/index.js';
import { errorOf } from './helpers/errors.js';
import { seqFromSpecs } from './helpers/layer-spec.js';

const model = seqFromSpecs([
  ['linear', { out: 2048 }],
  ['relu', {}],
  ['linear', { out: 2048 }],
  ['relu', {}],
  ['linear', { out: 10 }],
]);
const sample = [1024];

/** The step of a layout, every rank, as estimate computes it. */
function peakOf(layout: Layout, share: number, micro: number): number {
  const options = { input: [micro, ...sample], optimizer: 'adam' as const, microBatches: share / micro, timeline: false };
  if (layout.engine === 'single' && layout.pp === 1) return estimate(model, options).bytes.peak as number;
  const engine = layout.engine === 'single' ? {} : { engine: layout.engine };
  return Math.max(
    ...estimateRanks(model, {
      ...options,
      parallel: { ...engine, dp: layout.dp, ...(layout.pp > 1 ? { pp: layout.pp } : {}), ...(layout.zero !== null ? { zero: layout.zero } : {}) },
    }).map((r) => r.peak as number),
  );
}

describe('plan', () => {
  it('each fitting layout fits on every rank, and the next larger micro-batch dividing the share does not', () => {
    fc.assert(
      fc.property(fc.integer({ min: 60, max: 400 }), fc.constantFrom(8, 12, 16), (mib, globalBatch) => {
        const gpu = `${mib}MiB`;
        const budget = memoryBudget(gpu);
        const r = plan(model, { sample, globalBatch, gpu, gpus: 4, optimizer: 'adam', pipelines: [1, 2] });
        for (const layout of r.layouts) {
          expect(globalBatch % layout.dp).toBe(0);
          expect(layout.dp * layout.pp).toBeLessThanOrEqual(4);
          if (layout.fits) expect(layout.accumulation).toBeGreaterThanOrEqual(layout.pp);
          const share = globalBatch / layout.dp;
          if (!layout.fits) {
            expect(peakOf(layout, share, 1)).toBeGreaterThan(budget);
            continue;
          }
          expect(layout.microBatch * layout.accumulation).toBe(share);
          expect(layout.peak).toBe(peakOf(layout, share, layout.microBatch));
          expect(layout.peak).toBeLessThanOrEqual(budget);
          const larger = Array.from({ length: share }, (_, i) => i + 1).find((m) => m > layout.microBatch && share % m === 0 && share / m >= layout.pp);
          if (larger !== undefined) expect(peakOf(layout, share, larger)).toBeGreaterThan(budget);
        }
        const fitting = r.layouts.filter((l) => l.fits);
        expect(r.fewest === undefined ? undefined : r.fewest.dp * r.fewest.pp).toBe(
          fitting.length === 0 ? undefined : Math.min(...fitting.map((l) => l.dp * l.pp)),
        );
      }),
      { numRuns: 6 },
    );
  });

  it('tries the data-parallel sizes that divide the global batch, each engine, with and without checkpointing', () => {
    const r = plan(model, { sample, globalBatch: 6, gpu: '1GB', gpus: 4, optimizer: 'adam', engines: ['fsdp2', 'ddp'], checkpoint: { modules: ['1'] } });
    expect(r.layouts.map((l) => `${l.dp} ${l.engine} ${l.checkpointing}`)).toEqual([
      '1 single false',
      '1 single true',
      '2 fsdp2 false',
      '2 fsdp2 true',
      '2 ddp false',
      '2 ddp true',
      '3 fsdp2 false',
      '3 fsdp2 true',
      '3 ddp false',
      '3 ddp true',
    ]);
  });

  it('tries each DeepSpeed ZeRO stage, or the one asked for', () => {
    const every = plan(model, { sample, globalBatch: 4, gpu: '1GB', gpus: 2, optimizer: 'adam', engines: ['deepspeed'] });
    expect(every.layouts.map((l) => `${l.dp} ${l.engine} ${l.zero}`)).toEqual(['1 single null', '2 deepspeed 1', '2 deepspeed 2', '2 deepspeed 3']);
    const third = plan(model, { sample, globalBatch: 4, gpu: '1GB', gpus: 2, optimizer: 'adam', engines: ['deepspeed'], zero: 3 });
    expect(third.layouts.map((l) => `${l.dp} ${l.engine} ${l.zero}`)).toEqual(['1 single null', '2 deepspeed 3']);
    // By default every engine is tried, DeepSpeed's three stages among them.
    expect(
      plan(model, { sample, globalBatch: 2, gpu: '1GB', gpus: 2, optimizer: 'adam' })
        .layouts.filter((l) => l.dp === 2)
        .map((l) => `${l.engine}${l.zero ?? ''}`),
    ).toEqual(['fsdp2', 'zero-redundancy', 'ddp', 'deepspeed1', 'deepspeed2', 'deepspeed3']);
  });

  it('tries tensor parallelism with the model built as one rank of each size', () => {
    const config = {
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 128,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 256,
    };
    const build = (size: number) => fromHFConfig(config, size > 1 ? { tensorParallel: { size } } : {});
    const r = plan(build(1), {
      sample: [64],
      globalBatch: 4,
      gpu: '4MB',
      gpus: 2,
      optimizer: 'adam',
      engines: ['ddp'],
      tensorParallel: { sizes: [1, 2], model: build },
    });
    const tp = r.layouts.filter((l) => l.tp === 2);
    expect(tp.map((l) => [l.dp, l.pp, l.engine])).toEqual([[1, 1, 'single']]);
    const layout = tp[0]!;
    const micro = layout.fits ? layout.microBatch : 1;
    expect(layout.peak).toBe(
      estimate(build(2), { input: [micro, 64], optimizer: 'adam', microBatches: 4 / micro, timeline: false, parallel: { dp: 1, tp: 2 } }).bytes.peak,
    );
    // On 4 GPUs, two TP replicas under FSDP2 (the 2-D layout measured), only when FSDP2 is tried.
    const four = plan(build(1), {
      sample: [64],
      globalBatch: 4,
      gpu: '4MB',
      gpus: 4,
      optimizer: 'adam',
      engines: ['fsdp2'],
      tensorParallel: { sizes: [2], model: build },
    });
    const twoD = four.layouts.find((l) => l.tp === 2 && l.dp === 2)!;
    expect(twoD.engine).toBe('fsdp2');
    const m2 = twoD.fits ? twoD.microBatch : 1;
    expect(twoD.peak).toBe(
      Math.max(
        ...estimateRanks(build(2), {
          input: [m2, 64],
          optimizer: 'adam',
          microBatches: 2 / m2,
          timeline: false,
          parallel: { engine: 'fsdp2', dp: 2, tp: 2 },
        }).map((x) => x.peak as number),
      ),
    );
    expect(
      plan(build(1), {
        sample: [64],
        globalBatch: 4,
        gpu: '4MB',
        gpus: 4,
        optimizer: 'adam',
        engines: ['ddp'],
        tensorParallel: { sizes: [2], model: build },
      }).layouts.some((l) => l.tp === 2 && l.dp === 2),
    ).toBe(false);
  });

  it('tries context parallelism with the model built as one rank of each size, the engine over dp × cp ranks', () => {
    const config = {
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 128,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 256,
    };
    const build = (size: number) => fromHFConfig(config, { attention: 'sdpa', ...(size > 1 ? { contextParallel: { size } } : {}) });
    const r = plan(build(1), {
      sample: [96],
      globalBatch: 2,
      gpu: '16MB',
      gpus: 4,
      optimizer: 'adam',
      engines: ['fsdp2'],
      framework: 'torch-2',
      contextParallel: { sizes: [2, 3, 4], model: build },
    });
    // 96 tokens cut into 2·cp equal pieces: 4, 6 and 8 pieces all divide; dp · cp within 4 GPUs.
    const cp = r.layouts.filter((l) => l.cp > 1);
    expect(cp.map((l) => `${l.dp}×${l.cp}`)).toEqual(['1×2', '2×2', '1×3', '1×4']);
    for (const layout of cp) {
      expect(gpusOf(layout)).toBe(layout.dp * layout.cp);
      const micro = layout.fits ? layout.microBatch : 1;
      const ranks = estimateRanks(build(layout.cp), {
        input: [micro, 96],
        optimizer: 'adam',
        framework: 'torch-2',
        microBatches: 2 / layout.dp / micro,
        timeline: false,
        parallel: { engine: 'fsdp2', dp: layout.dp, cp: layout.cp },
      });
      expect(ranks).toHaveLength(layout.dp * layout.cp);
      expect(layout.peak).toBe(Math.max(...ranks.map((x) => x.peak as number)));
    }
    // A sequence 2·cp does not divide is skipped.
    expect(
      plan(build(1), {
        sample: [20],
        globalBatch: 1,
        gpu: '16MB',
        gpus: 4,
        engines: ['fsdp2'],
        framework: 'torch-2',
        contextParallel: { sizes: [4], model: build },
      }).layouts.every((l) => l.cp === 1),
    ).toBe(true);
  });

  it('bad job sizes are errors with their path', () => {
    expect(() => plan(model, { sample, globalBatch: 0, gpu: '1GB', gpus: 4 })).toThrowError(
      expect.objectContaining({ issues: [expect.objectContaining({ path: ['globalBatch'] })] }),
    );
    expect(() => plan(model, { sample: [0], globalBatch: 4, gpu: '1GB', gpus: 2 })).toThrowError(
      expect.objectContaining({ issues: [expect.objectContaining({ path: ['sample', 0] })] }),
    );
    expect(() => plan(model, { sample, globalBatch: 4, gpu: '1GB', gpus: 1.5 })).toThrowError(
      expect.objectContaining({ issues: [expect.objectContaining({ path: ['gpus'] })] }),
    );
  });

  it('checks its options at run time: null, non-finite sizes, wrong types and unknown keys are errors with their path', () => {
    const job = { sample, globalBatch: 4, gpu: '1GB', gpus: 2 };
    const pathOf = (options: unknown) => errorOf(() => plan(model, options as never)).issues.map((i) => i.path);
    // null and a string of engines were TypeErrors; a parallel plan, NaN sizes, and a model that is no function went unnoticed.
    expect(pathOf(null)).toEqual([[]]);
    expect(pathOf({ ...job, gpus: Infinity })).toEqual([['gpus']]);
    expect(pathOf({ ...job, globalBatch: Infinity })).toEqual([['globalBatch']]);
    expect(pathOf({ ...job, pipelines: null })).toEqual([['pipelines']]);
    expect(pathOf({ ...job, pipelines: [] })).toEqual([['pipelines']]);
    expect(pathOf({ ...job, engines: 'fsdp2' })).toEqual([['engines']]);
    expect(pathOf({ ...job, engines: ['fsdp3'] })).toEqual([['engines', 0]]);
    expect(pathOf({ ...job, zero: 4 })).toEqual([['zero']]);
    expect(pathOf({ ...job, mode: 'inference' })).toEqual([['mode']]);
    expect(pathOf({ ...job, tensorParallel: { sizes: [Number.NaN], model: () => model } })).toEqual([['tensorParallel', 'sizes', 0]]);
    expect(pathOf({ ...job, contextParallel: { sizes: [2], model: 'llama' } })).toEqual([['contextParallel', 'model']]);
    const parallel = errorOf(() => plan(model, { ...job, parallel: { dp: 2 } } as never)).issues[0]!;
    expect([parallel.path, parallel.code]).toEqual([['parallel'], 'unknown-option']);
    expect(parallel.message).toContain('plan lays out the ranks itself');
    expect(pathOf({ sample, gpu: '1GB', gpus: 2, globalBach: 4 })).toEqual([['globalBach'], ['globalBatch']]);
  });

  it('refuses huge GPU counts and searches at once, naming what to narrow', () => {
    const start = performance.now();
    // A thousand trillion GPUs looped over every data-parallel size forever.
    expect(errorOf(() => plan(model, { sample, globalBatch: 16, gpu: '80GB', gpus: 1e15 })).issues[0]!.path).toEqual(['gpus']);
    expect(errorOf(() => plan(model, { sample, globalBatch: 16, gpu: '80GB', gpus: 1_000_000 })).issues[0]!.path).toEqual(['gpus']);
    // 1,024 GPUs and a batch of 1,024: every rank of every engine's layouts would be thousands of estimates.
    const wide = errorOf(() => plan(model, { sample, globalBatch: 1024, gpu: '80GB', gpus: 1024 })).issues[0]!;
    expect([wide.path, wide.code]).toEqual([['gpus'], 'too-many-ranks']);
    expect(wide.expected).toContain('fewer engines');
    expect(performance.now() - start).toBeLessThan(2000);
  });

  it('splits a share into at most LIMITS.microBatches micro-batches (a prime batch was an error at microBatches, after a billion trials)', () => {
    const start = performance.now();
    const r = plan(model, { sample, globalBatch: 999_999_937, gpu: '1GB', gpus: 1 });
    expect(r.fewest).toBeUndefined();
    expect(r.layouts.map((l) => [l.engine, l.fits])).toEqual([['single', false]]);
    expect(performance.now() - start).toBeLessThan(2000);
  });
});

describe('gpusOf', () => {
  it('checks the layout: null, sizes that are not counts, unknown keys and products past 2^53', () => {
    expect(errorOf(() => gpusOf(null as never)).issues[0]!.path).toEqual(['layout']);
    expect(errorOf(() => gpusOf({ dp: '2', pp: 1, tp: 1, cp: 1 } as never)).issues[0]!.path).toEqual(['layout', 'dp']);
    expect(errorOf(() => gpusOf({ dp: 2, pp: 1, tp: 1 } as never)).issues[0]!.path).toEqual(['layout', 'cp']);
    expect(errorOf(() => gpusOf({ dp: 2, pp: 1, tp: 1, cp: 1, ep: 4 } as never)).issues[0]!.path).toEqual(['layout', 'ep']);
    expect(errorOf(() => gpusOf({ dp: 2 ** 30, pp: 2 ** 30, tp: 1, cp: 1 })).issues[0]!.path).toEqual(['layout']);
    const layout = plan(model, { sample, globalBatch: 4, gpu: '1GB', gpus: 2 }).layouts[0]!;
    expect(gpusOf(layout)).toBe(layout.dp);
  });
});
