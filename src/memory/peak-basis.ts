import type { Dim, Term } from '../sym/expr.js';
import { dimKey, fromTerms, makeTerm, termsOf } from '../sym/expr.js';
import { evaluate } from '../sym/evaluate.js';
import { bounds } from '../sym/bounds.js';
import type { StepProgram } from './ledger.js';
import { blockBytes } from './ledger.js';

// The term basis of a program's block sizes: coefficient vectors, sample points, dense rows,
// and the interval proofs the peak's frontier uses (peak.ts).

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

/** A term basis with its bounds, and (once made) its dense rows and floor relaxation. */
export type Basis = ReturnType<typeof basisOf> & { rows?: Rows; relaxation?: Relaxation };

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
export function provesAtLeast(basis: Basis, high: Float64Array, low: Float64Array): boolean {
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
    for (const t of d.terms)
      for (const f of t.factors) {
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
export interface Rows {
  readonly width: number;
  /** Where the sample values start in a row (= the number of monomials). */
  readonly k: number;
  readonly rows: readonly Float64Array[];
  /** Per block: its coefficients, sparse. */
  readonly sparse: readonly Vector[];
}

/** The basis's dense rows, made once per basis. */
export function rowsOf(basis: Basis): Rows {
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
