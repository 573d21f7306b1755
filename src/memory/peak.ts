import type { Dim, Term } from '../sym/expr.js';
import { dimKey, fromTerms, makeTerm, termsOf } from '../sym/expr.js';
import { compile } from '../sym/evaluate.js';
import { bounds } from '../sym/bounds.js';
import { maxAtom, sub } from '../sym/ops.js';
import type { Category, PeakPoint, StepProgram } from './ledger.js';
import { blockBytes, CATEGORIES, MARK, zeroTotals } from './ledger.js';
import { fullLabel, type Repetition } from './program.js';

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

/** The basis of a program's (rounded) block sizes. */
export function termBasis(program: StepProgram): TermBasis {
  const index = new Map<string, number>();
  const terms: Term[] = [];
  const cache = new Map<string, { index: Int32Array; coef: Float64Array }>();
  const blocks = program.sizes.map((size) => {
    const rounded = blockBytes(size, program.rounded);
    const key = dimKey(rounded);
    const known = cache.get(key);
    if (known !== undefined) return known;
    const own = termsOf(rounded);
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
    return vector;
  });
  return { terms, blocks };
}

/** The expression of a coefficient vector over a basis. */
export function vectorExpr(basis: TermBasis, vector: Float64Array): Dim {
  const terms: Term[] = [];
  vector.forEach((coef, i) => {
    if (coef !== 0) terms.push(makeTerm(coef, basis.terms[i]!.factors));
  });
  return fromTerms(terms);
}

/** Whether a dominates b everywhere, from the coefficients alone (every monomial is >= 0). */
function covers(a: Float64Array, b: Float64Array): boolean {
  for (let i = 0; i < a.length; i += 1) if (a[i]! < b[i]!) return false;
  return true;
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
function basisValues(basis: TermBasis, samples: readonly Record<string, number>[]): Float64Array[] {
  const compiled = basis.terms.map((term) => compile(fromTerms([term])));
  return samples.map((env) => {
    const values = new Float64Array(basis.terms.length);
    compiled.forEach((f, i) => {
      try {
        values[i] = f(env);
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

/** Adds `scale` times `vector` of a block into `target`. */
function addBlock(target: Float64Array, block: { readonly index: Int32Array; readonly coef: Float64Array }, scale: number): void {
  for (let i = 0; i < block.index.length; i += 1) target[block.index[i]!]! += scale * block.coef[i]!;
}

function addScaled(target: Float64Array, vector: Float64Array, scale: number): void {
  if (scale !== 0) for (let i = 0; i < target.length; i += 1) target[i]! += scale * vector[i]!;
}

/** Net coefficient vectors of each repeated run (total and by category), in log order. */
function runDeltas(program: StepProgram, basis: TermBasis, repeat: Repetition | undefined): { total: Float64Array; byCategory: Map<Category, Float64Array> }[] {
  const runs: { total: Float64Array; byCategory: Map<Category, Float64Array> }[] = [];
  if (repeat === undefined || repeat.times === 1) return runs;
  const k = basis.terms.length;
  let current: (typeof runs)[number] | null = null;
  program.log.forEach((entry, at) => {
    if (repeat.units[at] !== 1) {
      current = null;
      return;
    }
    if (current === null) {
      current = { total: new Float64Array(k), byCategory: new Map(CATEGORIES.map((c) => [c, new Float64Array(k)])) };
      runs.push(current);
    }
    if (entry === MARK) return;
    const id = entry >= 0 ? entry : -1 - entry;
    const sign = entry >= 0 ? 1 : -1;
    addBlock(current.total, basis.blocks[id]!, sign);
    addBlock(current.byCategory.get(program.categories[id]!)!, basis.blocks[id]!, sign);
  });
  return runs;
}

/** An event as a candidate: its reduced index, which copy of its run, its index in the full step. */
interface Candidate {
  readonly event: number;
  readonly copy: number;
  readonly full: number;
  readonly vector: Float64Array;
}

/**
 * Walks a program with coefficient vectors: `onMark` sees every event (with the copy-0 vector
 * and, inside a repeated run, the run's net vector), and the live vector advances by a run's
 * net bytes `times` over when the run ends.
 */
function walk(program: StepProgram, basis: TermBasis, repeat: Repetition | undefined, runs: ReturnType<typeof runDeltas>, onMark: (event: number, full: number, live: Float64Array, run: { delta: Float64Array; events: number; start: number; index: number } | null, freed: boolean) => void, perCategory?: Map<Category, Float64Array>): Float64Array {
  const n = repeat?.times ?? 1;
  const live = new Float64Array(basis.terms.length);
  let event = 0;
  let full = 0;
  let run = -1;
  let running: { delta: Float64Array; events: number; start: number; index: number } | null = null;
  let freed = false;
  const eventsInRun = runs.map(() => 0);
  // Events per run, to number the full step's events.
  if (runs.length > 0) {
    let r = -1;
    let inside = false;
    program.log.forEach((entry, at) => {
      const repeated = repeat!.units[at] === 1;
      if (repeated && !inside) r += 1;
      inside = repeated;
      if (repeated && entry === MARK) eventsInRun[r]! += 1;
    });
  }
  const close = () => {
    addScaled(live, runs[run]!.total, n - 1);
    if (perCategory !== undefined) for (const [c, v] of perCategory) addScaled(v, runs[run]!.byCategory.get(c)!, n - 1);
    full = running!.start + n * running!.events;
    running = null;
  };
  program.log.forEach((entry, at) => {
    const repeated = runs.length > 0 && repeat!.units[at] === 1;
    if (repeated && running === null) {
      run += 1;
      running = { delta: runs[run]!.total, events: eventsInRun[run]!, start: full, index: run };
    } else if (!repeated && running !== null) close();
    if (entry === MARK) {
      onMark(event, full, live, running, freed);
      freed = false;
      event += 1;
      full += 1;
      return;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    const sign = entry >= 0 ? 1 : -1;
    addBlock(live, basis.blocks[id]!, sign);
    if (perCategory !== undefined) addBlock(perCategory.get(program.categories[id]!)!, basis.blocks[id]!, sign);
    if (entry < 0) freed = true;
  });
  if (running !== null) close();
  return live;
}

/**
 * The peak of a symbolic program as an expression. Events whose live set a later event's
 * contains are dropped on the way (only allocations between them); the rest form a Pareto
 * frontier: a candidate goes when another covers it coefficient by coefficient, or (for the
 * few pairs where sampled values say so) when interval bounds prove the difference
 * non-negative. The max of the frontier is the peak; each frontier event is a candidate with
 * its totals by category. Exact: every kept candidate is a real event, and every dropped one
 * is below a kept one everywhere. An event of a repeated run stands for its copies: at any
 * values the highest is the first or the last copy (the total is affine in the copy), so both
 * are candidates.
 */
export function programPeak(program: StepProgram, repeat?: Repetition): { bytes: Dim; candidates: PeakPoint[] } {
  const basis = termBasis(program);
  const n = repeat?.times ?? 1;
  const runs = runDeltas(program, basis, repeat);
  const candidates: Candidate[] = [];
  let pending: (Candidate & { readonly run: number })[] = [];
  walk(program, basis, repeat, runs, (event, full, live, run, freed) => {
    // Marks with only allocations between them: the later one contains the earlier one. For a
    // run's first copy that holds only within its own run (the other copies come between).
    const here = run === null ? -1 : run.index;
    if (freed) candidates.push(...pending);
    else candidates.push(...pending.filter((c) => c.run >= 0 && c.copy === 0 && c.run !== here));
    if (run === null) pending = [{ event, copy: 0, full, vector: live.slice(), run: -1 }];
    else {
      const last = live.slice();
      addScaled(last, run.delta, n - 1);
      pending = [
        { event, copy: 0, full, vector: live.slice(), run: here },
        { event, copy: n - 1, full: full + (n - 1) * run.events, vector: last, run: here },
      ];
    }
  });
  candidates.push(...pending);

  const exprs = basis.terms.map((t) => fromTerms([t]));
  const samples = samplePoints(exprs);
  const values = basisValues(basis, samples);
  const scored = candidates.map((c) => ({ ...c, at: values.map((v) => dot(c.vector, v)) }));
  // Largest first at the largest sample point: a candidate is mostly dropped by one met earlier.
  scored.sort((a, b) => (b.at[0]! || 0) - (a.at[0]! || 0) || a.full - b.full);
  type Kept = (typeof scored)[number] & { expr?: Dim };
  const exprOf = (c: Kept): Dim => (c.expr ??= vectorExpr(basis, c.vector));
  const below = (low: Kept, high: Kept): boolean => {
    if (covers(high.vector, low.vector)) return true;
    if (!low.at.every((v, i) => v <= high.at[i]!)) return false;
    return bounds(sub(exprOf(high), exprOf(low))).min >= 0;
  };
  let kept: Kept[] = [];
  for (const c of scored) {
    if (kept.some((h) => below(c, h))) continue;
    kept = kept.filter((h) => !below(h, c));
    kept.push(c);
  }
  kept.sort((a, b) => a.full - b.full);

  // Totals by category at the kept events: one more walk with a vector per category.
  const wanted = new Map<number, Kept[]>();
  for (const c of kept) wanted.set(c.event, [...(wanted.get(c.event) ?? []), c]);
  const byCategory = new Map<Kept, Record<Category, Dim>>();
  const perCategory = new Map<Category, Float64Array>(CATEGORIES.map((c) => [c, new Float64Array(basis.terms.length)]));
  walk(program, basis, repeat, runs, (event, _full, _live, run) => {
    for (const c of wanted.get(event) ?? []) {
      const totals: Record<Category, Dim> = zeroTotals();
      for (const category of CATEGORIES) {
        const vector = perCategory.get(category)!.slice();
        if (run !== null) addScaled(vector, runs[run.index]!.byCategory.get(category)!, c.copy);
        totals[category] = vectorExpr(basis, vector);
      }
      byCategory.set(c, totals);
    }
  }, perCategory);
  const points: PeakPoint[] = kept.map((c) => {
    const info = program.events[c.event]!;
    return { bytes: exprOf(c), phase: info.phase, label: fullLabel(program, repeat, c.event, c.copy), event: c.full, byCategory: byCategory.get(c)! };
  });
  return { bytes: points.length === 1 ? points[0]!.bytes : maxAtom(points.map((p) => p.bytes)), candidates: points };
}

/** Live bytes of a symbolic program at its first event and after its last entry. */
export function programEnds(program: StepProgram, repeat?: Repetition): { first: Dim; last: Dim } {
  const basis = termBasis(program);
  let first: Dim | null = null;
  const last = walk(program, basis, repeat, runDeltas(program, basis, repeat), (_e, _f, live) => {
    first ??= vectorExpr(basis, live);
  });
  return { first: first ?? 0, last: vectorExpr(basis, last) };
}

/**
 * The max of expressions, keeping only those no other one always exceeds: numbers at sample
 * points screen the pairs, interval bounds of the difference decide.
 */
export function prunedMax(dims: readonly Dim[]): Dim {
  const flat: Dim[] = [];
  for (const d of dims) {
    const only = typeof d !== 'number' && d.terms.length === 1 && d.terms[0]!.coef === 1 && d.terms[0]!.factors.length === 1 && d.terms[0]!.factors[0]!.power === 1 ? d.terms[0]!.factors[0]!.atom : undefined;
    if (only?.kind === 'max') flat.push(...only.args);
    else flat.push(d);
  }
  const samples = samplePoints(flat);
  const rows = flat.map((d) => {
    const f = compile(d);
    return {
      d,
      at: samples.map((env) => {
        try {
          return f(env);
        } catch {
          return Number.NaN;
        }
      }),
    };
  });
  let kept: typeof rows = [];
  for (const row of rows) {
    const below = (a: typeof row, b: typeof row) => a.at.every((v, i) => v <= b.at[i]!) && bounds(sub(b.d, a.d)).min >= 0;
    if (kept.some((k) => below(row, k))) continue;
    kept = kept.filter((k) => !below(k, row));
    kept.push(row);
  }
  return maxAtom(kept.map((k) => k.d));
}
