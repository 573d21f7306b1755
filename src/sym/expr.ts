import { fail } from '../errors.js';
import { wellFormed } from './args.js';
import { formatExpr } from './format.js';
import type { Atom, Dim, Expr, Factor, Term } from './types.js';

export type { Atom, Dim, Expr, Factor, FloorDivAtom, MaxAtom, SymAssumptions, SymAtom, Term } from './types.js';

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
    merged.set(factor.atom.key, existing ? { atom: factor.atom, power: existing.power + factor.power } : factor);
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
  return wellFormed(Object.freeze(expr));
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
