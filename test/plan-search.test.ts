/**
 * Issue 25, item 2: the planner's search made cheaper without changing its answers — traces
 * shared across ranks and layouts, ranks with equal figures weighed once, accumulation past three
 * micro-batches weighed as three, and a search that stops at the fewest GPUs.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, estimateRanks, linear, llm, plan, relu, seq, type PlanOptions } from '../src/index.js';
import { withTraces } from '../src/estimate.js';
import { ACCUMULATION_CAP } from '../src/plan.js';
import { rankPeaks } from '../src/ranks.js';
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
