import { fail } from '../errors.js';
import { product } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { show } from '../validate.js';
import { bytesOf, checkDType, DTYPE_BITS, elementBytes, type DType } from './dtype.js';
import { isExprValue, isSize, sizeArg } from './size.js';

/** The shape and element type of a tensor; dimensions may be symbolic. */
export interface TensorSpec {
  readonly shape: readonly Dim[];
  readonly dtype: DType;
}

/**
 * A tensor spec. The shape must be a list of integers >= 0 and expressions of sym(), the dtype
 * a known one (a VramError with the path otherwise).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * const image = tensor([1, 3, 224, 224], 'float32');
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function tensor(shape: readonly Dim[], dtype: DType = 'float32'): TensorSpec {
  if (!Array.isArray(shape)) fail('bad-dimension', 'a shape must be a list of dimensions', { path: ['shape'], expected: 'array', received: show(shape) });
  for (let i = 0; i < shape.length; i += 1) {
    const dim = shape[i];
    if (typeof dim === 'number' ? !(Number.isSafeInteger(dim) && dim >= 0) : !isExprValue(dim)) {
      fail('bad-dimension', 'a dimension must be a non-negative integer or an expression of sym()', {
        path: ['shape', i],
        expected: 'integer >= 0 | Expr',
        received: show(dim),
      });
    }
  }
  // The spec owns its shape: a caller's array changed later changes nothing here.
  return { shape: Object.freeze([...shape]), dtype: checkDType(dtype, ['dtype']) };
}

/** The spec argument of `fn`: an object with a shape list (its dimensions are product's to check). */
function specArg(spec: unknown, fn: string): TensorSpec {
  if (typeof spec !== 'object' || spec === null || !Array.isArray((spec as { shape?: unknown }).shape))
    fail('bad-tensor', 'must be a tensor spec ({ shape, dtype }, as tensor() makes)', {
      path: [fn, 'spec'],
      expected: '{ shape: Dim[], dtype }',
      received: show(spec),
    });
  return spec as TensorSpec;
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
  return concreteNumel(spec) ?? shapeProduct(specArg(spec, 'numel').shape, 'numel');
}

/**
 * The element count of a spec whose every dimension is a number, or undefined (then the checked
 * path runs, and fails where it must): the trace and the step read specs' sizes per op.
 */
function concreteNumel(spec: unknown): number | undefined {
  const shape = typeof spec === 'object' && spec !== null ? (spec as { shape?: unknown }).shape : undefined;
  if (!Array.isArray(shape)) return undefined;
  let n = 1;
  for (let i = 0; i < shape.length; i += 1) {
    const dim: unknown = shape[i];
    if (typeof dim !== 'number' || !Number.isSafeInteger(dim) || dim < 0) return undefined;
    n *= dim;
    // As product checks each partial product (a zero after an overflow does not rescue it).
    if (!Number.isSafeInteger(n)) return undefined;
  }
  return n;
}

/** The product of a spec's shape, every dimension checked (a VramError at `[fn, 'spec', 'shape', i]`). */
function shapeProduct(shape: readonly Dim[], fn: string): Dim {
  for (let i = 0; i < shape.length; i += 1) if (!isSize(shape[i])) sizeArg(shape[i], [fn, 'spec', 'shape', i], 'a dimension');
  return product(shape);
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
  const n = concreteNumel(spec);
  const dtype: unknown = n === undefined ? undefined : spec.dtype;
  const bytes = typeof dtype === 'string' && Object.hasOwn(DTYPE_BITS, dtype) ? elementBytes(n!, DTYPE_BITS[dtype as DType]) : undefined;
  if (bytes !== undefined) return bytes;
  const checked = specArg(spec, 'specBytes');
  return bytesOf(shapeProduct(checked.shape, 'specBytes'), checkDType(checked.dtype, SPEC_DTYPE));
}

const SPEC_DTYPE = ['specBytes', 'spec', 'dtype'];
