import { fail } from '../errors.js';
import { show, type Path } from '../validate.js';
import type { Dim } from './types.js';

/**
 * Run-time checks of the symbolic functions' arguments (apart from expr.ts, so that the printer
 * can check its own without an import circle): plain-JavaScript callers get a VramError with the
 * argument's path, never a TypeError from deep inside or a NaN passed on.
 */

/** Expressions known to be well formed: every one fromTerms makes, and those checked once. */
const WELL_FORMED = new WeakSet<object>();

/** Marks an expression fromTerms made (canonical by construction). */
export function wellFormed<E extends object>(expr: E): E {
  WELL_FORMED.add(expr);
  return expr;
}

// Bounds of a foreign expression's shape: a real one nests floors and maxes a few levels deep and
// raises atoms to small powers; a forged one could nest forever, or loop a power 10^15 times.
const MAX_DEPTH = 200;
const MAX_POWER = 1000;

/**
 * Whether `value` is a dimension: a safe integer, or an expression, made here or (another copy
 * of the package, a structured clone) shaped as one all the way down. Never throws, even for
 * getters that do.
 */
export function isDim(value: unknown): value is Dim {
  if (typeof value === 'number') return Number.isSafeInteger(value);
  if (typeof value !== 'object' || value === null) return false;
  if (WELL_FORMED.has(value)) return true;
  try {
    return isExprShaped(value, 0, new Set());
  } catch {
    return false;
  }
}

type Loose = Readonly<Record<string, unknown>>;

const count = (value: unknown, min: number): boolean => typeof value === 'number' && Number.isSafeInteger(value) && value >= min;

/** Own keys all among `known` (a forged expression's extra `erms: NaN` would ride along in every result). */
const only = (value: object, known: readonly string[]): boolean => Object.keys(value).every((key) => known.includes(key));

/** Every element of a list, holes included (which `every` skips). */
function all(list: readonly unknown[], test: (item: unknown) => boolean): boolean {
  for (let i = 0; i < list.length; i += 1) if (!test(list[i])) return false;
  return true;
}

const KEYS = {
  expr: ['kind', 'terms', 'key', 'toString'],
  term: ['coef', 'factors', 'key', 'degree'],
  factor: ['atom', 'power'],
  sym: ['kind', 'key', 'name', 'min', 'max', 'multipleOf'],
  floorDiv: ['kind', 'key', 'num', 'den'],
  max: ['kind', 'key', 'args'],
} as const;

function isExprShaped(value: object, depth: number, open: Set<object>): boolean {
  if (WELL_FORMED.has(value)) return true;
  const e = value as Loose;
  if (depth > MAX_DEPTH || open.has(value) || e.kind !== 'expr' || typeof e.key !== 'string' || !Array.isArray(e.terms) || e.terms.length === 0) return false;
  if (!only(value, KEYS.expr) || (e.toString !== undefined && typeof e.toString !== 'function')) return false;
  open.add(value);
  const ok = all(e.terms as unknown[], (term) => isTermShaped(term, depth, open));
  open.delete(value);
  if (ok) WELL_FORMED.add(value);
  return ok;
}

function isTermShaped(value: unknown, depth: number, open: Set<object>): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const t = value as Loose;
  if (!only(value, KEYS.term) || !count(t.coef, Number.MIN_SAFE_INTEGER) || t.coef === 0 || typeof t.key !== 'string' || !count(t.degree, 0)) return false;
  if (!Array.isArray(t.factors)) return false;
  return all(t.factors as unknown[], (factor) => {
    if (typeof factor !== 'object' || factor === null || !only(factor, KEYS.factor)) return false;
    const f = factor as Loose;
    return count(f.power, 1) && (f.power as number) <= MAX_POWER && isAtomShaped(f.atom, depth, open);
  });
}

function isAtomShaped(value: unknown, depth: number, open: Set<object>): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const a = value as Loose;
  if (typeof a.key !== 'string' || !(a.kind === 'sym' || a.kind === 'floorDiv' || a.kind === 'max') || !only(value, KEYS[a.kind])) return false;
  const inner = (dim: unknown) =>
    typeof dim === 'number' ? Number.isSafeInteger(dim) : typeof dim === 'object' && dim !== null && isExprShaped(dim, depth + 1, open);
  switch (a.kind) {
    case 'sym':
      return (
        typeof a.name === 'string' &&
        count(a.min, 1) &&
        (a.max === undefined || (count(a.max, 1) && (a.max as number) >= (a.min as number))) &&
        (a.multipleOf === undefined || count(a.multipleOf, 1))
      );
    case 'floorDiv':
      return count(a.den, 1) && typeof a.num === 'object' && a.num !== null && inner(a.num);
    case 'max':
      return Array.isArray(a.args) && a.args.length > 0 && all(a.args as unknown[], inner);
    default:
      return false;
  }
}

/** A dimension argument, or a VramError at `path` (a number past 2^53 or not finite is an `overflow`). */
export function dimArg(value: unknown, path: Path): Dim {
  if (isDim(value)) return value;
  if (typeof value === 'number')
    fail('overflow', 'is not an exact integer (past 2^53 or not finite)', { path, expected: 'a safe integer', received: String(value) });
  return fail('bad-dimension', 'must be a dimension: an integer or an expression of sym()', { path, expected: 'integer | Expr', received: show(value) });
}

/** A list of dimensions, each checked (paths `[...path, i]`). */
export function dimsArg(value: unknown, path: Path): readonly Dim[] {
  if (!Array.isArray(value)) fail('bad-dimension', 'must be a list of dimensions', { path, expected: 'array of integer | Expr', received: show(value) });
  for (let i = 0; i < value.length; i += 1) if (!isDim(value[i])) dimArg(value[i], [...path, i]);
  return value;
}

/** An object argument (symbol values, assumptions), or a VramError at `path`. */
export function recordArg(value: unknown, path: Path, expected: string): Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail('bad-option', 'must be an object', { path, expected, received: show(value) });
  return value as Readonly<Record<string, unknown>>;
}
