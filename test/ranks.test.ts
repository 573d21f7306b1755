import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, estimateRanks, type Engine } from '../src/index.js';
import { errorOf } from './helpers/errors.js';
import { seqFromSpecs } from './helpers/layer-spec.js';
import { randomModel } from './helpers/random-models.js';

describe('estimateRanks', () => {
  it("gives each rank what estimate gives for that rank; DDP's ranks are alike", () => {
    fc.assert(
      fc.property(randomModel, fc.constantFrom<Engine>('ddp', 'zero-redundancy', 'fsdp2'), fc.integer({ min: 2, max: 6 }), (m, engine, dp) => {
        const model = seqFromSpecs(m.layers);
        const options = { input: m.input, optimizer: 'adam' as const, timeline: false };
        const ranks = estimateRanks(model, { ...options, parallel: { engine, dp } });
        expect(ranks.map((r) => r.rank)).toEqual(Array.from({ length: dp }, (_, i) => i));
        for (const r of ranks) {
          const own = estimate(model, { ...options, parallel: { engine, dp, rank: r.rank } });
          expect([r.peak, r.parameters, r.gradients, r.optimizer]).toEqual([own.bytes.peak, own.bytes.parameters, own.bytes.gradients, own.bytes.optimizer]);
        }
      }),
      { numRuns: 25 },
    );
  });

  it("the ranks of a ZeroRedundancyOptimizer job split the state: their sum is one GPU's", () => {
    const model = seqFromSpecs([
      ['linear', { out: 256 }],
      ['relu', {}],
      ['linear', { out: 10 }],
    ]);
    const ranks = estimateRanks(model, { input: [8, 1000], optimizer: 'adam', parallel: { engine: 'zero-redundancy', dp: 2 } });
    // Greedy by size: the 1000×256 weight alone on rank 0, the rest on rank 1 (Adam: 8 B per element).
    expect(ranks.map((r) => r.optimizer)).toEqual([1000 * 256 * 8, (256 + 256 * 10 + 10) * 8]);
  });

  it('a pipeline job: every stage under every data-parallel rank, each as estimate gives it', () => {
    const layers: [string, object][] = [];
    for (let i = 0; i < 4; i += 1) layers.push(['linear', { out: 64 }], ['relu', {}]);
    const model = seqFromSpecs([...layers, ['linear', { out: 10 }]] as never);
    const options = { input: [8, 64], optimizer: 'adam', microBatches: 4 } as const;
    const ranks = estimateRanks(model, { ...options, parallel: { engine: 'ddp', dp: 2, pp: 2 } });
    expect(ranks.map((r) => [r.rank, r.stage, r.dpRank])).toEqual([
      [0, 0, 0],
      [1, 0, 1],
      [2, 1, 0],
      [3, 1, 1],
    ]);
    for (const r of ranks)
      expect(r.peak).toBe(estimate(model, { ...options, parallel: { engine: 'ddp', dp: 2, pp: 2, stage: r.stage, rank: r.dpRank } }).bytes.peak);
    // The stages split the parameters.
    expect((ranks[0]!.parameters as number) + (ranks[2]!.parameters as number)).toBe(estimate(model, options).bytes.parameters);
  });

  it('checks its options before any rank: null, a pipeline size that is not a count, a rank of its own', () => {
    const model = seqFromSpecs([['linear', { out: 4 }]]);
    expect(errorOf(() => estimateRanks(model, null as never)).issues[0]!.path).toEqual([]);
    // Infinity stages was a RangeError (an array that long), a string none at all (an empty list).
    for (const pp of [Infinity, '2', -1, Number.NaN])
      expect(errorOf(() => estimateRanks(model, { input: [1, 4], parallel: { engine: 'ddp', dp: 2, pp: pp as never } })).issues[0]!.path).toEqual([
        'parallel',
        'pp',
      ]);
    expect(errorOf(() => estimateRanks(model, { input: [1, 4], parallel: { engine: 'ddp', dp: Infinity } })).issues[0]!.path).toEqual(['parallel', 'dp']);
    // Every rank is listed: a rank (or stage) in the plan would be ignored.
    const ranked = errorOf(() => estimateRanks(model, { input: [1, 4], parallel: { engine: 'ddp', dp: 2, rank: 1 } })).issues[0]!;
    expect([ranked.path, ranked.code]).toEqual([['parallel', 'rank'], 'bad-option']);
  });

  it('refuses a job of more ranks than LIMITS.ranks at once, at its widest size', () => {
    const model = seqFromSpecs([['linear', { out: 4 }]]);
    const start = performance.now();
    // A million FSDP2 ranks, each estimated, ran out of memory after minutes.
    const wide = errorOf(() => estimateRanks(model, { input: [1, 4], parallel: { engine: 'fsdp2', dp: 1_000_000 } })).issues[0]!;
    expect([wide.path, wide.code, wide.expected]).toEqual([['parallel', 'dp'], 'too-many-ranks', 'at most 1024 ranks']);
    const deep = errorOf(() => estimateRanks(model, { input: [8, 4], microBatches: 8, parallel: { engine: 'ddp', dp: 2, pp: 1000 } })).issues[0]!;
    expect(deep.path).toEqual(['parallel', 'pp']);
    expect(performance.now() - start).toBeLessThan(2000);
    expect(estimateRanks(model, { input: [1, 4], parallel: { engine: 'ddp', dp: 1024 } })).toHaveLength(1024);
  });

  it('without a plan: an error at options.parallel', () => {
    const model = seqFromSpecs([['linear', { out: 4 }]]);
    expect(() => estimateRanks(model, { input: [1, 4] })).toThrowError(expect.objectContaining({ issues: [expect.objectContaining({ path: ['parallel'] })] }));
  });
});
