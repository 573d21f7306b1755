import type { Dim } from '../sym/expr.js';
import { maxAtom } from '../sym/ops.js';
import type { Category, PeakPoint, StepProgram } from './ledger.js';
import { CATEGORIES, MARK, zeroTotals } from './ledger.js';
import { provesAtLeast, rowsOf, termBasis, vectorExpr, type Basis, type Rows } from './peak-basis.js';
import { fullLabel, once, type Repetition } from './program.js';

function addScaled(target: Float64Array, vector: Float64Array, scale: number): void {
  if (scale !== 0) for (let i = 0; i < target.length; i += 1) target[i]! += scale * vector[i]!;
}

/** A repeated run's net row (total) and net coefficients by category. */
interface RunDelta {
  readonly total: Float64Array;
  readonly byCategory: Map<Category, Float64Array>;
  readonly events: number;
}

/** Net rows of each repeated run, in log order. */
function runDeltas(program: StepProgram, rows: Rows, repeat: Repetition | undefined): RunDelta[] {
  const runs: { total: Float64Array; byCategory: Map<Category, Float64Array>; events: number }[] = [];
  if (repeat === undefined || repeat.times === 1) return runs;
  let current: (typeof runs)[number] | null = null;
  program.log.forEach((entry, at) => {
    if (repeat.units[at] !== 1) {
      current = null;
      return;
    }
    if (current === null) {
      current = { total: new Float64Array(rows.width), byCategory: new Map(CATEGORIES.map((c) => [c, new Float64Array(rows.k)])), events: 0 };
      runs.push(current);
    }
    if (entry === MARK) {
      current.events += 1;
      return;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    const sign = entry >= 0 ? 1 : -1;
    const row = rows.rows[id]!;
    addScaled(current.total, row, sign);
    const target = current.byCategory.get(program.categories[id]!)!;
    for (let i = 0; i < rows.k; i += 1) target[i]! += sign * row[i]!;
  });
  return runs;
}

/** Where a walk is: inside a repeated run (its index, net row, events, full index of its start) or not. */
interface RunState {
  readonly index: number;
  readonly delta: Float64Array;
  readonly events: number;
  readonly start: number;
}

/**
 * Walks a program with dense rows: `onMark` sees every event with the copy-0 live row (and,
 * inside a repeated run, the run), and the live row advances by a run's net row `times` over
 * when the run ends. With `perCategory`, coefficient vectors by category follow along.
 */
function walk(
  program: StepProgram,
  rows: Rows,
  repeat: Repetition | undefined,
  runs: readonly RunDelta[],
  onMark: (event: number, full: number, live: Float64Array, run: RunState | null, freed: boolean) => void,
  perCategory?: Map<Category, Float64Array>,
): Float64Array {
  const n = repeat?.times ?? 1;
  const live = new Float64Array(rows.width);
  let event = 0;
  let full = 0;
  let run = -1;
  let running: RunState | null = null;
  let freed = false;
  const close = () => {
    addScaled(live, runs[run]!.total, n - 1);
    if (perCategory !== undefined) for (const [c, v] of perCategory) addScaled(v, runs[run]!.byCategory.get(c)!, n - 1);
    full = running!.start + n * running!.events;
    running = null;
  };
  const { log } = program;
  const repeated = runs.length > 0 ? repeat!.units : null;
  for (let at = 0; at < log.length; at += 1) {
    const entry = log[at]!;
    const inRun = repeated !== null && repeated[at] === 1;
    if (inRun && running === null) {
      run += 1;
      running = { index: run, delta: runs[run]!.total, events: runs[run]!.events, start: full };
    } else if (!inRun && running !== null) close();
    if (entry === MARK) {
      onMark(event, full, live, running, freed);
      freed = false;
      event += 1;
      full += 1;
      continue;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    // The coefficients are sparse (a block's size has a term or two), the sample values dense.
    const row = rows.rows[id]!;
    const block = rows.sparse[id]!;
    const sign = entry >= 0 ? 1 : -1;
    for (let j = 0; j < block.index.length; j += 1) live[block.index[j]!]! += sign * block.coef[j]!;
    for (let i = rows.k; i < row.length; i += 1) live[i]! += sign * row[i]!;
    if (entry < 0) freed = true;
    if (perCategory !== undefined) {
      const target = perCategory.get(program.categories[id]!)!;
      for (let j = 0; j < block.index.length; j += 1) target[block.index[j]!]! += sign * block.coef[j]!;
    }
  }
  if (running !== null) close();
  return live;
}

/** An event as a candidate: its reduced index, which copy of its run, its index in the full step, its live row. */
interface Candidate {
  readonly event: number;
  readonly copy: number;
  readonly full: number;
  readonly row: Float64Array;
  readonly run: number;
}

/**
 * The peak of a symbolic program as an expression. Events whose live set a later event's
 * contains are dropped on the way (only allocations between them); the rest form a Pareto
 * frontier: a candidate goes when another is at least as high at every sample point and
 * covers it coefficient by coefficient, or interval bounds prove the difference non-negative
 * (floor atoms relaxed to their numerators). The max of the frontier is the peak; each
 * frontier event is a candidate with its totals by category. Exact: every kept candidate is a
 * real event, and every dropped one is below a kept one everywhere. An event of a repeated run
 * stands for its copies: at any values the highest is the first or the last copy (the total is
 * affine in the copy), so both are candidates.
 */
export function programPeak(program: StepProgram, repeat?: Repetition): { bytes: Dim; candidates: PeakPoint[] } {
  const basis = termBasis(program);
  const rows = rowsOf(basis);
  const runs = runDeltas(program, rows, repeat);
  const kept = frontier(basis, rows, candidatesOf(program, rows, repeat, runs));
  const points = peakPoints(program, basis, rows, repeat, runs, kept);
  return { bytes: points.length === 1 ? points[0]!.bytes : maxAtom(points.map((p) => p.bytes)), candidates: points };
}

/** The events that can be the peak: the last mark before each free (and a run's copies at both ends). */
function candidatesOf(program: StepProgram, rows: Rows, repeat: Repetition | undefined, runs: readonly RunDelta[]): Candidate[] {
  const { width } = rows;
  const n = repeat?.times ?? 1;
  const candidates: Candidate[] = [];
  // The previous mark's live row (a reused buffer) and where it was: copied out only if it
  // turns out to be a candidate.
  const pendingRow = new Float64Array(width);
  let pendingEvent = -1;
  let pendingFull = 0;
  let pendingRun: RunState | null = null;
  const keep = (copy: number) => {
    const row = pendingRow.slice();
    if (pendingRun !== null && copy > 0) addScaled(row, pendingRun.delta, copy);
    candidates.push({
      event: pendingEvent,
      copy,
      full: pendingFull + (pendingRun === null ? 0 : copy * pendingRun.events),
      row,
      run: pendingRun === null ? -1 : pendingRun.index,
    });
  };
  walk(program, rows, repeat, runs, (event, full, live, run, freed) => {
    // Marks with only allocations between them: the later one contains the earlier one. For a
    // run's first copy that holds only within its own run (the other copies come between).
    if (pendingEvent >= 0) {
      if (freed) {
        keep(0);
        if (pendingRun !== null) keep(n - 1);
      } else if (pendingRun !== null && pendingRun.index !== (run?.index ?? -1)) keep(0);
    }
    pendingRow.set(live);
    pendingEvent = event;
    pendingFull = full;
    pendingRun = run;
  });
  if (pendingEvent >= 0) {
    keep(0);
    if (pendingRun !== null) keep(n - 1);
  }
  return candidates;
}

/** The Pareto frontier of the candidates (sorted in place), in step order. */
function frontier(basis: Basis, rows: Rows, candidates: Candidate[]): Candidate[] {
  const { k, width } = rows;
  // Largest first at the largest sample point: a candidate is mostly dropped by one met earlier.
  candidates.sort((a, b) => (b.row[k]! || 0) - (a.row[k]! || 0) || a.full - b.full);
  const below = (low: Candidate, high: Candidate): boolean => {
    // A sample value past 2^53 (NaN) screens nothing out: the coefficients or the bounds decide.
    for (let i = k; i < width; i += 1) if (low.row[i]! > high.row[i]!) return false;
    let covered = true;
    for (let i = 0; i < k; i += 1) {
      if (low.row[i]! > high.row[i]!) {
        covered = false;
        break;
      }
    }
    return covered || provesAtLeast(basis, high.row, low.row);
  };
  let kept: Candidate[] = [];
  for (const c of candidates) {
    const by = kept.findIndex((h) => below(c, h));
    if (by >= 0) {
      // The one that dropped it likely drops the next: ask it first.
      if (by > 0) kept.unshift(kept.splice(by, 1)[0]!);
      continue;
    }
    // Sorted by the first sample, descending: an earlier one can be below only on a tie there.
    if (kept.some((h) => h.row[k] === c.row[k])) kept = kept.filter((h) => !below(h, c));
    kept.push(c);
  }
  kept.sort((a, b) => a.full - b.full);
  return kept;
}

/** The kept candidates as peak points, their totals by category worked out when first read. */
function peakPoints(
  program: StepProgram,
  basis: Basis,
  rows: Rows,
  repeat: Repetition | undefined,
  runs: readonly RunDelta[],
  kept: readonly Candidate[],
): PeakPoint[] {
  const { k } = rows;
  // Totals by category at the kept events: one more walk with a vector per category when a
  // candidate's totals are first read, their expressions for that candidate only.
  const vectorsByCandidate = once(() => {
    const wanted = new Map<number, Candidate[]>();
    for (const c of kept) wanted.set(c.event, [...(wanted.get(c.event) ?? []), c]);
    const byCategory = new Map<Candidate, Float64Array[]>();
    const perCategory = new Map<Category, Float64Array>(CATEGORIES.map((c) => [c, new Float64Array(k)]));
    walk(
      program,
      rows,
      repeat,
      runs,
      (event, _full, _live, run) => {
        for (const c of wanted.get(event) ?? []) {
          byCategory.set(
            c,
            CATEGORIES.map((category) => {
              const vector = perCategory.get(category)!.slice();
              if (run !== null) addScaled(vector, runs[run.index]!.byCategory.get(category)!, c.copy);
              return vector;
            }),
          );
        }
      },
      perCategory,
    );
    return byCategory;
  });
  const totalsOf = (c: Candidate): Record<Category, Dim> => {
    const vectors = vectorsByCandidate().get(c)!;
    const totals: Record<Category, Dim> = zeroTotals();
    CATEGORIES.forEach((category, i) => {
      totals[category] = vectorExpr(basis, vectors[i]!);
    });
    return totals;
  };
  return kept.map((c) => {
    const info = program.events[c.event]!;
    const point = {
      bytes: vectorExpr(basis, c.row.subarray(0, k)),
      phase: info.phase,
      label: fullLabel(program, repeat, c.event, c.copy),
      event: c.full,
    } as PeakPoint;
    return Object.defineProperty(point, 'byCategory', { enumerable: true, get: once(() => totalsOf(c)) });
  });
}

/** Live bytes of a symbolic program at its first event and after its last entry. */
export function programEnds(program: StepProgram, repeat?: Repetition): { first: Dim; last: Dim } {
  const basis = termBasis(program);
  const rows = rowsOf(basis);
  let first: Dim | null = null;
  const last = walk(program, rows, repeat, runDeltas(program, rows, repeat), (_e, _f, live) => {
    first ??= vectorExpr(basis, live.subarray(0, rows.k));
  });
  return { first: first ?? 0, last: vectorExpr(basis, last.subarray(0, rows.k)) };
}
