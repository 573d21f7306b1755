/** `vram-ts fit --advise` and `vram-ts rl --advise`: advise's and adviseRl's results as tables (the baseline, then each lever ranked, then what was skipped). */
import { formatBytes, type AdviseResult, type AdviseRlResult, type LeverResult, type RlLeverResult } from '../index.js';

/** Bytes with a minus where negative. */
const signed = (bytes: number) => (bytes < 0 ? `-${formatBytes(-bytes)}` : formatBytes(bytes));

/** One lever: its row (fits, needed, headroom, cost kind, id), then what to change and what it costs. */
function leverLines(l: LeverResult, widths: readonly number[]): string[] {
  const cells = [l.fits ? 'yes' : 'no', formatBytes(l.needed), signed(l.headroom), l.cost.kind, l.lever];
  const row = cells.map((c, i) => (i === 1 || i === 2 ? c.padStart(widths[i]!) : i < cells.length - 1 ? c.padEnd(widths[i]!) : c)).join('  ');
  const indent = ' '.repeat(4);
  return [`  ${row}`, `${indent}change: ${l.description}`, `${indent}cost:   ${l.cost.note}`];
}

/** The whole table. */
export function adviseTable(result: AdviseResult, gpu: string | number): string {
  const b = result.baseline;
  const lines = [
    `baseline: ${b.fits ? 'fits' : 'does not fit'}: needs ${formatBytes(b.needed)} of ${formatBytes(b.capacity)} (${gpu}), headroom ${signed(b.headroom)}`,
    '',
  ];
  const head = ['fits', 'needed', 'headroom', 'cost', 'lever'];
  const rows = result.levers.map((l) => [l.fits ? 'yes' : 'no', formatBytes(l.needed), signed(l.headroom), l.cost.kind, l.lever]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  lines.push(`  ${head.map((h, i) => (i === 1 || i === 2 ? h.padStart(widths[i]!) : i < head.length - 1 ? h.padEnd(widths[i]!) : h)).join('  ')}`);
  for (const l of result.levers) lines.push(...leverLines(l, widths));
  return `${[...lines, ...closing(result)].join('\n')}\n`;
}

/** `vram-ts rl --advise`: adviseRl's result as a table (the baseline, then each lever ranked, then what was skipped). */
export function adviseRlTable(result: AdviseRlResult, gpu: string): string {
  const b = result.baseline;
  const lines = [
    `baseline: ${b.fits ? 'fits' : 'does not fit'}: peak ${formatBytes(b.peak)} in ${b.peakPhase}, usable ${formatBytes(b.usable)} of ${formatBytes(b.totalBytes)} (${gpu}), headroom ${signed(b.headroom)}`,
    '',
  ];
  const head = ['fits', 'peak', 'headroom', 'gpus', 'cost', 'lever'];
  const cells = (l: RlLeverResult) => [l.fits ? 'yes' : 'no', formatBytes(l.peak), signed(l.headroom), String(l.gpus), l.cost.kind, l.lever];
  const widths = head.map((h, i) => Math.max(h.length, ...result.levers.map((l) => cells(l)[i]!.length)));
  const row = (c: readonly string[]) =>
    `  ${c.map((x, i) => (i >= 1 && i <= 3 ? x.padStart(widths[i]!) : i < c.length - 1 ? x.padEnd(widths[i]!) : x)).join('  ')}`;
  lines.push(row(head));
  for (const l of result.levers) lines.push(row(cells(l)), `    change: ${l.description}`, `    cost:   ${l.cost.note}`);
  return `${[...lines, ...closing(result)].join('\n')}\n`;
}

/** What both tables end with: a word when no lever applies, the best one, and the levers skipped with why. */
function closing(result: {
  readonly levers: readonly unknown[];
  readonly best?: { readonly lever: string; readonly cost: { readonly kind: string } } | undefined;
  readonly skipped: readonly { readonly lever: string; readonly reason: string }[];
}): string[] {
  const lines = result.levers.length === 0 ? ['  (no lever applies)'] : [];
  lines.push('', result.best === undefined ? 'best: none fits' : `best: ${result.best.lever} (${result.best.cost.kind})`);
  if (result.skipped.length > 0) {
    const width = Math.max(...result.skipped.map((s) => s.lever.length));
    lines.push('', 'skipped', ...result.skipped.map((s) => `  ${s.lever.padEnd(width)}  ${s.reason}`));
  }
  return lines;
}
