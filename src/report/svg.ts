import { isEstimate } from '../estimate.js';
import type { Estimate } from '../estimate-types.js';
import { fail } from '../errors.js';
import { CATEGORIES, type Category } from '../memory/ledger.js';
import { size } from '../tensor/size.js';
import { integer, number, object, string, validate, type Check } from '../validate.js';
import { listOf, record } from './arguments.js';
import { formatBytes } from './units.js';

/** Options of {@link timelineSvg} and {@link breakdownSvg}. */
export interface ChartOptions {
  /** The chart's title. */
  readonly title?: string;
  /** A GPU's capacity in bytes: drawn as a line (the timeline) or a mark on the bar (the breakdown). */
  readonly capacity?: number;
  /** Most columns of the timeline's decimated areas (default 250; each keeps its bucket's highest and lowest event). */
  readonly maxColumns?: number;
}

/** Colours of the categories, shared by both charts (readable on light and dark backgrounds). */
const COLORS: Readonly<Record<Category, string>> = {
  parameters: '#4e79a7',
  buffers: '#9c755f',
  gradients: '#f28e2b',
  optimizer: '#e15759',
  input: '#76b7b2',
  activations: '#59a14f',
  activationGrads: '#edc948',
  temporaries: '#b07aa1',
  communication: '#ff9da7',
};

/** The capacity line's colour. */
const CAPACITY = '#d62728';

const escapeXml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/**
 * Text colour follows the embedding page (`currentColor`); opened on its own, the SVG follows
 * the viewer's light or dark scheme. No background is painted.
 */
const STYLE = '<style>svg:root{color-scheme:light dark;color:CanvasText}</style>';

const open = (width: number, height: number, title: string) =>
  `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12" fill="currentColor" role="img" aria-label="${escapeXml(title)}">${STYLE}<title>${escapeXml(title)}</title>`;

function concrete(value: unknown, what: string): number {
  if (typeof value !== 'number') fail('symbolic-input', `the ${what} chart needs concrete sizes`, { path: ['input'] });
  return value;
}

/** A chart's options: a title, or an object of them (a capacity of at least 1 byte, columns >= 1). */
const chartObject = object({ fields: { title: string, capacity: number(1), maxColumns: integer(1) } });
const chartOptions: Check = (value, path, issues) => (typeof value === 'string' ? undefined : chartObject(value, path, issues));

/** What the charts read of a category breakdown: a size for every category. */
const byCategory = record(Object.fromEntries(CATEGORIES.map((c) => [c, size])));

/** What breakdownSvg reads of an estimate: its peak. */
const peakOf = record({ peak: record({ bytes: size, phase: string, byCategory }) });

/** The most events a timeline chart takes (decimated to its columns). */
const MAX_EVENTS = 10_000_000;

/** What timelineSvg reads of an estimate: its timeline's events. */
const timelineOf = record({ timeline: listOf(record({ phase: string, label: string, live: size, byCategory }), MAX_EVENTS) });

/**
 * A chart's estimate: a result of estimate() as it is, anything else checked for what the chart
 * reads (so that a timeline made by hand, or measured, charts too), then its options.
 */
function chartArgs(fn: string, result: unknown, shape: Check, options: unknown): void {
  if (!isEstimate(result)) validate(result, shape, [fn, 'result']);
  if (options !== undefined) validate(options, chartOptions, [fn, 'options']);
}

function optionsOf(options: string | ChartOptions | undefined, title: string): Required<Pick<ChartOptions, 'title'>> & ChartOptions {
  const o = typeof options === 'string' ? { title: options } : (options ?? {});
  return { ...o, title: o.title ?? title };
}

/** The categories a chart shows: every one, but communication buffers only in a distributed step. */
function shown(present: (c: Category) => boolean): readonly Category[] {
  return CATEGORIES.filter((c) => c !== 'communication' || present(c));
}

function legend(x: number, y: number, categories: readonly Category[]): string {
  return categories
    .map(
      (c, i) =>
        `<g transform="translate(${x + (i % 4) * 150},${y + Math.floor(i / 4) * 18})"><rect width="12" height="12" fill="${COLORS[c]}"/><text x="16" y="10">${c}</text></g>`,
    )
    .join('');
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'] as const;

/**
 * Axis ticks from 0 to at least `max`: 4 to 8 of them, in steps of 1, 2, 2.5 or 5 × 10^k of
 * one binary unit, labelled in that unit (`1.5 GiB`).
 */
export function byteTicks(max: number): { readonly step: number; readonly values: readonly number[]; readonly labels: readonly string[] } {
  const top = Math.max(max, 1);
  let unit = 0;
  while (top / 1024 ** unit >= 1024 && unit < UNITS.length - 1) unit += 1;
  const scale = 1024 ** unit;
  const raw = top / scale / 5;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const nice = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? 10 * magnitude;
  const count = Math.ceil(top / scale / nice - 1e-9);
  const decimals = Math.max(0, -Math.floor(Math.log10(nice) + 1e-9) + (nice / magnitude === 2.5 ? 1 : 0));
  const values: number[] = [];
  const labels: string[] = [];
  for (let i = 0; i <= count; i++) {
    values.push(i * nice * scale);
    labels.push(i === 0 ? '0' : `${(i * nice).toFixed(decimals)} ${UNITS[unit]}`);
  }
  return { step: nice * scale, values, labels };
}

/**
 * The events a drawing keeps: per bucket of consecutive events, the lowest and the highest
 * live total (in their order), plus the first and last event — so peaks survive and the
 * number of points is at most 2 × columns + 2, whatever the model.
 */
export function decimate(live: readonly number[], columns: number): number[] {
  const n = live.length;
  if (n <= 2 * columns + 2) return live.map((_, i) => i);
  const keep = new Set<number>([0, n - 1]);
  for (let b = 0; b < columns; b++) {
    const from = Math.floor((b * n) / columns);
    const to = Math.floor(((b + 1) * n) / columns);
    let lo = from;
    let hi = from;
    for (let i = from; i < to; i++) {
      if (live[i]! < live[lo]!) lo = i;
      if (live[i]! > live[hi]!) hi = i;
    }
    keep.add(lo).add(hi);
  }
  return [...keep].sort((a, b) => a - b);
}

/** Approximate rendered width of a label (sans-serif, generous). */
const textWidth = (text: string, fontSize: number) => text.length * fontSize * 0.62;

/**
 * A stacked bar of what is live at the peak, by category, as an SVG string. With a `capacity`,
 * the bar's scale is the larger of the peak and the capacity, and the capacity is marked.
 *
 * @example
 * ```ts
 * import { breakdownSvg, estimate, mobilenetV3Small } from 'vram-ts';
 * const svg = breakdownSvg(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(svg.startsWith('<svg')); // true
 * ```
 */
export function breakdownSvg(result: Estimate, options?: string | ChartOptions): string {
  chartArgs('breakdownSvg', result, peakOf, options);
  const { title, capacity } = optionsOf(options, 'Memory at the peak');
  const width = 640;
  const barX = 40;
  const barWidth = width - 80;
  const total = concrete(result.peak.bytes, 'breakdown');
  const scale = Math.max(total, capacity ?? 0);
  let x = barX;
  const rects = CATEGORIES.map((c) => {
    const value = concrete(result.peak.byCategory[c], 'breakdown');
    if (value === 0 || scale === 0) return '';
    const w = (value / scale) * barWidth;
    const rect = `<rect class="segment" data-category="${c}" x="${x.toFixed(2)}" y="50" width="${w.toFixed(2)}" height="40" fill="${COLORS[c]}"><title>${c}: ${escapeXml(formatBytes(value))}</title></rect>`;
    x += w;
    return rect;
  }).join('');
  let mark = '';
  if (capacity !== undefined) {
    const cx = barX + (capacity / scale) * barWidth;
    const share = `${((total / capacity) * 100).toFixed(total < capacity / 100 ? 2 : 1)}% of ${formatBytes(capacity)}`;
    mark = `<rect x="${barX}" y="50" width="${barWidth}" height="40" fill="none" stroke="currentColor" stroke-opacity="0.35"/><line class="capacity" x1="${cx.toFixed(2)}" x2="${cx.toFixed(2)}" y1="44" y2="96" stroke="${CAPACITY}" stroke-width="2"/><text x="${(barX + barWidth).toFixed(0)}" y="40" text-anchor="end" font-size="11">${escapeXml(share)}</text>`;
  }
  return [
    open(width, 170, title),
    `<text x="${barX}" y="24" font-size="15">${escapeXml(title)}: ${escapeXml(formatBytes(total))} (${escapeXml(result.peak.phase)})</text>`,
    rects,
    mark,
    legend(
      barX,
      110,
      shown((c) => result.peak.byCategory[c] !== 0),
    ),
    '</svg>',
  ].join('');
}

/** The timeline's plot area and its scales. */
interface TimelinePlot {
  readonly left: number;
  readonly top: number;
  readonly bottom: number;
  readonly plotWidth: number;
  readonly xAt: (i: number) => number;
  readonly yAt: (v: number) => number;
}

/** One stacked area per category over the kept columns (none for a category that stays at zero). */
function timelineAreas(events: Estimate['timeline'], kept: readonly number[], { xAt, yAt }: TimelinePlot): string {
  const below = kept.map(() => 0);
  return CATEGORIES.map((c) => {
    const lower = [...below];
    const upper = kept.map((e, k) => (below[k] = lower[k]! + concrete(events[e]!.byCategory[c], 'timeline')));
    if (upper.every((v, k) => v === lower[k])) return '';
    const forward = upper.map((v, k) => `${xAt(kept[k]!).toFixed(1)},${yAt(v).toFixed(1)}`);
    const back = lower.map((v, k) => `${xAt(kept[k]!).toFixed(1)},${yAt(v).toFixed(1)}`).reverse();
    return `<polygon class="area" data-category="${c}" points="${[...forward, ...back].join(' ')}" fill="${COLORS[c]}" fill-opacity="0.85"><title>${c}</title></polygon>`;
  }).join('');
}

/** Phases: a dashed line where each begins; labels placed in up to three rows without overlap. */
function phaseMarks(events: Estimate['timeline'], { left, top, bottom, plotWidth, xAt }: TimelinePlot): string {
  const starts: { phase: string; index: number }[] = [];
  events.forEach((e, i) => {
    if (starts.length === 0 || starts[starts.length - 1]!.phase !== e.phase) starts.push({ phase: e.phase, index: i });
  });
  const rowEnds = [-Infinity, -Infinity, -Infinity];
  const gap = 4;
  return starts
    .map(({ phase, index }, k) => {
      const x = xAt(index);
      const end = k + 1 < starts.length ? xAt(starts[k + 1]!.index) : left + plotWidth;
      const line = `<line class="phase-start" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top}" y2="${bottom}" stroke="currentColor" stroke-opacity="0.45" stroke-dasharray="2,3"><title>${escapeXml(phase)}</title></line>`;
      const w = textWidth(phase, 10);
      // Centre the label on its phase when there is room; otherwise start at the phase.
      let lx = end - x >= w + 4 ? (x + end) / 2 - w / 2 : x + 2;
      lx = Math.min(Math.max(lx, left), left + plotWidth - w);
      const row = rowEnds.findIndex((r) => lx >= r + gap);
      if (row === -1) return line;
      rowEnds[row] = lx + w;
      return `${line}<text class="phase-label" x="${lx.toFixed(1)}" y="${bottom + 14 + row * 12}" font-size="10" data-width="${w.toFixed(1)}">${escapeXml(phase)}</text>`;
    })
    .join('');
}

/** The GPU's memory: a line on the scale when shown, otherwise a note of where the peak stands. */
function capacityMark(capacity: number | undefined, capacityShown: boolean, peak: number, { left, top, plotWidth, yAt }: TimelinePlot): string {
  if (capacity === undefined) return '';
  const label = `GPU ${formatBytes(capacity)}`;
  if (capacityShown) {
    const y = yAt(capacity).toFixed(1);
    return `<line class="capacity" x1="${left}" x2="${left + plotWidth}" y1="${y}" y2="${y}" stroke="${CAPACITY}" stroke-width="1.5" stroke-dasharray="6,3"><title>${escapeXml(label)}</title></line><text x="${left + plotWidth}" y="${(yAt(capacity) - 4).toFixed(1)}" text-anchor="end" font-size="11" fill="${CAPACITY}">${escapeXml(label)}</text>`;
  }
  return `<text class="capacity" x="${left + plotWidth}" y="${top - 6}" text-anchor="end" font-size="11" fill="${CAPACITY}">${escapeXml(label)} (${escapeXml(formatBytes(peak))} peak is ${((peak / capacity) * 100).toFixed(1)}%)</text>`;
}

/**
 * The training step's (or forward's) live memory over time as stacked areas by category,
 * with the peak marked, y-axis ticks in bytes, phase labels that do not overlap and, with a
 * `capacity`, the GPU's memory as a line, as an SVG string. Long timelines are decimated
 * (each column keeps its highest and lowest event), so the size is bounded whatever the model.
 *
 * @example
 * ```ts
 * import { estimate, mobilenetV3Small, timelineSvg } from 'vram-ts';
 * const svg = timelineSvg(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(svg.includes('class="peak"')); // true
 * ```
 */
export function timelineSvg(result: Estimate, options?: string | ChartOptions): string {
  chartArgs('timelineSvg', result, timelineOf, options);
  const { title, capacity, maxColumns = 250 } = optionsOf(options, 'Live memory over the step');
  const events = result.timeline;
  if (events.length === 0) fail('no-timeline', 'the estimate kept no timeline (estimate with timeline: true)', { path: ['timeline'] });
  const width = 800;
  const left = 80;
  const top = 40;
  const plotWidth = width - left - 24;
  const plotHeight = 220;
  const bottom = top + plotHeight;
  const live = events.map((e) => concrete(e.live, 'timeline'));
  let peak = 0;
  let peakIndex = 0;
  live.forEach((v, i) => {
    if (v > peak) {
      peak = v;
      peakIndex = i;
    }
  });
  // The capacity joins the scale when it is near the peak; far above, a note says where it is.
  const capacityShown = capacity !== undefined && capacity <= 3 * Math.max(peak, 1);
  const ticks = byteTicks(Math.max(peak, capacityShown ? capacity : 0, 1));
  const domain = ticks.values[ticks.values.length - 1]!;
  const xAt = (i: number) => left + (events.length === 1 ? 0 : (i / (events.length - 1)) * plotWidth);
  const yAt = (v: number) => bottom - (v / domain) * plotHeight;
  const plot: TimelinePlot = { left, top, bottom, plotWidth, xAt, yAt };
  const kept = decimate(live, Math.max(1, Math.floor(maxColumns)));
  if (!kept.includes(peakIndex)) {
    kept.push(peakIndex);
    kept.sort((a, b) => a - b);
  }
  const axis = ticks.values
    .map((v, i) => {
      const y = yAt(v).toFixed(1);
      return `<line class="grid" x1="${left}" x2="${left + plotWidth}" y1="${y}" y2="${y}" stroke="currentColor" stroke-opacity="${i === 0 ? 0.8 : 0.12}"/><text class="tick" x="${left - 6}" y="${(yAt(v) + 3.5).toFixed(1)}" text-anchor="end" font-size="10">${escapeXml(ticks.labels[i]!)}</text>`;
    })
    .join('');
  const px = xAt(peakIndex);
  const py = yAt(peak);
  const peakText = `peak ${formatBytes(peak)}`;
  const height = bottom + 14 + 3 * 12 + 12 + 18 * 3;
  return [
    open(width, height, title),
    `<text x="${left}" y="24" font-size="15">${escapeXml(title)}</text>`,
    axis,
    `<line x1="${left}" x2="${left}" y1="${top}" y2="${bottom}" stroke="currentColor" stroke-opacity="0.8"/>`,
    timelineAreas(events, kept, plot),
    phaseMarks(events, plot),
    capacityMark(capacity, capacityShown, peak, plot),
    `<circle class="peak" cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="5" fill="none" stroke="currentColor" stroke-width="2"><title>${escapeXml(peakText)}: ${escapeXml(events[peakIndex]!.label)}</title></circle>`,
    `<text x="${Math.min(Math.max(px + 8, left + 4), left + plotWidth - textWidth(peakText, 11)).toFixed(1)}" y="${Math.max(py - 8, top + 10).toFixed(1)}" font-size="11">${escapeXml(peakText)}</text>`,
    legend(
      left,
      bottom + 14 + 3 * 12 + 8,
      shown((c) => events.some((e) => e.byCategory[c] !== 0)),
    ),
    '</svg>',
  ].join('');
}
