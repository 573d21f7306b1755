import { describe, expect, it } from 'vitest';
import { byteTicks, decimate } from '../../src/report/svg.js';
import { breakdownSvg, CATEGORIES, estimate, llm, mobilenetV3Small, timelineSvg, type Category, type Estimate, type TimelineEvent } from '../../src/index.js';

const seed = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672] });
const GiB = 2 ** 30;

const attrs = (svg: string, cls: string) =>
  [...svg.matchAll(new RegExp(`<(?:text|line|polygon)[^>]*class="${cls}"[^>]*>([^<]*)`, 'g'))].map((m) => {
    const get = (name: string) => Number(new RegExp(` ${name}="([^"]*)"`).exec(m[0])?.[1]);
    return {
      text: m[1]!,
      x: get('x'),
      y: get('y'),
      width: get('data-width'),
      y1: get('y1'),
      points: /points="([^"]*)"/.exec(m[0])?.[1]?.split(' ').length ?? 0,
    };
  });

/** A timeline of `n` events (a saw-tooth with one spike) standing in for a very long step. */
function longTimeline(n: number, spikeAt: number): Estimate {
  const zero = Object.fromEntries(CATEGORIES.map((c) => [c, 0])) as Record<Category, number>;
  const phases = ['start', 'zero_grad', 'forward', 'loss', 'backward', 'step', 'end'] as const;
  const timeline: TimelineEvent[] = Array.from({ length: n }, (_, i) => {
    const activations = (i === spikeAt ? 500 : 10 + (i % 97)) * 2 ** 20;
    const phase = i < 2 ? phases[i]! : i < n * 0.45 ? 'forward' : i < n * 0.46 ? 'loss' : i < n * 0.95 ? 'backward' : i < n - 1 ? 'step' : 'end';
    return { phase, label: `op ${i}`, live: activations + GiB, byCategory: { ...zero, parameters: GiB, activations } };
  });
  return { timeline } as unknown as Estimate;
}

describe('byteTicks', () => {
  it('gives 4 to 6 evenly spaced ticks in one binary unit, covering the maximum', () => {
    for (const max of [1, 1000, 5000, 3_506_888_704, 80 * GiB, 123.4 * GiB, 7 * 2 ** 40]) {
      const { values, labels, step } = byteTicks(max);
      expect(values.length).toBeGreaterThanOrEqual(4);
      expect(values.length).toBeLessThanOrEqual(6);
      expect(values[values.length - 1]).toBeGreaterThanOrEqual(max);
      values.forEach((v, i) => expect(v).toBeCloseTo(i * step, 3));
      expect(labels[0]).toBe('0');
      for (const l of labels.slice(1)) expect(l).toMatch(/^\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)$/);
      expect(new Set(labels).size).toBe(labels.length);
    }
    expect(byteTicks(3_506_888_704).labels).toEqual(['0', '1 GiB', '2 GiB', '3 GiB', '4 GiB']);
  });
});

describe('decimate', () => {
  it('keeps at most 2 × columns + 2 events, the first, the last and every bucket’s peak', () => {
    const live = Array.from({ length: 50_000 }, (_, i) => Math.sin(i / 300) * 1000 + (i === 31_337 ? 1e6 : 0));
    const kept = decimate(live, 250);
    expect(kept.length).toBeLessThanOrEqual(502);
    expect(kept).toContain(0);
    expect(kept).toContain(49_999);
    expect(kept).toContain(31_337);
    expect([...kept].sort((a, b) => a - b)).toEqual(kept);
  });
});

describe('timelineSvg', () => {
  it('stays small however long the step, and keeps the peak', () => {
    const long = longTimeline(50_000, 40_000);
    const svg = timelineSvg(long);
    expect(svg.length).toBeLessThan(150_000);
    for (const area of attrs(svg, 'area')) expect(area.points).toBeLessThanOrEqual(2000);
    const peak = /<circle class="peak" cx="([\d.]+)"/.exec(svg)!;
    expect(Number(peak[1])).toBeCloseTo(80 + (40_000 / 49_999) * (800 - 80 - 24), 0);
    expect(svg).toContain('peak 1.49 GiB');
  });

  it('bounds a large LLM timeline', () => {
    const r = estimate(llm('qwen2.5-0.5b'), { input: [4, 2048], precision: 'bf16' });
    expect(r.timeline.length).toBeGreaterThan(2000);
    const svg = timelineSvg(r, { capacity: 80 * GiB });
    expect(svg.length).toBeLessThan(150_000);
    for (const area of attrs(svg, 'area')) expect(area.points).toBeLessThanOrEqual(2000);
  });

  it('labels every phase without overlaps, and has byte ticks', () => {
    const svg = timelineSvg(seed);
    const labels = attrs(svg, 'phase-label');
    expect(labels.map((l) => l.text)).toEqual(['start', 'zero_grad', 'forward', 'loss', 'backward', 'step', 'end']);
    for (const a of labels) {
      for (const b of labels) {
        if (a === b || a.y !== b.y) continue;
        // 0.62 em per character: wider than sans-serif's average.
        expect(a.x + a.text.length * 6.2 <= b.x || b.x + b.text.length * 6.2 <= a.x, `${a.text} / ${b.text}`).toBe(true);
      }
    }
    const ticks = attrs(svg, 'tick').map((t) => t.text);
    expect(ticks).toEqual(['0', '1 GiB', '2 GiB', '3 GiB', '4 GiB']);
  });

  it('draws the GPU capacity as a line near the peak, as a note far above it', () => {
    const near = timelineSvg(seed, { capacity: 4 * GiB });
    const line = attrs(near, 'capacity')[0]!;
    expect(line.y1).toBeGreaterThan(30);
    expect(near).toContain('GPU 4.00 GiB');
    const far = timelineSvg(seed, { capacity: 80 * GiB });
    expect(far).not.toContain('<line class="capacity"');
    expect(far).toContain('GPU 80.00 GiB (3.27 GiB peak is 4.1%)');
    expect(timelineSvg(seed, 'A title')).toContain('<title>A title</title>');
    expect(() => timelineSvg(seed, { capacity: -1 })).toThrow(/capacity/);
  });

  it('paints no background and draws text in currentColor (dark pages)', () => {
    for (const svg of [timelineSvg(seed), breakdownSvg(seed, { capacity: 24 * GiB })]) {
      expect(svg).toMatch(/^<svg [^>]*fill="currentColor"/);
      expect(svg).not.toMatch(/fill="(#fff|#ffffff|white)"/i);
      expect(svg).not.toMatch(/stroke="#(000|333)"/);
    }
    expect(breakdownSvg(seed, { capacity: 24 * GiB })).toContain('class="capacity"');
  });
});
