/**
 * Issue 25, item 2: the planner's search made cheaper without changing its answers — traces
 * shared across ranks and layouts, ranks with equal figures weighed once, accumulation past three
 * micro-batches weighed as three, and a search that stops at the fewest GPUs.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, estimateRanks, linear, llm, plan, relu, seq, sym, type PlanOptions } from '../src/index.js';
import { withTraces } from '../src/estimate.js';
import { ACCUMULATION_CAP } from '../src/plan.js';
import { groupPeaks, rankPeaks } from '../src/ranks.js';
import { cli } from './helpers/cli.js';
import { planCases } from './helpers/plan-cases.js';
import * as lib from '../src/index.js';

const uneven = seq(linear({ out: 4095 }), relu(), linear({ out: 4097 }), relu(), linear({ out: 10 }));
const qwen = llm('qwen2.5-0.5b');
const layers = { modules: Array.from({ length: 24 }, (_, i) => `model.layers.${i}`) };

describe("the search's answers are today's", () => {
  it('equal the layouts the search gave before it was made faster (test/fixtures/plan/before-25.json, tools/plan_cases.ts)', () => {
    const before = JSON.parse(readFileSync(new URL('./fixtures/plan/before-25.json', import.meta.url), 'utf8')) as Record<string, unknown>;
    const cases = planCases(lib);
    expect(Object.keys(cases)).toEqual(Object.keys(before));
    for (const [name, run] of Object.entries(cases)) expect(JSON.parse(JSON.stringify(run())), name).toEqual(before[name]);
  }, 120_000);
});

describe('laws the faster search stands on', () => {
  const engines = [
    { engine: 'fsdp2' },
    { engine: 'fsdp2', gradientSync: 'last' },
    { engine: 'ddp' },
    { engine: 'zero-redundancy' },
    { engine: 'deepspeed', zero: 1 },
    { engine: 'deepspeed', zero: 2 },
    { engine: 'deepspeed', zero: 3 },
  ] as const;

  it(`without pipeline stages, the peak of m ≥ ${ACCUMULATION_CAP} micro-batches is that of ${ACCUMULATION_CAP}, on every engine and rank`, () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...engines),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: ACCUMULATION_CAP, max: 24 }),
        fc.integer({ min: 1, max: 64 }),
        fc.constantFrom('adam', 'sgd_momentum', 'adamw'),
        (plan, dp, rank, m, batch, optimizer) => {
          const options = { input: [batch, 777], optimizer, timeline: false, parallel: { ...plan, dp, rank: rank % dp } } as const;
          return estimate(uneven, { ...options, microBatches: m }).bytes.peak === estimate(uneven, { ...options, microBatches: ACCUMULATION_CAP }).bytes.peak;
        },
      ),
      { numRuns: 60 },
    );
  }, 120_000);

  it('the same law on a decoder in bf16, with and without checkpointing', () => {
    for (const plan of engines)
      for (const checkpoint of [undefined, layers]) {
        const options = {
          input: [1, 512],
          precision: 'bf16',
          optimizer: 'adamw',
          timeline: false,
          ...(checkpoint !== undefined ? { checkpoint } : {}),
          parallel: { ...plan, dp: 4, rank: 3 },
        } as const;
        const peak = (m: number) => estimate(qwen, { ...options, microBatches: m }).bytes.peak;
        expect(peak(7), JSON.stringify(plan)).toBe(peak(ACCUMULATION_CAP));
      }
  }, 120_000);

  it("rankPeaks equals estimateRanks' peaks: ranks an engine's rankKey says are alike are weighed once", () => {
    fc.assert(
      fc.property(fc.constantFrom(...engines), fc.integer({ min: 2, max: 12 }), fc.integer({ min: 1, max: 3 }), (plan, dp, m) => {
        const options = { input: [2, 300], optimizer: 'adam', microBatches: m, timeline: false, parallel: { ...plan, dp } } as const;
        const exact = estimateRanks(uneven, options).map((r) => ({ rank: r.rank, peak: r.peak }));
        return JSON.stringify(rankPeaks(uneven, options)) === JSON.stringify(exact);
      }),
      { numRuns: 40 },
    );
  }, 120_000);

  it('rankPeaks with a budget stops at the first rank past it', () => {
    const options = { input: [2, 300], optimizer: 'adam', timeline: false, parallel: { engine: 'zero-redundancy', dp: 6 } } as const;
    const all = rankPeaks(uneven, options);
    const budget = Math.min(...all.map((r) => r.peak)) - 1;
    expect(rankPeaks(uneven, options, budget)).toEqual(all.slice(0, 1));
    expect(rankPeaks(uneven, options, Math.max(...all.map((r) => r.peak)))).toEqual(all);
  });

  it('a symbolic input is a trace key too (its bounds part of it): the micro-batch solves of a search trace each bound once', () => {
    const at = (max: number) => ({ input: [sym('B', { max }), 300], optimizer: 'adam' }) as const;
    withTraces(() => {
      expect(estimate(uneven, at(8)).ir).toBe(estimate(uneven, at(8)).ir);
      expect(estimate(uneven, at(8)).ir).not.toBe(estimate(uneven, at(16)).ir);
    });
  });

  it('traces are kept only while a search runs', () => {
    const options = { input: [2, 300], optimizer: 'adam' } as const;
    expect(estimate(uneven, options).ir).not.toBe(estimate(uneven, options).ir);
    withTraces(() => {
      expect(estimate(uneven, options).ir).toBe(estimate(uneven, options).ir);
      // Another input, another trace.
      expect(estimate(uneven, { ...options, input: [3, 300] }).ir).not.toBe(estimate(uneven, options).ir);
    });
    expect(estimate(uneven, options).ir).not.toBe(estimate(uneven, options).ir);
  });
});

describe('one run for every rank of the group (a rank family): each rank its own blocks, the same peaks', () => {
  const widths = fc.array(fc.integer({ min: 1, max: 400 }), { minLength: 1, maxLength: 5 });
  const modelOf = (outs: readonly number[]) => seq(...outs.flatMap((out) => [linear({ out }), relu()]), linear({ out: 10 }));
  const exactPeaks = (model: ReturnType<typeof modelOf>, options: Parameters<typeof estimateRanks>[1]) => estimateRanks(model, options).map((r) => r.peak);

  it('ZeRO-1/2: one run where nothing is offloaded and the gradient is cast (stage 1 gradients over the bucket size included)', () => {
    let families = 0;
    fc.assert(
      fc.property(
        widths,
        fc.constantFrom(1, 2),
        fc.integer({ min: 2, max: 70 }),
        fc.integer({ min: 1, max: 3 }),
        fc.constantFrom(50, 1000, 20_000, 500_000_000),
        fc.boolean(),
        fc.constantFrom('bfloat16', 'float16', 'float32'),
        fc.integer({ min: 1, max: 8 }),
        (outs, zero, dp, m, reduceBucketSize, overlapComm, dtype, batch) => {
          const model = modelOf(outs);
          const options = {
            input: [batch, 64],
            dtype,
            optimizer: 'adamw',
            microBatches: m,
            timeline: false,
            parallel: { engine: 'deepspeed', zero, dp, deepspeed: { reduceBucketSize, overlapComm } },
          } as const;
          const group = groupPeaks(model, options);
          const family = dtype !== 'float32';
          expect('peaks' in group, JSON.stringify({ outs, zero, dtype, reduceBucketSize })).toBe(family);
          if ('peaks' in group) families += 1;
          return (
            JSON.stringify('peaks' in group ? group.peaks : [group.first.bytes.peak]) ===
            JSON.stringify(family ? exactPeaks(model, options) : exactPeaks(model, options).slice(0, 1))
          );
        },
      ),
      { numRuns: 60 },
    );
    expect(families).toBeGreaterThan(10);
  }, 120_000);

  it('ZeroRedundancyOptimizer: every optimizer and implementation, each rank stepping its own partition', () => {
    fc.assert(
      fc.property(
        widths,
        fc.integer({ min: 2, max: 40 }),
        fc.integer({ min: 1, max: 3 }),
        fc.constantFrom('adam', 'adamw', 'sgd', 'sgd_momentum', 'lion', 'adafactor'),
        fc.constantFrom('for-loop', 'foreach'),
        fc.constantFrom('bfloat16', 'float32'),
        (outs, dp, m, name, impl, dtype) => {
          const model = modelOf(outs);
          const options = {
            input: [4, 64],
            dtype,
            optimizer: { name, impl },
            microBatches: m,
            timeline: false,
            parallel: { engine: 'zero-redundancy', dp },
          } as const;
          const group = groupPeaks(model, options);
          return 'peaks' in group && JSON.stringify(group.peaks) === JSON.stringify(exactPeaks(model, options));
        },
      ),
      { numRuns: 40 },
    );
  }, 120_000);

  it('on the decoder the plan weighs: Qwen2.5-0.5B, 16 ranks, ZeRO-1 (HF auto buckets too), ZeRO-2 and ZeroRedundancyOptimizer', () => {
    for (const parallel of [
      { engine: 'deepspeed', zero: 1, dp: 16 },
      // Stage 1 with gradients over the bucket size (the embedding and every projection): kept by the ranks outside them.
      { engine: 'deepspeed', zero: 1, dp: 16, deepspeed: { reduceBucketSize: 802_816 } },
      { engine: 'deepspeed', zero: 2, dp: 16, deepspeed: { reduceBucketSize: 802_816 } },
      { engine: 'zero-redundancy', dp: 16 },
    ] as const) {
      const options = { input: [1, 2048], precision: 'bf16', optimizer: 'adamw', microBatches: 2, timeline: false, parallel } as const;
      const group = groupPeaks(qwen, options);
      expect('peaks' in group && group.peaks, JSON.stringify(parallel)).toEqual(exactPeaks(qwen as never, options));
    }
  }, 120_000);
});

describe('fewestOnly', () => {
  const jobs: [string, PlanOptions, typeof uneven][] = [
    ['uneven MLP', { optimizer: 'adam', sample: [4096], globalBatch: 60, gpu: '300MB', gpus: 10 }, uneven],
    ['uneven MLP, nothing fits', { optimizer: 'adam', sample: [4096], globalBatch: 60, gpu: '100MB', gpus: 6 }, uneven],
    ['uneven MLP, pipelines', { optimizer: 'adam', sample: [4096], globalBatch: 24, gpu: '300MB', gpus: 6, pipelines: [1, 2, 3] }, uneven],
  ];
  it.each(jobs)('%s: the same fewest as the full search, from the layouts of the smallest GPU counts only', (_, options, model) => {
    const full = plan(model, options);
    const quick = plan(model, { ...options, fewestOnly: true });
    expect(quick.fewest).toEqual(full.fewest);
    const key = (l: (typeof full.layouts)[number]) => JSON.stringify([l.engine, l.zero, l.dp, l.pp, l.tp, l.cp, l.checkpointing]);
    const fullByKey = new Map(full.layouts.map((l) => [key(l), l]));
    for (const l of quick.layouts) expect(l).toEqual(fullByKey.get(key(l)));
    if (full.fewest !== undefined) {
      const most = Math.max(...quick.layouts.map((l) => l.dp * l.pp * l.tp * l.cp));
      expect(most).toBe(full.fewest.dp * full.fewest.pp * full.fewest.tp * full.fewest.cp);
      expect(quick.layouts.length).toBeLessThanOrEqual(full.layouts.length);
    } else expect(quick.layouts.length).toBe(full.layouts.length);
  });
  it('is a boolean', () => {
    expect(() => plan(uneven, { ...jobs[0]![1], fewestOnly: 'yes' as never })).toThrow(/fewestOnly/);
  });
  it('vram-ts plan --fewest: the same verdict line, the table of the layouts weighed', () => {
    const args = ['plan', 'mobilenet_v3_small', '--gpu', '4GB', '--gpus', '8', '--global-batch', '64', '--input', '3x512x512', '--classes', '3'];
    const full = cli(...args).out;
    const quick = cli(...args, '--fewest').out;
    const verdict = (out: string) => out.split('\n').find((line) => line.startsWith('Fewest GPUs') || line.startsWith('No layout'));
    expect(verdict(quick)).toBeDefined();
    expect(verdict(quick)).toBe(verdict(full));
    expect(quick.split('\n').length).toBeLessThan(full.split('\n').length);
    expect(cli('estimate', 'mobilenet_v3_small', '--fewest').err).toMatch(/--fewest/);
  });
});
