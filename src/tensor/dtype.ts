import { fail } from '../errors.js';
import { ceilDiv, mul } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { show } from '../validate.js';
import { sizeArg } from './size.js';

/** Element types vram-ts knows the storage size of. */
export type DType =
  | 'float64'
  | 'float32'
  | 'float16'
  | 'bfloat16'
  | 'float8_e4m3'
  | 'float8_e5m2'
  | 'int64'
  | 'int32'
  | 'int8'
  | 'uint8'
  | 'bool'
  | 'int4'
  | 'int3'
  | 'int2'
  | 'nf4';

/** Bits of storage per element; sub-byte types are packed densely (GPTQ's 2/3/4-bit, NF4). */
export const DTYPE_BITS: Readonly<Record<DType, number>> = Object.freeze({
  float64: 64,
  float32: 32,
  float16: 16,
  bfloat16: 16,
  float8_e4m3: 8,
  float8_e5m2: 8,
  int64: 64,
  int32: 32,
  int8: 8,
  uint8: 8,
  bool: 8,
  int4: 4,
  int3: 3,
  int2: 2,
  nf4: 4,
});

/**
 * True for a known dtype name.
 *
 * @example
 * ```ts
 * import { isDType } from 'vram-ts';
 * console.log(isDType('bfloat16'), isDType('complex64')); // true false
 * ```
 */
export function isDType(name: unknown): name is DType {
  return typeof name === 'string' && Object.hasOwn(DTYPE_BITS, name);
}

/** Fails with a VramError naming the allowed dtypes unless `name` is one. */
export function checkDType(name: unknown, path: readonly (string | number)[] = []): DType {
  if (!isDType(name)) fail('unknown-dtype', 'unknown dtype', { path, expected: Object.keys(DTYPE_BITS).join(' | '), received: show(name) });
  return name;
}

// Argument paths, made once: bytesOf and isFloating run for every tensor of a trace.
const BYTES_NUMEL = ['bytesOf', 'numel'];
const BYTES_DTYPE = ['bytesOf', 'dtype'];
const FLOATING_DTYPE = ['isFloating', 'dtype'];

/**
 * Exact storage bytes of `numel` elements of a dtype (sub-byte types rounded up to whole bytes).
 * A count that is not an integer >= 0 or an expression, or an unknown dtype, is a VramError.
 *
 * @example
 * ```ts
 * import { bytesOf } from 'vram-ts';
 * console.log(bytesOf(10, 'bfloat16'), bytesOf(5, 'nf4')); // 20 3
 * ```
 */
export function bytesOf(numel: Dim, dtype: DType): Dim {
  sizeArg(numel, BYTES_NUMEL, 'an element count');
  const bits = DTYPE_BITS[checkDType(dtype, BYTES_DTYPE)];
  const concrete = typeof numel === 'number' ? elementBytes(numel, bits) : undefined;
  if (concrete !== undefined) return concrete;
  return bits >= 8 ? mul(numel, bits / 8) : ceilDiv(mul(numel, bits), 8);
}

/**
 * `n` elements of `bits` each in whole bytes (below a byte, rounded up; exact: 8 is a power of two),
 * or undefined where n · bits passes 2^53 (bytesOf's checked arithmetic then says so).
 */
export function elementBytes(n: number, bits: number): number | undefined {
  if (!Number.isSafeInteger(n * Math.max(bits, 8))) return undefined;
  return bits >= 8 ? n * (bits / 8) : Math.ceil((n * bits) / 8);
}

/**
 * True for floating types (the ones that can carry gradients); a VramError for a name that is
 * no dtype (`isDType` asks that).
 *
 * @example
 * ```ts
 * import { isFloating } from 'vram-ts';
 * console.log(isFloating('bfloat16'), isFloating('int64')); // true false
 * ```
 */
export function isFloating(dtype: DType): boolean {
  checkDType(dtype, FLOATING_DTYPE);
  return dtype.startsWith('float') || dtype === 'bfloat16';
}
