/** Strict readers for the command's option values. */
import { GPUS, VramError, memoryBudget, transformersRules } from '../index.js';
import { usage } from './errors.js';

const count = (n: number) => n.toLocaleString('en-US');

/**
 * A whole number written in decimal digits only (no sign, exponent, hex, spaces or fraction),
 * a safe integer within [min, max]; the error names the flag and the range.
 */
export function wholeNumber(value: string, flag: string, min: number, max: number): number {
  const range = `${count(min)} – ${count(max)}`;
  if (!/^[0-9]+$/.test(value)) usage(flag, 'must be a whole number in decimal digits', { expected: range, received: JSON.stringify(value) });
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) usage(flag, 'out of range', { expected: range, received: value });
  return n;
}

/** A number as JSON writes one (`8`, `0.04`, `1e-6`, `-1`): no `+`, no leading zeros, no hex, no spaces. */
const NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$/;

/** The number `text` writes (as JSON would), or undefined when it is not one. */
export function numberOf(text: string): number | undefined {
  const n = NUMBER.test(text) ? Number(text) : Number.NaN;
  return Number.isFinite(n) ? n : undefined;
}

/** A number ≥ 0 written as JSON writes one; the error names the flag. */
export function decimal(value: string, flag: string): number {
  const n = numberOf(value);
  if (n === undefined || n < 0) usage(flag, 'must be a number ≥ 0', { expected: 'e.g. 16, 0.05, 1e-2', received: JSON.stringify(value) });
  return n!;
}

/** The largest image side (and channel count) the command accepts. */
export const MAX_IMAGE_DIM = 1_000_000;

/** `CxHxW` (or C×H×W): three whole numbers ≥ 1. */
export function imageSize(value: string, flag = '--input'): [number, number, number] {
  const parts = value.split(/[x×]/);
  if (parts.length !== 3 || parts.some((p) => !/^[0-9]+$/.test(p)))
    usage(flag, 'must be CxHxW, three whole numbers', { expected: 'e.g. 3x224x224', received: JSON.stringify(value) });
  const [c, h, w] = parts.map((p) => wholeNumber(p, flag, 1, MAX_IMAGE_DIM)) as [number, number, number];
  return [c, h, w];
}

/** One of a fixed set of values; the error lists them. */
export function oneOf<T extends string>(value: string, flag: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value)) {
    const near = nearest(value, allowed);
    usage(flag, near !== undefined ? `unknown value; did you mean ${near}?` : 'unknown value', {
      expected: allowed.join(', '),
      received: JSON.stringify(value),
    });
  }
  return value as T;
}

/** Levenshtein distance (insertions, deletions, substitutions). */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length]!;
}

/** The closest candidate when it is close enough to be a typo (a third of the word, at least 2 edits). */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const d = editDistance(word.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(word.length / 3)) ? best : undefined;
}

/** A list for a message: every name, or the first few and "…". */
export function listOf(names: readonly string[], max = names.length): string {
  return names.length <= max ? names.join(', ') : `${names.slice(0, max).join(', ')}, …`;
}

/** The --gpu budget, refusing unknown names with the list of known ones. */
export function gpuBudget(value: string): number {
  let budget: number;
  try {
    budget = memoryBudget(value);
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    return usage('--gpu', 'unknown GPU', { expected: `a size like 24GB or one of ${GPUS.map((g) => g.name).join(', ')}`, received: JSON.stringify(value) });
  }
  if (!Number.isSafeInteger(budget) || budget < 1) usage('--gpu', 'a memory size must be at least 1 byte', { received: JSON.stringify(value) });
  return budget;
}

/** --transformers: a release whose rules the library knows. */
export function transformersRelease(value: string): string {
  try {
    transformersRules(value);
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    const issue = error.issues[0];
    usage('--transformers', issue?.message ?? 'unknown release', { expected: issue?.expected, received: issue?.received });
  }
  return value;
}
