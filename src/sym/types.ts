/** The data of symbolic dimensions (what expr.ts builds, format.ts prints), apart so the printer needs no builder. */

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
