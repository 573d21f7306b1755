/**
 * Hostile arguments of the reports (issue 23): each is a VramError whose issues carry the
 * argument's path, never a TypeError from deep inside, a NaN printed, or a copy read as an estimate.
 */
import { describe, expect, it } from 'vitest';
import {
  breakdownSvg,
  estimate,
  estimateToJSON,
  explain,
  formatBreakdown,
  formatBreakdownMarkdown,
  formatBytes,
  formatCount,
  formatExplain,
  formatTorchinfo,
  formatTorchsummary,
  fromHFConfig,
  linear,
  mul,
  relu,
  seq,
  sym,
  timelineSvg,
  traceModel,
  type Estimate,
  type ExplainTerm,
} from '../../src/index.js';
import { isEstimate, isTraced } from '../../src/estimate.js';
import { errorOf } from '../helpers/errors.js';

/** The issues of the VramError a call throws, as `path:code`. */
const issues = (f: () => unknown) => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);

const model = seq(linear({ out: 8 }), relu(), linear({ out: 4 }));
const result = estimate(model, { input: [2, 8] });
const ir = traceModel(model, { input: [2, 8] });
const tinyLlama = fromHFConfig({
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 96,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  num_hidden_layers: 5,
  vocab_size: 64,
  max_position_embeddings: 2048,
});

/** Look-alikes of an estimate: what a hostile or careless caller passes instead. */
const LOOK_ALIKES: readonly [string, unknown][] = [
  ['undefined', undefined],
  ['null', null],
  ['a number', 42],
  ['a string', 'estimate'],
  ['an empty object', {}],
  ['an array', []],
  ['a spread copy', { ...result }],
  ['a JSON copy', JSON.parse(JSON.stringify(estimateToJSON(result)))],
  ['a model', model],
];

describe('reports of an estimate take results of estimate() only', () => {
  const reports: [string, (r: Estimate) => unknown][] = [
    ['formatBreakdown', formatBreakdown],
    ['formatBreakdownMarkdown', formatBreakdownMarkdown],
    ['explain', explain],
    ['estimateToJSON', estimateToJSON],
  ];
  for (const [name, report] of reports) {
    it(`${name}: anything else is a VramError at ${name}.result`, () => {
      for (const [what, value] of LOOK_ALIKES)
        expect(
          issues(() => report(value as Estimate)),
          what,
        ).toEqual([`${name}.result:bad-argument`]);
      expect(errorOf(() => report(null as never)).message).toMatch(/must be a result of estimate\(\)/);
    });
  }

  it('every estimate() route makes results the reports take: reduced blocks, symbolic inputs, inference, pipeline stages', () => {
    const routes = [
      result,
      estimate(tinyLlama, { input: [1, 16] }),
      estimate(tinyLlama, { input: [1, 16], mode: 'inference' }),
      estimate(model, { input: [sym('B'), 8] }),
      estimate(seq(linear({ out: 8 }), relu(), linear({ out: 8 }), relu()), {
        input: [4, 8],
        device: 'cpu',
        microBatches: 2,
        parallel: { dp: 1, pp: 2, stage: 1 },
      } as never),
    ];
    for (const r of routes) {
      expect(isEstimate(r)).toBe(true);
      expect(isTraced(r.ir)).toBe(true);
      expect(formatBreakdown(r)).toContain('What is held');
      expect(formatBreakdownMarkdown(r)).toContain('| --- |');
      expect(formatExplain(explain(r))).toContain('parameters');
      expect(JSON.stringify(estimateToJSON(r))).toContain('"params"');
    }
    expect(isEstimate({ ...result })).toBe(false);
    expect(isTraced(ir)).toBe(true);
    expect(isTraced({ ...ir })).toBe(false);
  });
});

describe('torchsummary and torchinfo take an IR of traceModel() and their own options', () => {
  it('a look-alike IR is a VramError at .ir; an estimate is pointed to its .ir', () => {
    for (const [what, value] of [...LOOK_ALIKES, ['a spread IR', { ...ir }] as const]) {
      expect(
        issues(() => formatTorchsummary(value as never)),
        what,
      ).toEqual(['formatTorchsummary.ir:bad-argument']);
      expect(
        issues(() => formatTorchinfo(value as never)),
        what,
      ).toEqual(['formatTorchinfo.ir:bad-argument']);
    }
    expect(errorOf(() => formatTorchsummary(result as never)).message).toMatch(/pass its \.ir/);
    expect(formatTorchsummary(result.ir)).toContain('Total params: 108');
    expect(formatTorchinfo(ir)).toContain('Total params: 108');
  });

  it('options: unknown keys with the closest one, wrong values, holes in the columns', () => {
    expect(issues(() => formatTorchsummary(ir, null as never))).toEqual(['formatTorchsummary.options:bad-option']);
    expect(issues(() => formatTorchsummary(ir, { batchsize: 2 } as never))).toEqual(['formatTorchsummary.options.batchsize:unknown-option']);
    expect(errorOf(() => formatTorchsummary(ir, { batchsize: 2 } as never)).message).toMatch(/did you mean "batchSize"/);
    expect(issues(() => formatTorchsummary(ir, { variant: 'mastr' } as never))).toEqual(['formatTorchsummary.options.variant:bad-option']);
    expect(issues(() => formatTorchsummary(ir, { batchSize: Number.NaN }))).toEqual(['formatTorchsummary.options.batchSize:bad-option']);
    expect(issues(() => formatTorchinfo(ir, { depth: -1 }))).toEqual(['formatTorchinfo.options.depth:bad-option']);
    expect(issues(() => formatTorchinfo(ir, { colWidth: Number.POSITIVE_INFINITY }))).toEqual(['formatTorchinfo.options.colWidth:bad-option']);
    // biome-ignore lint/suspicious/noSparseArray: the hole is the point.
    expect(issues(() => formatTorchinfo(ir, { columns: ['output_size', , 'num_params'] as never }))).toEqual([
      'formatTorchinfo.options.columns.1:bad-argument',
    ]);
    expect(issues(() => formatTorchinfo(ir, { columns: ['output_sise'] as never }))).toEqual(['formatTorchinfo.options.columns.0:bad-option']);
  });
});

describe('formatExplain takes terms as explain() makes them', () => {
  const terms = explain(result);
  const first = terms[0]!;

  it('filtered or hand-made terms format; the limit is an integer >= 0', () => {
    expect(
      formatExplain(
        terms.filter((t) => t.figure !== 'peak'),
        0,
      ),
    ).toContain('more:');
    expect(formatExplain([{ figure: 'mine', bytes: mul(sym('B'), 4), derivation: 'by hand', parts: [] }])).toBe('mine: 4·B B (4·B B) — by hand\n');
    expect(issues(() => formatExplain(terms, -1))).toEqual(['formatExplain.limit:bad-option']);
    expect(issues(() => formatExplain(terms, Number.NaN))).toEqual(['formatExplain.limit:bad-option']);
  });

  it('anything else is a VramError at the first bad term', () => {
    expect(issues(() => formatExplain(null as never))).toEqual(['formatExplain.terms:bad-argument']);
    expect(issues(() => formatExplain('terms' as never))).toEqual(['formatExplain.terms:bad-argument']);
    expect(issues(() => formatExplain([null] as never))).toEqual(['formatExplain.terms.0:bad-argument']);
    expect(issues(() => formatExplain([{ ...first, bytes: -1 }]))).toEqual(['formatExplain.terms.0.bytes:bad-dimension']);
    expect(issues(() => formatExplain([{ ...first, bytes: Number.NaN }]))).toEqual(['formatExplain.terms.0.bytes:bad-dimension']);
    expect(issues(() => formatExplain([{ ...first, figure: undefined } as never]))).toEqual(['formatExplain.terms.0.figure:bad-option']);
    expect(issues(() => formatExplain([{ ...first, parts: [null] } as never]))).toEqual(['formatExplain.terms.0.parts.0:bad-argument']);
    const holes: ExplainTerm[] = [];
    holes[1] = first;
    expect(issues(() => formatExplain(holes))).toEqual(['formatExplain.terms.0:bad-argument']);
    const huge = new Array(2 ** 32 - 1) as ExplainTerm[];
    expect(issues(() => formatExplain(huge))).toEqual(['formatExplain.terms:bad-argument']);
  });
});

describe('charts', () => {
  it('take an estimate, or what they read of one (a timeline or a peak made by hand), checked', () => {
    for (const [what, value] of LOOK_ALIKES.slice(0, 6)) {
      expect(issues(() => timelineSvg(value as Estimate))[0], what).toMatch(/^timelineSvg\.result(\.timeline)?:bad-argument$/);
      expect(issues(() => breakdownSvg(value as Estimate))[0], what).toMatch(/^breakdownSvg\.result(\.peak)?:bad-argument$/);
    }
    const event = result.timeline[0]!;
    const fake = (e: unknown) => ({ timeline: [event, e] }) as unknown as Estimate;
    expect(timelineSvg(fake(event))).toMatch(/^<svg/);
    expect(issues(() => timelineSvg(fake({ ...event, live: Number.NaN })))).toEqual(['timelineSvg.result.timeline.1.live:bad-dimension']);
    expect(issues(() => timelineSvg(fake({ ...event, byCategory: { ...event.byCategory, activations: -5 } })))).toEqual([
      'timelineSvg.result.timeline.1.byCategory.activations:bad-dimension',
    ]);
    expect(issues(() => timelineSvg(fake({ ...event, phase: 3 })))).toEqual(['timelineSvg.result.timeline.1.phase:bad-option']);
    expect(issues(() => timelineSvg({ timeline: new Array(2 ** 32 - 1) } as never))).toEqual(['timelineSvg.result.timeline:bad-argument']);
    expect(issues(() => breakdownSvg({ peak: { ...result.peak, bytes: Number.POSITIVE_INFINITY } } as never))).toEqual([
      'breakdownSvg.result.peak.bytes:bad-dimension',
    ]);
    expect(breakdownSvg({ peak: { bytes: 100, phase: 'forward', byCategory: result.peak.byCategory } } as never)).toMatch(/^<svg/);
  });

  it('options: a title, or known keys with a capacity of at least 1 byte and columns >= 1', () => {
    expect(issues(() => timelineSvg(result, { capacity: Number.NaN }))).toEqual(['timelineSvg.options.capacity:bad-option']);
    expect(issues(() => breakdownSvg(result, { capacity: 0.5 }))).toEqual(['breakdownSvg.options.capacity:bad-option']);
    expect(issues(() => timelineSvg(result, { maxColumns: 0.5 }))).toEqual(['timelineSvg.options.maxColumns:bad-option']);
    expect(issues(() => timelineSvg(result, { capacit: 2 ** 30 } as never))).toEqual(['timelineSvg.options.capacit:unknown-option']);
    expect(errorOf(() => timelineSvg(result, { capacit: 2 ** 30 } as never)).message).toMatch(/did you mean "capacity"/);
    expect(issues(() => breakdownSvg(result, 42 as never))).toEqual(['breakdownSvg.options:bad-option']);
    expect(breakdownSvg(result, 'mine')).toContain('<title>mine</title>');
  });
});

describe('formatBytes and formatCount', () => {
  it('formatBytes: finite sizes >= 0 (fractions too) in binary units up to YiB, expressions as they are', () => {
    expect(formatBytes(2 ** 80)).toBe('1.00 YiB');
    expect(formatBytes(2 ** 90)).toBe('1024.00 YiB');
    expect(formatBytes(2 ** 50)).toBe('1.00 PiB');
    expect(formatBytes(0.5)).toBe('0.5 B');
    expect(formatBytes(-0)).toBe('0 B');
    expect(formatBytes(mul(sym('B'), 8))).toBe('8·B B');
    // Another copy of the package's expression (its data, copied) is one.
    expect(formatBytes(JSON.parse(JSON.stringify(mul(sym('B'), 8))))).toBe('8·B B');
  });

  it('formatBytes: a negative, NaN or infinite number, or anything but a size, is a VramError', () => {
    for (const bad of [
      -1,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      '8',
      null,
      undefined,
      {},
      { kind: 'expr' },
      { ...sym('B'), terms: [] },
      { ...sym('B'), erms: 1 },
    ]) {
      expect(
        issues(() => formatBytes(bad as never)),
        String(bad),
      ).toEqual(['formatBytes.bytes:bad-argument']);
    }
  });

  it('formatCount: numbers within 2^53 (a fraction prints its integer part), expressions; NaN, infinities and the rest refused', () => {
    expect(formatCount(-1234567)).toBe('-1,234,567');
    expect(formatCount(1234.9)).toBe('1,234');
    for (const bad of [Number.NaN, Number.NEGATIVE_INFINITY, 2 ** 60, '5', null, [], { kind: 'expr', terms: 1 }]) {
      expect(
        issues(() => formatCount(bad as never)),
        String(bad),
      ).toEqual(['formatCount.value:bad-argument']);
    }
  });
});
