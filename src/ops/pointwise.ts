import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
import type { DType } from '../tensor/dtype.js';
import { dtype } from '../options.js';
import { boolean, number } from '../validate.js';
import { dimIndex } from './check.js';
import { anyInt, attrsGuard, noAttrs } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of pow with a Python exponent. */
export interface PowAttrs {
  readonly exponent: number;
}

const powAttrs = attrsGuard({ fields: { exponent: number(-Number.MAX_VALUE) }, required: ['exponent'] });

/**
 * `x.pow(e)`: saves x (PowBackward0.self). Backward is `grad * (e * x.pow(e - 1))` in one C++
 * expression: `x.pow(e - 1)` and `e * …` live until the gradient is made (measured: torch 2.13
 * CPU, RMSNorm's `pow(2)` under a trainer's backward).
 */
export const powOp: OpRule<PowAttrs> = {
  name: 'pow',
  arity: 1,
  apply([x], attrs, ctx) {
    powAttrs(attrs, ctx);
    const bytes = specBytes(x!);
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      saves: (needs) => (needs.inputs[0] ? [{ input: 0 }] : []),
      backward: () => ({
        steps: [
          { alloc: 'x.pow(e - 1)', bytes },
          { alloc: 'e * x.pow(e - 1)', bytes },
          { results: 'inputGrads' },
          { free: 'x.pow(e - 1)' },
          { free: 'e * x.pow(e - 1)' },
        ],
      }),
    };
  },
};

/** Attributes of a reduction over one dimension. */
export interface ReduceAttrs {
  readonly dim: number;
  readonly keepdim?: boolean;
}

const reduceAttrs = attrsGuard({ fields: { dim: anyInt, keepdim: boolean }, required: ['dim'] });

/**
 * `x.mean(dim, keepdim)`. PyTorch 1.13 keeps x for backward (MeanBackward1.self, measured);
 * 2.x keeps only its sizes.
 */
export const meanOp: OpRule<ReduceAttrs> = {
  name: 'mean',
  arity: 1,
  apply([x], attrs, ctx) {
    reduceAttrs(attrs, ctx);
    const rank = x!.shape.length;
    const dim = dimIndex(attrs.dim, rank, ctx);
    const shape: Dim[] = attrs.keepdim ? x!.shape.map((d, i) => (i === dim ? 1 : d)) : x!.shape.filter((_, i) => i !== dim);
    return { outputs: [tensor(shape, x!.dtype)], saves: (needs) => (needs.inputs[0] && ctx.framework === 'torch-1.13' ? [{ input: 0 }] : []) };
  },
};

/** `x + c` or `c + x` for a Python number: nothing saved. */
export const addScalarOp: OpRule<Record<string, never>> = {
  name: 'add_scalar',
  arity: 1,
  apply([x], attrs, ctx) {
    noAttrs(attrs, ctx);
    return { outputs: [tensor(x!.shape, x!.dtype)], saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
  },
};

/** Attributes of multiplying by a Python number. */
export interface ScalarAttrs {
  /** dtype of the 0-dim tensor PyTorch wraps the number in: float64 for a Python float, or a tensor made with torch.full([]). */
  readonly scalarDtype?: DType;
}

const scalarAttrs = attrsGuard({ fields: { scalarDtype: dtype } });

/** `x * c` / `x / c`: the number becomes a 0-dim tensor that MulBackward0/DivBackward0 saves. */
export const mulScalarOp: OpRule<ScalarAttrs> = {
  name: 'mul_scalar',
  arity: 1,
  apply([x], attrs, ctx) {
    scalarAttrs(attrs, ctx);
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      saves: (needs) => (needs.inputs[0] ? [{ extra: tensor([], attrs.scalarDtype ?? 'float64'), label: 'scalar' }] : []),
    };
  },
};

/** `-x`: nothing saved. */
export const negOp: OpRule<Record<string, never>> = {
  name: 'neg',
  arity: 1,
  apply([x], attrs, ctx) {
    noAttrs(attrs, ctx);
    return { outputs: [tensor(x!.shape, x!.dtype)], saves: () => [] };
  },
};

/** `torch.rsqrt(x)`: saves the result. */
export const rsqrtOp: OpRule<Record<string, never>> = {
  name: 'rsqrt',
  arity: 1,
  apply([x], attrs, ctx) {
    noAttrs(attrs, ctx);
    return { outputs: [tensor(x!.shape, x!.dtype)], saves: () => [{ output: 0 }] };
  },
};

/** Attributes of softmax. */
export interface SoftmaxAttrs {
  readonly dim?: number;
  /** Compute (and return) in this dtype (`softmax(..., dtype=torch.float32)`). */
  readonly dtype?: DType;
}

const softmaxAttrs = attrsGuard({ fields: { dim: anyInt, dtype } });

/** softmax saves its result (derivatives.yaml: _softmax → result). */
export const softmaxOp: OpRule<SoftmaxAttrs> = {
  name: 'softmax',
  arity: 1,
  apply([x], attrs, ctx) {
    softmaxAttrs(attrs, ctx);
    if (attrs.dim !== undefined) dimIndex(attrs.dim, x!.shape.length, ctx);
    return { outputs: [tensor(x!.shape, attrs.dtype ?? x!.dtype)], saves: () => [{ output: 0 }] };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
