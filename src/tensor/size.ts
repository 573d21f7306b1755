import { VramError, type VramIssue } from '../errors.js';
import { isDim } from '../sym/args.js';
import type { Dim } from '../sym/expr.js';
import { show, type Check, type Path } from '../validate.js';

/**
 * Sizes as arguments: a count of elements or bytes is a non-negative safe integer, or an
 * expression of sym() (one this copy of the package made, or another copy's, checked all the way
 * down by the symbolic arithmetic's own rule: a forged one is no expression).
 */

/** Whether `value` is an expression (not a number). */
export function isExprValue(value: unknown): boolean {
  return typeof value === 'object' && value !== null && isDim(value);
}

/** Whether `value` is a size: an integer >= 0 (safe), or an expression. */
export function isSize(value: unknown): value is Dim {
  return typeof value === 'number' ? Number.isSafeInteger(value) && value >= 0 : isExprValue(value);
}

/** The issue of a value that is not a size (`what` names it in the message). */
export function sizeIssue(value: unknown, path: Path, what = 'a size'): VramIssue {
  const overflow = typeof value === 'number' && Number.isInteger(value) && value > 0;
  return {
    path,
    code: overflow ? 'overflow' : 'bad-dimension',
    message: overflow ? `${what} is past 2^53, where it is not exact` : `${what} must be an integer >= 0 or an expression of sym()`,
    expected: 'integer 0 – 2^53 - 1 | Expr',
    received: show(value),
  };
}

/** A size argument, or a VramError at `path`. */
export function sizeArg(value: unknown, path: Path, what?: string): Dim {
  if (!isSize(value)) throw new VramError([sizeIssue(value, path, what)]);
  return value;
}

/** A size, as a check of validate(). */
export const size: Check = (value, path, issues) => {
  if (!isSize(value)) issues.push(sizeIssue(value, path));
};
