import { fail } from '../errors.js';
import { product } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { bytesOf, checkDType, type DType } from './dtype.js';

/** The shape and element type of a tensor; dimensions may be symbolic. */
export interface TensorSpec {
  readonly shape: readonly Dim[];
  readonly dtype: DType;
}

/**
 * A tensor spec. Number dimensions must be integers >= 0 and the dtype a known one (a
 * VramError otherwise); symbolic dimensions are checked where they are used.
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * const image = tensor([1, 3, 224, 224], 'float32');
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function tensor(shape: readonly Dim[], dtype: DType = 'float32'): TensorSpec {
  for (let i = 0; i < shape.length; i += 1) {
    const dim = shape[i];
    if (typeof dim === 'number' && !(Number.isSafeInteger(dim) && dim >= 0)) {
      fail('bad-dimension', 'a dimension must be a non-negative integer', { path: ['shape', i], expected: 'integer >= 0', received: String(dim) });
    }
  }
  if (!Array.isArray(shape)) fail('bad-dimension', 'a shape must be a list of dimensions', { path: ['shape'], expected: 'array', received: typeof shape });
  // The spec owns its shape: a caller's array changed later changes nothing here.
  return { shape: Object.freeze([...shape]), dtype: checkDType(dtype, ['dtype']) };
}

/**
 * Number of elements of a spec.
 *
 * @example
 * ```ts
 * import { numel, tensor } from 'vram-ts';
 * console.log(numel(tensor([2, 3, 4]))); // 24
 * ```
 */
export function numel(spec: TensorSpec): Dim {
  return product(spec.shape);
}

/**
 * Exact storage bytes of a spec.
 *
 * @example
 * ```ts
 * import { specBytes, tensor } from 'vram-ts';
 * console.log(specBytes(tensor([1, 3, 224, 224]))); // 602112
 * ```
 */
export function specBytes(spec: TensorSpec): Dim {
  return bytesOf(numel(spec), spec.dtype);
}
