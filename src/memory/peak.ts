import type { Dim, Term } from '../sym/expr.js';
import { dimKey, fromTerms, makeTerm, termsOf } from '../sym/expr.js';
import { evaluate } from '../sym/evaluate.js';
import { bounds } from '../sym/bounds.js';
import { maxAtom } from '../sym/ops.js';
import type { Category, PeakPoint, StepProgram } from './ledger.js';
import { blockBytes, CATEGORIES, MARK, zeroTotals } from './ledger.js';
import { fullLabel, once, type Repetition } from './program.js';

/**
 * Live totals of a symbolic program as coefficient vectors over the monomials that occur in
 * its block sizes (every monomial is non-negative: a product of symbols, floor and max atoms of
 * sizes). Adding and removing a block is then a few additions, where expression arithmetic
 * rebuilt a canonical polynomial every time.
 */
export interface TermBasis {
  /** The monomials, each as a term with coefficient 1. */
  readonly terms: readonly Term[];
  /** Per block: indices into `terms` and the coefficients (sizes rounded as the program counts them). */
  readonly blocks: readonly { readonly index: Int32Array; readonly coef: Float64Array }[];
}

type Vector = { readonly index: Int32Array; readonly coef: Float64Array };

/** A basis over dimensions: each one's coefficient vector (distinct dimensions computed once). */
function basisOf(dims: readonly Dim[]): TermBasis & { readonly lo: Float64Array; readonly hi: Float64Array; readonly monomials: readonly Dim[] } {
  const index = new Map<string, number>();
  const terms: Term[] = [];
  // By identity first (arithmetic is memoized, so equal sizes are mostly one object), then by key.
  const byObject = new Map<Dim, Vector>();
  const cache = new Map<string, Vector>();
  const blocks = dims.map((dim) => {
    const same = byObject.get(dim);
    if (same !== undefined) return same;
    const key = dimKey(dim);
    const known = cache.get(key);
    if (known !== undefined) {
      byObject.set(dim, known);
      return known;
    }
    const own = termsOf(dim);
    const vector = { index: new Int32Array(own.length), coef: new Float64Array(own.length) };
    own.forEach((term, i) => {
      let at = index.get(term.key);
      if (at === undefined) {
        at = terms.length;
        index.set(term.key, at);
        terms.push(makeTerm(1, term.factors));
      }
      vector.index[i] = at;
      vector.coef[i] = term.coef;
    });
    cache.set(key, vector);
    byObject.set(dim, vector);
    return vector;
  });
  // Interval bounds of every monomial, as sym/bounds computes them term by term.
  const monomials = terms.map((term) => fromTerms([term]));
  const lo = new Float64Array(terms.length);
  const hi = new Float64Array(terms.length);
  monomials.forEach((monomial, i) => {
    const b = bounds(monomial);
    lo[i] = b.min;
    hi[i] = b.max;
  });
  return { terms, blocks, lo, hi, monomials };
}

/** The last bases made, by sizes and rounding: a program's peak and ends (and its first step's) share one. */
let recentBases: { readonly sizes: readonly Dim[]; readonly rounded: boolean; readonly basis: Basis }[] = [];

type Basis = ReturnType<typeof basisOf> & { rows?: Rows; relaxation?: Relaxation };

/** The basis of a program's (rounded) block sizes; programs that share their sizes share it. */
export function termBasis(program: StepProgram): Basis {
  const known = recentBases.find((b) => b.sizes === program.sizes && b.rounded === program.rounded);
  if (known !== undefined) return known.basis;
  // Rounding is memoized arithmetic: the same size object gives the same rounded object.
  const roundedOnce = new Map<Dim, Dim>();
  const basis: Basis = basisOf(
    program.sizes.map((size) => {
      let rounded = roundedOnce.get(size);
      if (rounded === undefined) {
        rounded = blockBytes(size, program.rounded);
        roundedOnce.set(size, rounded);
      }
      return rounded;
    }),
  );
  recentBases = [{ sizes: program.sizes, rounded: program.rounded, basis }, ...recentBases.slice(0, 1)];
  return basis;
}

/**
 * Monomials over which the floor atoms of a basis are relaxed: each `floor(N / den)` lies
 * between `(N - den + 1) / den` and `N / den` (N an integer), N's own terms added to the basis.
 */
interface Relaxation {
  readonly lo: Float64Array;
  readonly hi: Float64Array;
  /** Per basis monomial: its numerator over the extended monomials and its divisor, or null. */
  readonly floors: readonly ({ readonly index: Int32Array; readonly coef: Float64Array; readonly den: number } | null)[];
  readonly one: number;
  /** A work row of the extended width (one proof at a time). */
  readonly scratch: Float64Array;
}

function relaxationOf(basis: Basis): Relaxation {
  if (basis.relaxation !== undefined) return basis.relaxation;
  const index = new Map<string, number>(basis.terms.map((t, i) => [t.key, i]));
  const extended: Term[] = [...basis.terms];
  const at = (term: Term) => {
    let i = index.get(term.key);
    if (i === undefined) {
      i = extended.length;
      index.set(term.key, i);
      extended.push(makeTerm(1, term.factors));
    }
    return i;
  };
  const one = at(makeTerm(1, []));
  const floors = basis.terms.map((term) => {
    const only = term.factors.length === 1 && term.factors[0]!.power === 1 ? term.factors[0]!.atom : undefined;
    if (only?.kind !== 'floorDiv') return null;
    const num = termsOf(only.num);
    return { index: Int32Array.from(num, at), coef: Float64Array.from(num, (t) => t.coef), den: only.den };
  });
  const lo = new Float64Array(extended.length);
  const hi = new Float64Array(extended.length);
  extended.forEach((term, i) => {
    const b = bounds(fromTerms([term]));
    lo[i] = b.min;
    hi[i] = b.max;
  });
  const relaxation = { lo, hi, floors, one, scratch: new Float64Array(extended.length) };
  basis.relaxation = relaxation;
  return relaxation;
}

/** The interval minimum of a coefficient vector over monomials with bounds lo..hi. */
function intervalMin(vector: Float64Array, lo: Float64Array, hi: Float64Array): number {
  let min = 0;
  for (let i = 0; i < vector.length; i += 1) {
    const d = vector[i]!;
    if (d > 0) min += d * lo[i]!;
    else if (d < 0) min += d * hi[i]!;
  }
  return min;
}

/**
 * Whether `high - low` is >= 0 for every value of the symbols: by interval bounds of each
 * monomial (the test sym/bounds applies to the difference expression, without building it),
 * else with every floor atom replaced by its numerator over its divisor, less the rounding on
 * the side that makes the difference smaller (what CUDA's 512-byte rounding adds at most).
 */
function provesAtLeast(basis: Basis, high: Float64Array, low: Float64Array): boolean {
  // Rows may carry sample values after the coefficients: only the first terms.length count.
  let min = 0;
  let floors = false;
  const relaxation = relaxationOf(basis);
  for (let i = 0; i < basis.terms.length; i += 1) {
    const d = high[i]! - low[i]!;
    if (d > 0) min += d * basis.lo[i]!;
    else if (d < 0) min += d * basis.hi[i]!;
    if (d !== 0 && relaxation.floors[i] !== null) floors = true;
  }
  if (min >= 0) return true;
  if (!floors) return false;
  const relaxed = relaxation.scratch;
  relaxed.fill(0);
  for (let i = 0; i < basis.terms.length; i += 1) {
    const d = high[i]! - low[i]!;
    if (d === 0) continue;
    const floor = relaxation.floors[i];
    if (floor === null || floor === undefined) {
      relaxed[i]! += d;
      continue;
    }
    for (let j = 0; j < floor.index.length; j += 1) relaxed[floor.index[j]!]! += (d * floor.coef[j]!) / floor.den;
    // floor(N / den) >= (N - den + 1) / den: the low side where the difference gains it.
    if (d > 0) relaxed[relaxation.one]! -= (d * (floor.den - 1)) / floor.den;
  }
  return intervalMin(relaxed, relaxation.lo, relaxation.hi) >= 0;
}

/** The expression of a coefficient vector over a basis (its monomials are canonical already). */
export function vectorExpr(basis: TermBasis, vector: Float64Array): Dim {
  const terms: Term[] = [];
  for (let i = 0; i < vector.length; i += 1) {
    const coef = vector[i]!;
    if (coef !== 0) {
      const monomial = basis.terms[i]!;
      terms.push({ coef, factors: monomial.factors, key: monomial.key, degree: monomial.degree });
    }
  }
  return fromTerms(terms);
}

/** Symbol values to order candidates by and to screen pairs: each symbol high, middle and low. */
function samplePoints(exprs: readonly Dim[]): Record<string, number>[] {
  const symbols = new Map<string, { min: number; max: number | undefined; step: number }>();
  const visit = (d: Dim) => {
    if (typeof d === 'number') return;
    for (const t of d.terms) for (const f of t.factors) {
      if (f.atom.kind === 'sym') symbols.set(f.atom.name, { min: f.atom.min, max: f.atom.max, step: f.atom.multipleOf ?? 1 });
      else if (f.atom.kind === 'floorDiv') visit(f.atom.num);
      else f.atom.args.forEach(visit);
    }
  };
  exprs.forEach(visit);
  const fit = (s: { min: number; max: number | undefined; step: number }, v: number) => {
    const up = Math.ceil(Math.max(v, s.min) / s.step) * s.step;
    return s.max !== undefined && up > s.max ? Math.floor(s.max / s.step) * s.step : up;
  };
  const levels = (s: { min: number; max: number | undefined; step: number }) => [fit(s, s.min + 4095), fit(s, s.min + 63), fit(s, s.min)];
  let points: Record<string, number>[] = [{}];
  for (const [name, s] of symbols) points = points.flatMap((p) => levels(s).map((v) => ({ ...p, [name]: v })));
  return points.slice(0, 27);
}

/** Values of the basis monomials at sample points (NaN past 2^53: such a point screens nothing out). */
function basisValues(basis: { readonly monomials: readonly Dim[] }, samples: readonly Record<string, number>[]): Float64Array[] {
  return samples.map((env) => {
    const values = new Float64Array(basis.monomials.length);
    basis.monomials.forEach((monomial, i) => {
      try {
        values[i] = evaluate(monomial, env);
      } catch {
        values[i] = Number.NaN;
      }
    });
    return values;
  });
}

function dot(vector: Float64Array, values: Float64Array): number {
  let total = 0;
  for (let i = 0; i < vector.length; i += 1) if (vector[i] !== 0) total += vector[i]! * values[i]!;
  return total;
}

/**
 * Every block as one dense row: its coefficients over the basis, then its values at the
 * sample points. A live total kept as such a row carries its own sample values, so that
 * screening a pair of events costs no evaluation.
 */
interface Rows {
  readonly width: number;
  /** Where the sample values start in a row (= the number of monomials). */
  readonly k: number;
  readonly rows: readonly Float64Array[];
  /** Per block: its coefficients, sparse. */
  readonly sparse: readonly Vector[];
}

function rowsOf(basis: Basis): Rows {
  if (basis.rows !== undefined) return basis.rows;
  const k = basis.terms.length;
  const values = basisValues(basis, samplePoints(basis.monomials));
  const width = k + values.length;
  const byVector = new Map<Vector, Float64Array>();
  const rows = basis.blocks.map((block) => {
    let row = byVector.get(block);
    if (row === undefined) {
      row = new Float64Array(width);
      for (let i = 0; i < block.index.length; i += 1) row[block.index[i]!]! += block.coef[i]!;
      for (let j = 0; j < values.length; j += 1) row[k + j] = dot(row.subarray(0, k), values[j]!);
      byVector.set(block, row);
    }
    return row;
  });
  const result = { width, k, rows, sparse: basis.blocks };
  basis.rows = result;
  return result;
}

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
function walk(program: StepProgram, rows: Rows, repeat: Repetition | undefined, runs: readonly RunDelta[], onMark: (event: number, full: number, live: Float64Array, run: RunState | null, freed: boolean) => void, perCategory?: Map<Category, Float64Array>): Float64Array {
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
    candidates.push({ event: pendingEvent, copy, full: pendingFull + (pendingRun === null ? 0 : copy * pendingRun.events), row, run: pendingRun === null ? -1 : pendingRun.index });
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
function peakPoints(program: StepProgram, basis: Basis, rows: Rows, repeat: Repetition | undefined, runs: readonly RunDelta[], kept: readonly Candidate[]): PeakPoint[] {
  const { k } = rows;
  // Totals by category at the kept events: one more walk with a vector per category when a
  // candidate's totals are first read, their expressions for that candidate only.
  const vectorsByCandidate = once(() => {
    const wanted = new Map<number, Candidate[]>();
    for (const c of kept) wanted.set(c.event, [...(wanted.get(c.event) ?? []), c]);
    const byCategory = new Map<Candidate, Float64Array[]>();
    const perCategory = new Map<Category, Float64Array>(CATEGORIES.map((c) => [c, new Float64Array(k)]));
    walk(program, rows, repeat, runs, (event, _full, _live, run) => {
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
    }, perCategory);
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
    const point = { bytes: vectorExpr(basis, c.row.subarray(0, k)), phase: info.phase, label: fullLabel(program, repeat, c.event, c.copy), event: c.full } as PeakPoint;
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
