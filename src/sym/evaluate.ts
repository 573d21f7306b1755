import { fail } from '../errors.js';
import { show } from '../validate.js';
import { dimArg, isDim, recordArg } from './args.js';
import { atomExpr, checkSafe, type Atom, type Dim, type Expr, type SymAtom } from './expr.js';
import { floorDiv, max, mul, sum } from './ops.js';

/** Values (or expressions) for named symbols. */
export type Env = Readonly<Record<string, Dim>>;

function checkAssumptions(atom: SymAtom, value: number): void {
  const ok =
    Number.isSafeInteger(value) &&
    value >= atom.min &&
    (atom.max === undefined || value <= atom.max) &&
    (atom.multipleOf === undefined || value % atom.multipleOf === 0);
  if (!ok) {
    const rule = [
      `an integer >= ${atom.min}`,
      atom.max !== undefined ? `<= ${atom.max}` : '',
      atom.multipleOf !== undefined ? `a multiple of ${atom.multipleOf}` : '',
    ]
      .filter(Boolean)
      .join(', ');
    fail('bad-dimension', `value of ${atom.name} breaks its assumptions`, { path: ['env', atom.name], expected: rule, received: show(value) });
  }
}

const DIM = ['dim'];
const ENV = ['env'];

/** evaluate's symbol values: an object of safe integers >= 1 (every symbol's least value is 1 or more). */
function checkValues(env: unknown): void {
  const record = recordArg(env, ENV, '{ name: integer >= 1 }');
  for (const key of Object.keys(record)) {
    const value = record[key];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
      fail('bad-dimension', `the value of ${key} must be an integer >= 1`, { path: ['env', key], expected: 'an integer >= 1', received: show(value) });
  }
}

function evaluateAtom(atom: Atom, env: Readonly<Record<string, number>>, cache: Map<string, number>): number {
  const cached = cache.get(atom.key);
  if (cached !== undefined) return cached;
  let value: number;
  switch (atom.kind) {
    case 'sym': {
      // Own keys only: a symbol named toString has no value in {}.
      const given = Object.hasOwn(env, atom.name) ? env[atom.name] : undefined;
      if (given === undefined) fail('unbound-symbol', `no value for symbol ${atom.name}`, { path: ['env', atom.name], expected: `a value for ${atom.name}` });
      checkAssumptions(atom, given);
      value = given;
      break;
    }
    case 'floorDiv':
      value = floorDiv(evaluateExpr(atom.num, env, cache), atom.den) as number;
      break;
    case 'max':
      value = Math.max(...atom.args.map((arg) => (typeof arg === 'number' ? arg : evaluateExpr(arg, env, cache))));
      break;
  }
  cache.set(atom.key, value);
  return value;
}

function evaluateExpr(expr: Expr, env: Readonly<Record<string, number>>, cache: Map<string, number>): number {
  let total = 0;
  for (const term of expr.terms) {
    let value = term.coef;
    for (const factor of term.factors) {
      const base = evaluateAtom(factor.atom, env, cache);
      for (let i = 0; i < factor.power; i += 1) value = checkSafe(value * base, 'product');
    }
    total = checkSafe(total + value, 'sum');
  }
  return total;
}

/**
 * The exact integer value of a dimension for concrete symbol values. Fails with a
 * VramError when a symbol is missing, a value breaks its assumptions, or the result
 * would pass 2^53.
 *
 * @example
 * ```ts
 * import { evaluate, mul, sym } from 'vram-ts';
 * console.log(evaluate(mul(sym('B'), 3), { B: 4 })); // 12
 * ```
 */
export function evaluate(dim: Dim, env: Readonly<Record<string, number>>): number {
  if (!isDim(dim)) dimArg(dim, DIM);
  checkValues(env);
  if (typeof dim === 'number') return dim;
  return evaluateExpr(dim, env, new Map());
}

/**
 * A fast evaluator for one expression at many points (used by solvers).
 *
 * @example
 * ```ts
 * import { compile, mul, sym } from 'vram-ts';
 * const f = compile(mul(sym('S'), sym('S')));
 * console.log(f({ S: 12 })); // 144
 * ```
 */
export function compile(dim: Dim): (env: Readonly<Record<string, number>>) => number {
  if (!isDim(dim)) dimArg(dim, DIM);
  if (typeof dim === 'number') return () => dim;
  // Run at every probe of a solver: the values it reads are checked as they are read.
  return (env) => evaluateExpr(dim, recordArg(env, ENV, '{ name: integer >= 1 }') as Readonly<Record<string, number>>, new Map());
}

function substituteAtom(atom: Atom, env: Env): Dim {
  switch (atom.kind) {
    case 'sym': {
      const given = Object.hasOwn(env, atom.name) ? env[atom.name] : undefined;
      if (given === undefined) return atomExpr(atom);
      if (typeof given === 'number') checkAssumptions(atom, given);
      return given;
    }
    case 'floorDiv':
      return floorDiv(substitute(atom.num, env), atom.den);
    case 'max':
      return max(...atom.args.map((arg) => substitute(arg, env)));
  }
}

/**
 * Replaces some symbols by numbers or other expressions and re-canonicalises.
 *
 * @example
 * ```ts
 * import { mul, substitute, sym } from 'vram-ts';
 * const B = sym('B');
 * console.log(String(substitute(mul(B, sym('S')), { S: 128 }))); // "128·B"
 * ```
 */
export function substitute(dim: Dim, env: Env): Dim {
  if (!isDim(dim)) dimArg(dim, DIM);
  for (const [key, value] of Object.entries(recordArg(env, ENV, '{ name: integer | Expr }'))) if (!isDim(value)) dimArg(value, ['env', key]);
  if (typeof dim === 'number') return dim;
  const parts: Dim[] = [];
  for (const term of dim.terms) {
    let value: Dim = term.coef;
    for (const factor of term.factors) {
      const base = substituteAtom(factor.atom, env);
      for (let i = 0; i < factor.power; i += 1) value = mul(value, base);
    }
    parts.push(value);
  }
  return sum(parts);
}
