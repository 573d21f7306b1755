import { fail } from '../errors.js';
import { max, product, sub, sum } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { bounds } from '../sym/bounds.js';
import { dimKey } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import { isFloating, type DType } from '../tensor/dtype.js';
import { specBytes, tensor, type TensorSpec } from '../tensor/spec.js';
import { boolean } from '../validate.js';
import { dimIndex } from './check.js';
import { anyInt, attrsGuard } from './attrs.js';
import type { KernelStep, OpContext, OpRule, SavedRef } from './types.js';

/** Attributes of an elementwise merge (add or mul). */
export interface ElementwiseAttrs {
  /** Write into the first input (`a += b`, `a *= b`). */
  readonly inplace?: boolean;
}

const elementwiseAttrs = attrsGuard({ fields: { inplace: boolean } });

function sameDim(a: Dim, b: Dim): boolean {
  return dimKey(a) === dimKey(b);
}

/** Broadcast shape of two specs under numpy rules, or a VramError. */
export function broadcastShape(a: readonly Dim[], b: readonly Dim[], ctx: OpContext): Dim[] {
  const rank = Math.max(a.length, b.length);
  const shape: Dim[] = [];
  for (let i = 0; i < rank; i += 1) {
    const x = a[a.length - rank + i] ?? 1;
    const y = b[b.length - rank + i] ?? 1;
    if (x === 1) shape.push(y);
    else if (y === 1 || sameDim(x, y)) shape.push(x);
    else if (bounds(x).max === 1) shape.push(y);
    else fail('shape-mismatch', 'shapes do not broadcast', { path: ctx.path, expected: formatDim(x), received: formatDim(y) });
  }
  return shape;
}

/** Result dtype of an elementwise op on two tensors (PyTorch type promotion, floats). */
export function promote(a: DType, b: DType): DType {
  if (a === b) return a;
  const rank = (d: DType) => (d === 'float32' ? 3 : d === 'bfloat16' || d === 'float16' ? 2 : isFloating(d) ? 1 : 0);
  if (rank(a) === 2 && rank(b) === 2) return 'float32';
  return rank(a) >= rank(b) ? a : b;
}

/**
 * PyTorch's CPU TensorIterator casts an input of another floating dtype to the common one in a
 * temporary before the kernel (a bf16 operand beside a float32 one under autocast: measured, torch
 * 2.13 CPU); CUDA's kernels cast as they load.
 */
function mixedInputSteps(a: TensorSpec, b: TensorSpec, dtype: DType, ctx: OpContext): { forwardSteps?: KernelStep[] } {
  if (ctx.device !== 'cpu') return {};
  const cast = [a, b].filter((x) => x.dtype !== dtype && isFloating(x.dtype));
  if (cast.length === 0) return {};
  const bytes = cast.map((x) => specBytes(tensor(x.shape, dtype)));
  const steps: KernelStep[] = bytes.map((b, i) => ({ alloc: `input ${i} in ${dtype}`, bytes: b }));
  steps.push({ results: 'outputs' }, ...bytes.map((_, i) => ({ free: `input ${i} in ${dtype}` })));
  return { forwardSteps: steps };
}

/** add / sub: the gradient needs no saved tensor (it passes through, reduced where broadcast). */
export const addOp: OpRule<ElementwiseAttrs> = {
  name: 'add',
  arity: 2,
  apply([a, b], attrs, ctx) {
    elementwiseAttrs(attrs, ctx);
    const shape = broadcastShape(a!.shape, b!.shape, ctx);
    // `a += b` keeps a's dtype; `a + b` promotes.
    const dtype = attrs.inplace ? a!.dtype : promote(a!.dtype, b!.dtype);
    const same = (x: TensorSpec) => x.dtype === dtype && x.shape.length === shape.length && x.shape.every((d, i) => dimKey(d) === dimKey(shape[i]!));
    return {
      outputs: [tensor(shape, dtype)],
      ...(attrs.inplace ? { alias: 'inplace' as const } : mixedInputSteps(a!, b!, dtype, ctx)),
      saves: () => [],
      backward: () => ({ inputGrads: [same(a!) ? 'alias' : 'new', same(b!) ? 'alias' : 'new'] }),
    };
  },
};

/**
 * mul: each input's gradient needs the other input, so each is saved when the other needs a
 * gradient. The gradient of a broadcast input is `(grad * other).sum(...)`: a full-size
 * product is made, then reduced.
 */
export const mulOp: OpRule<ElementwiseAttrs> = {
  name: 'mul',
  arity: 2,
  apply([a, b], attrs, ctx) {
    elementwiseAttrs(attrs, ctx);
    const shape = broadcastShape(a!.shape, b!.shape, ctx);
    const dtype = attrs.inplace ? a!.dtype : promote(a!.dtype, b!.dtype);
    const full = specBytes(tensor(shape, dtype));
    const broadcast = [a!, b!].some((x) => x.shape.length !== shape.length || x.shape.some((d, i) => dimKey(d) !== dimKey(shape[i]!)));
    return {
      outputs: [tensor(shape, dtype)],
      ...(broadcast
        ? {
            backward: () => ({
              steps: [{ results: 'inputGrads' as const }, { alloc: 'grad * other (before sum)', bytes: full }, { free: 'grad * other (before sum)' }],
            }),
          }
        : {}),
      ...(attrs.inplace ? { alias: 'inplace' as const } : mixedInputSteps(a!, b!, dtype, ctx)),
      saves: (needs) => {
        const saved: SavedRef[] = [];
        if (needs.inputs[0]) saved.push({ input: 1 });
        if (needs.inputs[1]) saved.push({ input: 0 });
        return saved;
      },
    };
  },
};

/** Attributes of torch.cat. */
export interface CatAttrs {
  readonly dim?: number;
}

const catAttrs = attrsGuard({ fields: { dim: anyInt } });

/** cat: nothing saved; backward hands each input a slice (a view) of the incoming gradient. */
export const catOp: OpRule<CatAttrs> = {
  name: 'cat',
  arity: 'variadic',
  apply(inputs, attrs, ctx) {
    catAttrs(attrs, ctx);
    if (inputs.length === 0) fail('bad-arity', 'cat takes at least one input', { path: ctx.path, expected: '>= 1', received: '0' });
    const first = inputs[0] as TensorSpec;
    const rank = first.shape.length;
    const dim = dimIndex(attrs.dim ?? 1, rank, ctx);
    for (const other of inputs) {
      if (other.shape.length !== rank || other.shape.some((d, i) => i !== dim && !sameDim(d, first.shape[i]!))) {
        fail('shape-mismatch', 'cat inputs differ outside the concatenated dimension', {
          path: ctx.path,
          expected: `[${first.shape.map(formatDim).join(', ')}]`,
          received: `[${other.shape.map(formatDim).join(', ')}]`,
        });
      }
    }
    const shape = first.shape.map((d, i) => (i === dim ? sum(inputs.map((x) => x.shape[i]!)) : d));
    // A slice along a dimension after the first is strided unless every leading extent is 1:
    // for extents P >= 1 the indicator [P > 1] is P - max(1, P - 1), exact for symbols too.
    const leading = product(first.shape.slice(0, dim));
    const kind = dim === 0 || leading === 1 ? ('alias' as const) : ('strided' as const);
    const stridedFactor = typeof leading === 'number' ? 1 : sub(leading, max(1, sub(leading, 1)));
    return { outputs: [tensor(shape, first.dtype)], saves: () => [], backward: () => ({ inputGrads: inputs.map(() => kind), stridedFactor }) };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
