import { fail } from '../errors.js';
import { formatExpr } from './format.js';

/**
 * What is known about a symbolic dimension: every value it takes is an integer
 * `>= min` (default 1), `<= max` when given, and a multiple of `multipleOf` when given.
 */
export interface SymAssumptions {
  readonly min?: number;
  readonly max?: number;
  readonly multipleOf?: number;
}

/** A named dimension such as `B`, `S`, `H` or `W`. */
export interface SymAtom {
  readonly kind: 'sym';
  readonly key: string;
  readonly name: string;
  readonly min: number;
  readonly max: number | undefined;
  readonly multipleOf: number | undefined;
}

/** `floor(num / den)` where `num` is not exactly divisible by the positive integer `den`. */
export interface FloorDivAtom {
  readonly kind: 'floorDiv';
  readonly key: string;
  readonly num: Expr;
  readonly den: number;
}

/** The largest of several dimensions, none of which dominates all the others. */
export interface MaxAtom {
  readonly kind: 'max';
  readonly key: string;
  readonly args: readonly Dim[];
}

/** The non-polynomial building blocks of an {@link Expr}. */
export type Atom = SymAtom | FloorDivAtom | MaxAtom;

/** An atom raised to a positive integer power inside a {@link Term}. */
export interface Factor {
  readonly atom: Atom;
  readonly power: number;
}

/** An integer coefficient times a product of atom powers; the constant term has no factors. */
export interface Term {
  readonly coef: number;
  readonly factors: readonly Factor[];
  /** Canonical key of the monomial (its factors), `''` for the constant. */
  readonly key: string;
  /** Total degree of the monomial. */
  readonly degree: number;
}

/**
 * A symbolic integer: a canonical polynomial with exact integer coefficients over
 * named dimensions, `floor(…/k)` atoms and `max(…)` atoms. Expressions that reduce
 * to a constant are plain numbers, so every size is a {@link Dim}.
 *
 * `String(expr)` reads like `1536·B·H·W + 4096`.
 */
export interface Expr {
  readonly kind: 'expr';
  /** Terms in canonical order: highest degree first, then by key; no zero coefficient. */
  readonly terms: readonly Term[];
  /** Canonical key: equal keys mean equal expressions. */
  readonly key: string;
  toString(): string;
}

/** A dimension or size: an exact integer, or an {@link Expr} when it depends on symbols. */
export type Dim = number | Expr;

/**
 * True when `value` is an {@link Expr} rather than a plain number.
 *
 * @example
 * ```ts
 * import { isExpr, mul, sym } from 'vram-ts';
 * console.log(isExpr(mul(sym('B'), 2)), isExpr(8)); // true false
 * ```
 */
export function isExpr(value: unknown): value is Expr {
  return typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'expr';
}

/** Fails unless `value` is a safe integer; every size in vram-ts is one. */
export function checkSafe(value: number, what = 'value'): number {
  if (!Number.isSafeInteger(value)) {
    fail('overflow', `${what} is not an exact integer (past 2^53 or not finite)`, {
      received: String(value),
    });
  }
  return value;
}

function exprToStringMethod(this: Expr): string {
  return formatExpr(this);
}

function factorKey(factor: Factor): string {
  return factor.power === 1 ? factor.atom.key : `${factor.atom.key}^${factor.power}`;
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Builds a term from a coefficient and (unsorted, possibly repeated) factors. */
export function makeTerm(coef: number, factors: readonly Factor[]): Term {
  const merged = new Map<string, Factor>();
  for (const factor of factors) {
    const existing = merged.get(factor.atom.key);
    merged.set(
      factor.atom.key,
      existing ? { atom: factor.atom, power: existing.power + factor.power } : factor,
    );
  }
  const sorted = [...merged.values()].sort((a, b) => compareStrings(a.atom.key, b.atom.key));
  let degree = 0;
  for (const factor of sorted) degree += factor.power;
  return { coef, factors: sorted, key: sorted.map(factorKey).join('*'), degree };
}

/**
 * Builds the canonical form from terms: like monomials merged, zeros dropped,
 * sorted. Returns a plain number when only a constant is left.
 */
export function fromTerms(terms: readonly Term[]): Dim {
  const byKey = new Map<string, Term>();
  for (const term of terms) {
    const existing = byKey.get(term.key);
    if (existing) {
      byKey.set(term.key, { ...existing, coef: checkSafe(existing.coef + term.coef, 'coefficient') });
    } else {
      byKey.set(term.key, term);
    }
  }
  const kept = [...byKey.values()].filter((term) => term.coef !== 0);
  kept.sort((a, b) => b.degree - a.degree || compareStrings(a.key, b.key));
  if (kept.length === 0) return 0;
  if (kept.length === 1 && kept[0]!.factors.length === 0) return kept[0]!.coef;
  const key = kept.map((term) => `${term.coef}${term.key === '' ? '' : `*${term.key}`}`).join('+');
  const expr: Expr = { kind: 'expr', terms: kept, key, toString: exprToStringMethod };
  return Object.freeze(expr);
}

/** The expression that is exactly one atom. */
export function atomExpr(atom: Atom): Expr {
  return fromTerms([makeTerm(1, [{ atom, power: 1 }])]) as Expr;
}

/** The terms of a dimension, a constant becoming a single term. */
export function termsOf(dim: Dim): readonly Term[] {
  if (typeof dim === 'number') return dim === 0 ? [] : [makeTerm(dim, [])];
  return dim.terms;
}

/** Canonical key of any dimension, numbers included. */
export function dimKey(dim: Dim): string {
  return typeof dim === 'number' ? String(dim) : dim.key;
}
