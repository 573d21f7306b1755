import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { dimKey } from '../sym/expr.js';
import { max, product, sub } from '../sym/ops.js';
import { formatDim } from '../sym/format.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { integer, show } from '../validate.js';
import { dimIndex } from './check.js';
import { anyInt, attrsGuard, intListAttr, offsetAttr, shapeAttr } from './attrs.js';
import type { OpContext, OpRule } from './types.js';

/** Attributes of view / reshape. */
export interface ViewAttrs {
  readonly shape: readonly Dim[];
}

const shapeAttrs = attrsGuard({ fields: { shape: shapeAttr }, required: ['shape'] });

/** `x.view(shape)` (or a reshape that needs no copy): no memory, the gradient is a view. */
export const viewOp: OpRule<ViewAttrs> = {
  name: 'view',
  arity: 1,
  apply([x], attrs, ctx) {
    shapeAttrs(attrs, ctx);
    if (dimKey(product(attrs.shape)) !== dimKey(product(x!.shape))) fail('shape-mismatch', 'view changes the number of elements', { path: ctx.path });
    return { outputs: [tensor(attrs.shape, x!.dtype)], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
  },
};

/**
 * `x.expand(shape)` (or `x[None, None].expand(...)`): a view that repeats size-1 dimensions
 * with stride 0, so no memory; its gradient is summed back to the input's shape.
 */
export const expandOp: OpRule<ViewAttrs> = {
  name: 'expand',
  arity: 1,
  apply([x], attrs, ctx) {
    shapeAttrs(attrs, ctx);
    const rank = attrs.shape.length;
    const offset = rank - x!.shape.length;
    if (offset < 0) fail('shape-mismatch', 'expand cannot drop dimensions', { path: ctx.path, expected: `rank >= ${x!.shape.length}`, received: String(rank) });
    x!.shape.forEach((d, i) => {
      if (d !== 1 && dimKey(d) !== dimKey(attrs.shape[offset + i]!))
        fail('shape-mismatch', 'expand repeats only dimensions of size 1', { path: ctx.path, expected: String(d), received: String(attrs.shape[offset + i]) });
    });
    return { outputs: [tensor(attrs.shape, x!.dtype)], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['new'] }) };
  },
};

/** Attributes of transpose. */
export interface TransposeAttrs {
  readonly dim0: number;
  readonly dim1: number;
}

const transposeAttrs = attrsGuard({ fields: { dim0: anyInt, dim1: anyInt }, required: ['dim0', 'dim1'] });

/** `x.transpose(a, b)` / permute: a view. */
export const transposeOp: OpRule<TransposeAttrs> = {
  name: 'transpose',
  arity: 1,
  apply([x], attrs, ctx) {
    transposeAttrs(attrs, ctx);
    const rank = x!.shape.length;
    const a = dimIndex(attrs.dim0, rank, ctx, 'dim0');
    const b = dimIndex(attrs.dim1, rank, ctx, 'dim1');
    const shape = [...x!.shape];
    [shape[a], shape[b]] = [shape[b]!, shape[a]!];
    return { outputs: [tensor(shape, x!.dtype)], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
  },
};

/** Attributes of {@link copyOp}. */
export interface CopyAttrs {
  /** The result's shape (default the input's; same element count unless `torch.cat`/`pad` grows it). */
  readonly shape?: readonly Dim[];
  /**
   * A 0/1 factor: 1 where the input is not contiguous and the copy happens, 0 where
   * `.contiguous()` returns the input itself (see {@link copyUnlessOne}). Default 1.
   */
  readonly when?: Dim;
}

// `when` is a 0/1 factor: 0, 1 or an expression.
const copyAttrs = attrsGuard({
  fields: {
    shape: shapeAttr,
    when: (value, path, issues) => {
      if (value !== 0 && value !== 1) offsetAttr(value, path, issues);
      if (typeof value === 'number' && value > 1)
        issues.push({ path, code: 'bad-attribute', message: 'must be a 0/1 factor', expected: '0 | 1 | expression', received: show(value) });
    },
  },
});

/** `x.contiguous()` / a reshape that must copy: a new tensor, nothing saved; the gradient passes through. */
export const copyOp: OpRule<CopyAttrs> = {
  name: 'copy',
  arity: 1,
  apply([x], attrs, ctx) {
    copyAttrs(attrs, ctx);
    const shape = attrs.shape ?? x!.shape;
    return {
      outputs: [tensor(shape, x!.dtype)],
      saves: () => [],
      backward: () => ({ inputGrads: ['alias'] }),
      ...(attrs.when !== undefined && attrs.when !== 1 ? { copyWhen: attrs.when } : {}),
    };
  },
};

/**
 * The 0/1 factor [d > 1] for an extent d ≥ 1, exact for symbols: `d - max(1, d - 1)`. A
 * `.contiguous()` after slicing or transposing along a dimension behind a batch of size d is a
 * copy unless d is 1.
 *
 * @example
 * ```ts
 * import { evaluate, sym } from 'vram-ts';
 * import { copyUnlessOne } from 'vram-ts/internals';
 * const f = copyUnlessOne(sym('B'));
 * console.log(copyUnlessOne(1), copyUnlessOne(4), evaluate(f, { B: 1 }), evaluate(f, { B: 3 })); // 0 1 0 1
 * ```
 */
export function copyUnlessOne(d: Dim): Dim {
  return sub(d, max(1, sub(d, 1)));
}

/** Attributes of a slice along one dimension. */
export interface SliceAttrs {
  readonly dim: number;
  readonly start: Dim;
  readonly end: Dim;
}

const sliceAttrs = attrsGuard({ fields: { dim: anyInt, start: offsetAttr, end: offsetAttr }, required: ['dim', 'start', 'end'] });

/** Fails when a slice's bounds are surely out of order or past the dimension (numbers only: symbols pass). */
function checkSlice(size: Dim, { start, end }: SliceAttrs, ctx: OpContext): void {
  const bad =
    typeof start === 'number' && typeof end === 'number' && end < start
      ? 'end'
      : typeof end === 'number' && typeof size === 'number' && end > size
        ? 'end'
        : null;
  if (bad !== null)
    fail('bad-attribute', 'slice bounds out of range', {
      path: [...ctx.path, bad],
      expected: `start <= end <= ${formatDim(size)}`,
      received: `${formatDim(start)}:${formatDim(end)}`,
    });
}

/**
 * `x[..., start:end]`: a view; its backward (SliceBackward) scatters the gradient into a new
 * zero tensor of the input's size.
 */
export const sliceOp: OpRule<SliceAttrs> = {
  name: 'slice',
  arity: 1,
  apply([x], attrs, ctx) {
    sliceAttrs(attrs, ctx);
    const dim = dimIndex(attrs.dim, x!.shape.length, ctx);
    checkSlice(x!.shape[dim]!, attrs, ctx);
    const shape = x!.shape.map((d, i) => (i === dim ? sub(attrs.end, attrs.start) : d));
    return { outputs: [tensor(shape, x!.dtype)], alias: 'view', saves: () => [] };
  },
};

/** Attributes of torch.where against a boolean buffer (GPT-2's causal mask). */
export interface MaskedFillAttrs {
  /** Side of the square boolean buffer registered on the module (GPT-2's n_positions). */
  readonly positions: number;
}

const positionsAttrs = attrsGuard({ fields: { positions: integer(1) }, required: ['positions'] });

/**
 * `torch.where(bias[..., :S, :S], x, min)` with a registered bool buffer [1, 1, P, P]:
 * saves the condition, which is a view of the whole buffer storage (P² bytes).
 */
export const causalWhereOp: OpRule<MaskedFillAttrs> = {
  name: 'where',
  arity: 1,
  apply([x], attrs, ctx) {
    positionsAttrs(attrs, ctx);
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      // `masked_bias` (a float32 scalar) is registered beside it and never read.
      buffers: [
        { name: 'bias', spec: tensor([1, 1, attrs.positions, attrs.positions], 'bool') },
        { name: 'masked_bias', spec: tensor([], 'float32') },
      ],
      saves: (needs) => (needs.inputs[0] ? [{ buffer: 'bias' }] : []),
      // The scalar fill value is a new 4-byte tensor each call.
      forwardSteps: [{ alloc: 'mask value', bytes: specBytes(tensor([], x!.dtype)) }, { results: 'outputs' }, { free: 'mask value' }],
    };
  },
};

/**
 * GPT-2's `bias` and `masked_bias` buffers where nothing reads them (4.x GPT2Attention registers
 * them whatever the attention implementation; sdpa builds its own mask): owned, no compute, the
 * input passed on as a view.
 */
export const unusedCausalBuffersOp: OpRule<MaskedFillAttrs> = {
  name: 'register_buffer',
  arity: 1,
  apply([x], attrs, ctx) {
    positionsAttrs(attrs, ctx);
    return {
      outputs: [x!],
      alias: 'view',
      buffers: [
        { name: 'bias', spec: tensor([1, 1, attrs.positions, attrs.positions], 'bool') },
        { name: 'masked_bias', spec: tensor([], 'float32') },
      ],
      saves: () => [],
      backward: () => ({ inputGrads: ['alias'] }),
    };
  },
};

/** Attributes of permute. */
export interface PermuteAttrs {
  /** The new order of the dimensions (negative counts from the end). */
  readonly dims: readonly number[];
}

const permuteAttrs = attrsGuard({ fields: { dims: intListAttr }, required: ['dims'] }, true);

/**
 * `x.permute(dims)`: a view; its gradient is the incoming one permuted back (a view too).
 *
 * @example
 * ```ts
 * import { estimate, graph, permuteOp } from 'vram-ts';
 * const nhwc = graph((g, [x]) => g.call(permuteOp, [x!], { dims: [0, 2, 3, 1] })[0]!);
 * console.log(estimate(nhwc, { input: [1, 3, 4, 5], inputRequiresGrad: true }).bytes.activations); // 0
 * ```
 */
export const permuteOp: OpRule<PermuteAttrs> = {
  name: 'permute',
  arity: 1,
  apply([x], attrs, ctx) {
    permuteAttrs(attrs, ctx);
    const rank = x!.shape.length;
    const dims = attrs.dims.map((d, i) => dimIndex(d, rank, ctx, `dims[${i}]`));
    if (dims.length !== rank || new Set(dims).size !== rank)
      fail('bad-attribute', 'permute needs each dimension once', {
        path: [...ctx.path, 'dims'],
        expected: `a permutation of ${rank} dimensions`,
        received: `[${attrs.dims.join(', ')}]`,
      });
    return {
      outputs: [
        tensor(
          dims.map((d) => x!.shape[d]!),
          x!.dtype,
        ),
      ],
      alias: 'view',
      saves: () => [],
      backward: () => ({ inputGrads: ['alias'] }),
    };
  },
};

/** Attributes of select (`x[:, index]`). */
export interface SelectAttrs {
  readonly dim: number;
  readonly index: number;
}

const selectAttrs = attrsGuard({ fields: { dim: anyInt, index: anyInt }, required: ['dim', 'index'] }, true);

/**
 * `x.select(dim, index)` (`x[:, 0]`, ViT's class token): a view without that dimension; its
 * backward (SelectBackward) scatters the gradient into a new zero tensor of the input's size.
 *
 * @example
 * ```ts
 * import { estimate, graph, selectOp } from 'vram-ts';
 * // ViT's x[:, 0]: the class token's row, a view
 * const token = graph((g, [x]) => g.call(selectOp, [x!], { dim: 1, index: 0 })[0]!);
 * console.log(estimate(token, { input: [2, 197, 768] }).modules.length); // 1
 * ```
 */
export const selectOp: OpRule<SelectAttrs> = {
  name: 'select',
  arity: 1,
  apply([x], attrs, ctx) {
    selectAttrs(attrs, ctx);
    const dim = dimIndex(attrs.dim, x!.shape.length, ctx);
    const size = x!.shape[dim]!;
    // torch: "select(): index out of range" (negative counts from the end); a symbolic size passes.
    if (typeof size === 'number' && (attrs.index >= size || attrs.index < -size))
      fail('bad-attribute', 'select index out of range', {
        path: [...ctx.path, 'index'],
        expected: `${-size} <= index < ${size}`,
        received: String(attrs.index),
      });
    return {
      outputs: [
        tensor(
          x!.shape.filter((_, i) => i !== dim),
          x!.dtype,
        ),
      ],
      alias: 'view',
      saves: () => [],
    };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
