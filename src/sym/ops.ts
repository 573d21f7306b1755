import { fail } from '../errors.js';
import { show } from '../validate.js';
import { dimArg, dimsArg, isDim, recordArg } from './args.js';
import { bounds } from './bounds.js';
import { atomExpr, checkSafe, dimKey, fromTerms, isExpr, makeTerm, termsOf, type Dim, type Expr, type SymAssumptions, type Term } from './expr.js';

const NAME = /^[A-Za-z_][A-Za-z0-9_']*$/;
/** The longest symbol name: a name is part of every key of every expression it is in. */
const NAME_MAX = 256;

const ASSUMPTIONS = ['min', 'max', 'multipleOf'] as const;

/** sym's assumptions: an object of `min`, `max` and `multipleOf` only, each a safe integer >= 1 and max >= min; a VramError at the key otherwise. */
function checkAssumptions(name: string, assumptions: unknown): void {
  const record = recordArg(assumptions, ['assumptions'], '{ min?, max?, multipleOf? }');
  for (const key of Object.keys(record)) {
    const value = record[key];
    if (!(ASSUMPTIONS as readonly string[]).includes(key))
      fail('bad-symbol', `unknown assumption of ${name}`, { path: ['assumptions', key], expected: ASSUMPTIONS.join(' | '), received: show(value) });
    if (value !== undefined && (!Number.isSafeInteger(value) || (value as number) < 1))
      fail('bad-symbol', `${key} of ${name} must be an integer >= 1`, { path: ['assumptions', key], expected: 'an integer >= 1', received: show(value) });
  }
  const { min = 1, max } = record as SymAssumptions;
  if (max !== undefined && max < min)
    fail('bad-symbol', `max of ${name} must be >= min`, { path: ['assumptions', 'max'], expected: `an integer >= ${min}`, received: String(max) });
}

/**
 * A named symbolic dimension (an integer >= 1 unless `min` says more).
 *
 * @example
 * ```ts
 * import { estimate, evaluate, mobilenetV3Small, sym } from 'vram-ts';
 * const B = sym('B');
 * const { bytes } = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [B, 3, 224, 224] });
 * console.log(String(bytes.activations)); // "16169824·B + 96896"
 * console.log(evaluate(bytes.activations, { B: 1 })); // 16266720
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function sym(name: string, assumptions: SymAssumptions = {}): Expr {
  if (typeof name !== 'string' || name.length > NAME_MAX || !NAME.test(name))
    fail('bad-symbol', `a symbol name is a letter or _ followed by letters, digits, _ (at most ${NAME_MAX})`, {
      path: ['name'],
      expected: 'a name such as B or seq_len',
      received: show(name),
    });
  checkAssumptions(name, assumptions);
  const min = assumptions.min ?? 1;
  const { max, multipleOf } = assumptions;
  const extra = [max !== undefined ? `<=${max}` : '', multipleOf !== undefined ? `%${multipleOf}` : '', min !== 1 ? `>=${min}` : ''].join('');
  return atomExpr({ kind: 'sym', key: extra === '' ? name : `${name}{${extra}}`, name, min, max, multipleOf });
}

/**
 * Results of expression arithmetic: a trace asks for the same products and sums over and over
 * (every layer of a model has the same shapes). Looked up by the operands themselves (equal
 * results are then one object, so operands mostly are too), then by their canonical keys (equal
 * keys mean equal expressions). Bounded: cleared when full.
 */
const byOperands = new Map<string, Map<Dim, Map<Dim, Dim>>>();
const byKeys = new Map<string, Dim>();
let remembered_ = 0;
const RESULTS_MAX = 50_000;

function remembered(op: string, a: Dim, b: Dim, make: () => Dim): Dim {
  let table = byOperands.get(op);
  if (table === undefined) {
    table = new Map();
    byOperands.set(op, table);
  }
  let inner = table.get(a);
  if (inner === undefined) {
    inner = new Map();
    table.set(a, inner);
  }
  const same = inner.get(b);
  if (same !== undefined) return same;
  const key = `${op}${typeof a === 'number' ? a : a.key}|${typeof b === 'number' ? b : b.key}`;
  let made = byKeys.get(key);
  if (made === undefined) {
    made = make();
    if (remembered_ >= RESULTS_MAX) {
      byKeys.clear();
      byOperands.clear();
      remembered_ = 0;
    }
    byKeys.set(key, made);
  }
  // After a clear the tables above may be gone: store in the current ones.
  let current = byOperands.get(op);
  if (current === undefined) {
    current = new Map();
    byOperands.set(op, current);
  }
  let row = current.get(a);
  if (row === undefined) {
    row = new Map();
    current.set(a, row);
  }
  row.set(b, made);
  remembered_ += 1;
  return made;
}

function checkDim(dim: Dim): Dim {
  if (typeof dim === 'number') checkSafe(dim, 'dimension');
  return dim;
}

// The paths of the arithmetic's arguments (made once: add and mul run for every shape of a trace).
const A = ['a'];
const B = ['b'];
const DEN = ['den'];
const DIMS = ['dims'];

/**
 * `a + b` for numbers or expressions.
 *
 * @example
 * ```ts
 * import { add, sym } from 'vram-ts';
 * console.log(String(add(sym('S'), 1))); // "S + 1"
 * ```
 */
export function add(a: Dim, b: Dim): Dim {
  if (!isDim(a)) dimArg(a, A);
  if (!isDim(b)) dimArg(b, B);
  if (typeof a === 'number' && typeof b === 'number') return checkSafe(a + b, 'sum');
  if (a === 0) return checkDim(b);
  if (b === 0) return checkDim(a);
  return remembered('+', a, b, () => fromTerms([...termsOf(checkDim(a)), ...termsOf(checkDim(b))]));
}

/**
 * Sum of many dimensions (0 for none).
 *
 * @example
 * ```ts
 * import { sum } from 'vram-ts';
 * console.log(sum([1, 2, 3])); // 6
 * ```
 */
export function sum(dims: readonly Dim[]): Dim {
  dimsArg(dims, DIMS);
  let numeric = 0;
  const terms: Term[] = [];
  for (const dim of dims) {
    if (typeof dim === 'number') numeric = checkSafe(numeric + dim, 'sum');
    else terms.push(...dim.terms);
  }
  if (terms.length === 0) return numeric;
  if (numeric !== 0) terms.push(makeTerm(numeric, []));
  return fromTerms(terms);
}

/**
 * `-a`.
 *
 * @example
 * ```ts
 * import { neg } from 'vram-ts';
 * console.log(neg(4)); // -4
 * ```
 */
export function neg(a: Dim): Dim {
  if (!isDim(a)) dimArg(a, A);
  return mul(a, -1);
}

/**
 * `a - b`.
 *
 * @example
 * ```ts
 * import { sub, sym } from 'vram-ts';
 * console.log(String(sub(sym('H'), 2))); // "H - 2"
 * ```
 */
export function sub(a: Dim, b: Dim): Dim {
  if (!isDim(a)) dimArg(a, A);
  if (!isDim(b)) dimArg(b, B);
  if (typeof a === 'number' && typeof b === 'number') return checkSafe(a - b, 'difference');
  return add(a, mul(b, -1));
}

/**
 * `a · b`, exact.
 *
 * @example
 * ```ts
 * import { mul, sym } from 'vram-ts';
 * console.log(String(mul(mul(sym('B'), 3), sym('H')))); // "3·B·H"
 * ```
 */
export function mul(a: Dim, b: Dim): Dim {
  if (!isDim(a)) dimArg(a, A);
  if (!isDim(b)) dimArg(b, B);
  if (typeof a === 'number' && typeof b === 'number') return checkSafe(a * b, 'product');
  if (a === 0 || b === 0) return 0;
  if (a === 1) return b;
  if (b === 1) return a;
  return remembered('*', a, b, () => {
    const terms: Term[] = [];
    for (const ta of termsOf(checkDim(a))) {
      for (const tb of termsOf(checkDim(b))) {
        terms.push(makeTerm(checkSafe(ta.coef * tb.coef, 'coefficient'), [...ta.factors, ...tb.factors]));
      }
    }
    return fromTerms(terms);
  });
}

/**
 * Product of many dimensions (1 for none).
 *
 * @example
 * ```ts
 * import { product } from 'vram-ts';
 * console.log(product([2, 3, 4])); // 24
 * ```
 */
export function product(dims: readonly Dim[]): Dim {
  dimsArg(dims, DIMS);
  let numeric = 1;
  let symbolic: Dim = 1;
  // Indexed: shapes are frozen arrays, which for...of iterates through an allocated iterator.
  for (let i = 0; i < dims.length; i += 1) {
    const dim = dims[i]!;
    if (typeof dim === 'number') numeric = checkSafe(numeric * dim, 'product');
    else symbolic = mul(symbolic, dim);
  }
  return mul(symbolic, numeric);
}

function floorInt(a: number, b: number): number {
  let q = Math.floor(a / b);
  // Floating division can land one off near 2^53; correct it exactly.
  while (q * b > a) q -= 1;
  while ((q + 1) * b <= a) q += 1;
  return q;
}

function gcd(a: number, b: number): number {
  let x = Math.abs(a);
  let y = Math.abs(b);
  while (y !== 0) [x, y] = [y, x % y];
  return x;
}

function checkDivisor(den: number): void {
  if (!Number.isSafeInteger(den) || den < 1)
    fail('bad-divisor', 'divisor must be an integer >= 1', { path: DEN, expected: 'an integer >= 1', received: show(den) });
}

/**
 * `floor(a / den)` for a positive integer divisor; exact and canonical
 * (whole multiples are pulled out, nested floors merged).
 *
 * @example
 * ```ts
 * import { floorDiv, sym } from 'vram-ts';
 * console.log(String(floorDiv(sym('H'), 2))); // "⌊H/2⌋"
 * console.log(floorDiv(7, 2)); // 3
 * ```
 */
export function floorDiv(a: Dim, den: number): Dim {
  if (!isDim(a)) dimArg(a, A);
  checkDivisor(den);
  if (typeof a === 'number') return floorInt(checkSafe(a, 'dimension'), den);
  if (den === 1) return a;
  return remembered('/', a, den, () => floorOfExpr(a, den));
}

function floorOfExpr(a: Expr, den: number): Dim {
  // Split every coefficient c = den·q + r with 0 <= r < den: the q parts leave the floor.
  const quotient: Term[] = [];
  const remainder: Term[] = [];
  for (const term of a.terms) {
    const q = floorInt(term.coef, den);
    const r = term.coef - q * den;
    if (q !== 0) quotient.push(makeTerm(q, term.factors));
    if (r !== 0) remainder.push(makeTerm(r, term.factors));
  }
  const rest = fromTerms(remainder);
  return add(fromTerms(quotient), floorOfRemainder(rest, den));
}

function floorOfRemainder(rest: Dim, den: number): Dim {
  if (typeof rest === 'number') return floorInt(rest, den);
  // floor(g·x / (g·d)) = floor(x / d) when g divides the whole numerator.
  let g = den;
  for (const term of rest.terms) g = gcd(g, term.coef);
  if (g > 1) return floorDiv(scaleDown(rest, g), den / g);
  // floor((floor(x/d') + c) / d) = floor((x + c·d') / (d'·d)) for integers c and d, d' >= 1.
  const nested = rest.terms.find(
    (term) => term.factors.length === 1 && term.factors[0]!.power === 1 && term.factors[0]!.atom.kind === 'floorDiv' && term.coef === 1,
  );
  const others = rest.terms.filter((term) => term !== nested);
  if (nested && others.every((term) => term.factors.length === 0)) {
    const atom = nested.factors[0]!.atom;
    if (atom.kind === 'floorDiv') {
      const constant = others.length > 0 ? others[0]!.coef : 0;
      return floorDiv(add(atom.num, checkSafe(constant * atom.den, 'coefficient')), checkSafe(atom.den * den, 'divisor'));
    }
  }
  return atomExpr({ kind: 'floorDiv', key: `floor(${rest.key}/${den})`, num: rest, den });
}

function scaleDown(expr: Expr, g: number): Dim {
  return fromTerms(expr.terms.map((term) => makeTerm(term.coef / g, term.factors)));
}

/**
 * `ceil(a / den)` for a positive integer divisor, as `floor((a + den - 1) / den)`.
 *
 * @example
 * ```ts
 * import { ceilDiv } from 'vram-ts';
 * console.log(ceilDiv(7, 2)); // 4
 * ```
 */
export function ceilDiv(a: Dim, den: number): Dim {
  if (!isDim(a)) dimArg(a, A);
  checkDivisor(den);
  return floorDiv(add(a, den - 1), den);
}

/**
 * The largest of the given dimensions; arguments that another one always
 * dominates under the symbols' assumptions are dropped.
 *
 * @example
 * ```ts
 * import { max, sym } from 'vram-ts';
 * const S = sym('S');
 * console.log(String(max(S, 1))); // "S"
 * console.log(max(3, 5)); // 5
 * ```
 */
export function max(...dims: readonly Dim[]): Dim {
  if (dims.length === 0) fail('empty-max', 'max needs at least one argument', { path: DIMS, expected: 'at least one dimension' });
  dimsArg(dims, DIMS);
  const flat: Dim[] = [];
  for (const dim of dims) {
    checkDim(dim);
    const only = isExpr(dim) && dim.terms.length === 1 ? dim.terms[0]! : undefined;
    const atom = only && only.coef === 1 && only.factors.length === 1 && only.factors[0]!.power === 1 ? only.factors[0]!.atom : undefined;
    if (atom?.kind === 'max') flat.push(...atom.args);
    else flat.push(dim);
  }
  if (flat.every((dim) => typeof dim === 'number')) return Math.max(...(flat as number[]));
  const unique = new Map<string, Dim>();
  for (const dim of flat) unique.set(dimKey(dim), dim);
  const candidates = [...unique.values()];
  const kept = candidates.filter(
    (dim, i) =>
      !candidates.some((other, j) => {
        if (j === i) return false;
        const lower = bounds(sub(other, dim)).min;
        // Drop dim when other >= dim always; on ties keep the first.
        return lower > 0 || (lower === 0 && j < i);
      }),
  );
  return maxAtom(kept);
}

/**
 * The max of arguments the caller already knows to be mutually undominated (the step
 * simulator prunes its peak candidates itself): no pairwise check.
 */
export function maxAtom(args: readonly Dim[]): Dim {
  if (args.length === 0) fail('empty-max', 'max needs at least one argument');
  const unique = [...new Map(args.map((d) => [dimKey(d), d])).values()];
  if (unique.length === 1) return unique[0]!;
  if (unique.every((d) => typeof d === 'number')) return Math.max(...(unique as number[]));
  unique.sort((a, b) => (dimKey(a) < dimKey(b) ? -1 : dimKey(a) > dimKey(b) ? 1 : 0));
  return atomExpr({ kind: 'max', key: `max(${unique.map(dimKey).join(',')})`, args: unique });
}
