import type { Estimate } from '../estimate.js';
import { fail } from '../errors.js';
import { CATEGORIES, type Category } from '../memory/ledger.js';
import { formatBytes } from './units.js';

/** Colours of the categories, shared by both charts. */
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

const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

function concrete(value: unknown, what: string): number {
  if (typeof value !== 'number') fail('symbolic-input', `the ${what} chart needs concrete sizes`, { path: ['input'] });
  return value;
}

/** The categories a chart shows: every one, but communication buffers only in a distributed step. */
function shown(present: (c: Category) => boolean): readonly Category[] {
  return CATEGORIES.filter((c) => c !== 'communication' || present(c));
}

function legend(x: number, y: number, categories: readonly Category[]): string {
  return categories.map(
    (c, i) => `<g transform="translate(${x + (i % 4) * 150},${y + Math.floor(i / 4) * 18})"><rect width="12" height="12" fill="${COLORS[c]}"/><text x="16" y="10">${c}</text></g>`,
  ).join('');
}

/**
 * A stacked bar of what is live at the peak, by category, as an SVG string.
 *
 * @example
 * ```ts
 * import { breakdownSvg, estimate, mobilenetV3Small } from 'vram-ts';
 * const svg = breakdownSvg(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(svg.startsWith('<svg')); // true
 * ```
 */
export function breakdownSvg(result: Estimate, title = 'Memory at the peak'): string {
  const width = 640;
  const barX = 40;
  const barWidth = width - 80;
  const total = concrete(result.peak.bytes, 'breakdown');
  let x = barX;
  const rects = CATEGORIES.map((c) => {
    const value = concrete(result.peak.byCategory[c], 'breakdown');
    if (value === 0 || total === 0) return '';
    const w = (value / total) * barWidth;
    const rect = `<rect class="segment" data-category="${c}" x="${x.toFixed(2)}" y="50" width="${w.toFixed(2)}" height="40" fill="${COLORS[c]}"><title>${c}: ${escape(formatBytes(value))}</title></rect>`;
    x += w;
    return rect;
  }).join('');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="170" viewBox="0 0 ${width} 170" font-family="sans-serif" font-size="12">`,
    `<title>${escape(title)}</title>`,
    `<text x="${barX}" y="24" font-size="15">${escape(title)}: ${escape(formatBytes(total))} (${escape(result.peak.phase)})</text>`,
    rects,
    legend(barX, 110, shown((c) => result.peak.byCategory[c] !== 0)),
    '</svg>',
  ].join('');
}

/**
 * The training step's (or forward's) live memory over time as stacked areas by category,
 * with the peak marked, as an SVG string.
 *
 * @example
 * ```ts
 * import { estimate, mobilenetV3Small, timelineSvg } from 'vram-ts';
 * const svg = timelineSvg(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(svg.includes('class="peak"')); // true
 * ```
 */
export function timelineSvg(result: Estimate, title = 'Live memory over the step'): string {
  const events = result.timeline;
  if (events.length === 0) fail('no-timeline', 'the estimate kept no timeline (estimate with timeline: true)', { path: ['timeline'] });
  const width = 800;
  const height = 360;
  const left = 70;
  const top = 40;
  const plotWidth = width - left - 20;
  const plotHeight = 220;
  const peak = Math.max(...events.map((e) => concrete(e.live, 'timeline')), 1);
  const xAt = (i: number) => left + (events.length === 1 ? 0 : (i / (events.length - 1)) * plotWidth);
  const yAt = (v: number) => top + plotHeight - (v / peak) * plotHeight;
  const below = events.map(() => 0);
  const areas = CATEGORIES.map((c) => {
    const lower = [...below];
    const upper = events.map((e, i) => (below[i] = lower[i]! + concrete(e.byCategory[c], 'timeline')));
    if (upper.every((v, i) => v === lower[i])) return '';
    const forward = upper.map((v, i) => `${xAt(i).toFixed(1)},${yAt(v).toFixed(1)}`);
    const back = lower.map((v, i) => `${xAt(i).toFixed(1)},${yAt(v).toFixed(1)}`).reverse();
    return `<polygon class="area" data-category="${c}" points="${[...forward, ...back].join(' ')}" fill="${COLORS[c]}" fill-opacity="0.85"/>`;
  }).join('');
  const peakIndex = events.findIndex((e) => e.live === peak);
  const phases: string[] = [];
  let last = '';
  events.forEach((e, i) => {
    if (e.phase !== last) phases.push(`<line x1="${xAt(i).toFixed(1)}" x2="${xAt(i).toFixed(1)}" y1="${top}" y2="${top + plotHeight}" stroke="#999" stroke-dasharray="2,3"/><text x="${(xAt(i) + 2).toFixed(1)}" y="${top + plotHeight + 14}" font-size="10">${escape(e.phase)}</text>`);
    last = e.phase;
  });
  const px = xAt(peakIndex);
  const py = yAt(peak);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<title>${escape(title)}</title>`,
    `<text x="${left}" y="24" font-size="15">${escape(title)}</text>`,
    `<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotHeight}" stroke="#333"/>`,
    `<line x1="${left}" x2="${left + plotWidth}" y1="${top + plotHeight}" y2="${top + plotHeight}" stroke="#333"/>`,
    `<text x="${left - 6}" y="${top + 4}" text-anchor="end" font-size="10">${escape(formatBytes(peak))}</text>`,
    `<text x="${left - 6}" y="${top + plotHeight}" text-anchor="end" font-size="10">0</text>`,
    areas,
    phases.join(''),
    `<circle class="peak" cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="5" fill="none" stroke="#000" stroke-width="2"><title>peak ${escape(formatBytes(peak))}: ${escape(events[peakIndex]!.label)}</title></circle>`,
    `<text x="${Math.min(px + 8, width - 200).toFixed(1)}" y="${Math.max(py - 8, top + 10).toFixed(1)}" font-size="11">peak ${escape(formatBytes(peak))}</text>`,
    legend(left, top + plotHeight + 36, shown((c) => events.some((e) => e.byCategory[c] !== 0))),
    '</svg>',
  ].join('');
}
