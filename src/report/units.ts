import type { Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import { pyThousands } from './pyformat.js';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'] as const;

/**
 * Bytes in binary units with two decimals (`3.22 GiB`); expressions print as they are.
 *
 * @example
 * ```ts
 * import { formatBytes } from 'vram-ts';
 * console.log(formatBytes(3461925408)); // "3.22 GiB"
 * ```
 */
export function formatBytes(bytes: Dim): string {
  if (typeof bytes !== 'number') return `${formatDim(bytes)} B`;
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(2)} ${UNITS[unit]}`;
}

/**
 * An integer with thousands separators, or an expression.
 *
 * @example
 * ```ts
 * import { formatCount, mul, sym } from 'vram-ts';
 * console.log(formatCount(1520931), formatCount(mul(sym('B'), 8))); // 1,520,931 8·B
 * ```
 */
export function formatCount(value: Dim): string {
  return typeof value === 'number' ? pyThousands(value) : formatDim(value);
}
