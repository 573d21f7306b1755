import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import { isExprValue } from '../tensor/size.js';
import { show } from '../validate.js';
import { pyThousands } from './pyformat.js';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB', 'ZiB', 'YiB'] as const;

const BYTES = ['formatBytes', 'bytes'];
const VALUE = ['formatCount', 'value'];

/** A number of bytes to print: finite and >= 0 (fractions allowed: a formula's average), or an expression. */
function bytesArg(value: unknown): Dim {
  if (typeof value === 'number' ? Number.isFinite(value) && value >= 0 : isExprValue(value)) return value as Dim;
  return fail('bad-argument', 'must be a number of bytes >= 0 or an expression of sym()', {
    path: BYTES,
    expected: 'finite number >= 0 | Expr',
    received: show(value),
  });
}

/**
 * Bytes in binary units with two decimals (`3.22 GiB`), up to YiB (2^80); expressions print
 * as they are. A negative, NaN or infinite number is a VramError (no size is one).
 *
 * @example
 * ```ts
 * import { formatBytes } from 'vram-ts';
 * console.log(formatBytes(3461925408), formatBytes(2 ** 80)); // 3.22 GiB 1.00 YiB
 * ```
 */
export function formatBytes(bytes: Dim): string {
  const checked = bytesArg(bytes);
  if (typeof checked !== 'number') return `${formatDim(checked)} B`;
  let value = checked;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${checked} B` : `${value.toFixed(2)} ${UNITS[unit]}`;
}

/** A count to print: a finite number within ±(2^53 - 1), or an expression. */
function countArg(value: unknown): Dim {
  if (typeof value === 'number' ? Math.abs(value) <= Number.MAX_SAFE_INTEGER : isExprValue(value)) return value as Dim;
  return fail('bad-argument', 'must be a number within ±2^53 or an expression of sym()', {
    path: VALUE,
    expected: 'finite number | Expr',
    received: show(value),
  });
}

/**
 * An integer with thousands separators (a fraction prints its integer part, as the closed-form
 * figures need), or an expression. NaN, infinities and numbers past 2^53 are VramErrors.
 *
 * @example
 * ```ts
 * import { formatCount, mul, sym } from 'vram-ts';
 * console.log(formatCount(1520931), formatCount(mul(sym('B'), 8))); // 1,520,931 8·B
 * ```
 */
export function formatCount(value: Dim): string {
  const checked = countArg(value);
  return typeof checked === 'number' ? pyThousands(checked) : formatDim(checked);
}
