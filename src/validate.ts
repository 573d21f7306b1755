import { VramError, type VramIssue } from './errors.js';

/** Where a value sits in the caller's arguments. */
export type Path = readonly (string | number)[];

/**
 * A run-time check of one value: pushes an issue (with the value's path) for each problem.
 * Plain-JavaScript and browser callers get the same errors TypeScript would have given.
 */
export type Check = (value: unknown, path: Path, issues: VramIssue[]) => void;

/** How a value looks in an issue: short, and never a crash for odd objects. */
export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return 'an object';
}

/**
 * A value as JSON where it has a JSON form (`[1,2]`, `{"a":1}`, cut at 200 characters), else as
 * {@link show} says it: BigInts, symbols, cycles and odd objects never crash the message.
 */
export function showJson(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined;
  }
  if (typeof text !== 'string') return show(value);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

function issue(issues: VramIssue[], path: Path, message: string, expected: string, value: unknown, code = 'bad-option'): void {
  issues.push({ path, code, message, expected, received: show(value) });
}

/** Edit distance (Levenshtein), for "did you mean". */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i += 1) {
    let previous = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j += 1) {
      const current = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, previous + (a[i - 1]!.toLowerCase() === b[j - 1]!.toLowerCase() ? 0 : 1));
      previous = current;
    }
  }
  return row[b.length]!;
}

/** The known name closest to a misspelt one, when it is close enough to be the intended one. */
export function didYouMean(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const d = distance(name, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

/** An integer in [min, max] (safe integers only). */
/* @__NO_SIDE_EFFECTS__ */
export function integer(min: number, max: number = Number.MAX_SAFE_INTEGER): Check {
  return (value, path, issues) => {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
      issue(
        issues,
        path,
        `must be an integer from ${min} to ${max === Number.MAX_SAFE_INTEGER ? '2^53 - 1' : max}`,
        `integer ${min} – ${max === Number.MAX_SAFE_INTEGER ? '2^53 - 1' : max}`,
        value,
      );
    }
  };
}

/** A finite number in [min, max]. */
/* @__NO_SIDE_EFFECTS__ */
export function number(min: number, max: number = Number.MAX_VALUE): Check {
  return (value, path, issues) => {
    if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max)
      issue(
        issues,
        path,
        `must be a number from ${min} to ${max === Number.MAX_VALUE ? 'any' : max}`,
        `number ${min} – ${max === Number.MAX_VALUE ? '∞' : max}`,
        value,
      );
  };
}

export const boolean: Check = (value, path, issues) => {
  if (typeof value !== 'boolean') issue(issues, path, 'must be true or false', 'true | false', value);
};

export const string: Check = (value, path, issues) => {
  if (typeof value !== 'string') issue(issues, path, 'must be a string', 'string', value);
};

/** A function (a callback such as repeat's layer maker or graph's build). */
export const func: Check = (value, path, issues) => {
  if (typeof value !== 'function') issue(issues, path, 'must be a function', 'function', value);
};

/** An integer >= min, or a pair of them (torch's `int | tuple[int, int]` sizes such as kernel and stride). */
/* @__NO_SIDE_EFFECTS__ */
export function intOrPair(min: number): Check {
  const one = integer(min);
  return anyOf([one, arrayOf(one, { min: 2, max: 2 })], `an integer >= ${min} or a pair of them`);
}

/** One of a list of strings, looked up as own values (never an inherited key); `noun` names the kind in the message. */
/* @__NO_SIDE_EFFECTS__ */
export function oneOf(values: readonly string[], noun = 'value'): Check {
  return (value, path, issues) => {
    if (typeof value === 'string' && values.includes(value)) return;
    const hint = typeof value === 'string' ? didYouMean(value, values) : undefined;
    issue(issues, path, `unknown ${noun}${hint !== undefined ? `; did you mean ${JSON.stringify(hint)}?` : ''}`, values.join(' | '), value);
  };
}

/** Longest list any option takes: past it a list is refused before its elements are read (a sparse `new Array(2**32 - 1)` would be a hang). */
const LONGEST_LIST = 10_000_000;

/** A list whose every element passes a check (a hole is checked as `undefined`, so it is refused where a value is needed). */
/* @__NO_SIDE_EFFECTS__ */
export function arrayOf(element: Check, limits: { readonly min?: number; readonly max?: number } = {}): Check {
  const min = limits.min ?? 0;
  const max = Math.min(limits.max ?? LONGEST_LIST, LONGEST_LIST);
  return (value, path, issues) => {
    if (!Array.isArray(value)) return issue(issues, path, 'must be a list', 'array', value);
    if (value.length < min || value.length > max) {
      issue(issues, path, `must have ${min} to ${max} elements`, `${min} – ${max} elements`, value);
      if (value.length > max) return;
    }
    for (let i = 0; i < value.length; i += 1) element(value[i], [...path, i], issues);
  };
}

/** Passes when any of the checks passes; otherwise reports what each would have accepted. */
/* @__NO_SIDE_EFFECTS__ */
export function anyOf(checks: readonly Check[], expected: string): Check {
  return (value, path, issues) => {
    const trials: VramIssue[][] = [];
    for (const check of checks) {
      const trial: VramIssue[] = [];
      check(value, path, trial);
      if (trial.length === 0) return;
      trials.push(trial);
    }
    // A misspelt name is better answered by the list it missed (with its "did you mean").
    const named = typeof value === 'string' ? trials.find((t) => t.length === 1 && t[0]!.message.startsWith('unknown')) : undefined;
    if (named !== undefined) issues.push(named[0]!);
    else issue(issues, path, `must be ${expected}`, expected, value);
  };
}

/** Accepts anything (a value checked elsewhere, such as a model layer). */
export const anything: Check = () => undefined;

/** Fields of an options object: each key's check, and keys that are known but belong elsewhere (with the hint). */
export interface ObjectShape {
  readonly fields: Readonly<Record<string, Check>>;
  /** Keys callers put here by mistake, with where they belong. */
  readonly misplaced?: Readonly<Record<string, string>>;
  /** Keys that must be present. */
  readonly required?: readonly string[];
}

/**
 * An options object: a plain object whose keys are all known (an unknown key is an issue
 * with the closest known name), whose values pass their checks, and whose required keys are
 * there. Keys are read as own properties only.
 */
/* @__NO_SIDE_EFFECTS__ */
export function object(shape: ObjectShape): Check {
  const known = Object.keys(shape.fields);
  return (value, path, issues) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return issue(issues, path, 'must be an object', 'object', value);
    const record = value as Record<string, unknown>;
    for (const key of Object.keys(record)) {
      if (Object.hasOwn(shape.fields, key)) {
        if (record[key] !== undefined) shape.fields[key]!(record[key], [...path, key], issues);
        continue;
      }
      const misplaced = shape.misplaced !== undefined && Object.hasOwn(shape.misplaced, key) ? shape.misplaced[key] : undefined;
      const hint = misplaced ?? (didYouMean(key, known) !== undefined ? `did you mean ${JSON.stringify(didYouMean(key, known))}?` : undefined);
      issues.push({
        path: [...path, key],
        code: 'unknown-option',
        message: `unknown option${hint !== undefined ? `; ${hint}` : ''}`,
        expected: known.join(' | '),
        received: show(record[key]),
      });
    }
    for (const key of shape.required ?? []) {
      if (record[key] === undefined)
        issues.push({ path: [...path, key], code: 'missing-option', message: 'is required', expected: 'a value', received: 'missing' });
    }
  };
}

/**
 * Runs a check and throws one VramError listing every issue it found (all at once, not the
 * first only), or returns the value unchanged: `validate({ batch: 0, sqe: 2 }, object(...))`
 * reports both `batch` (out of range) and `sqe` (unknown; did you mean "seq"?).
 */
export function validate<T>(value: T, check: Check, path: Path = []): T {
  const issues: VramIssue[] = [];
  check(value, path, issues);
  if (issues.length > 0) throw new VramError(issues);
  return value;
}
