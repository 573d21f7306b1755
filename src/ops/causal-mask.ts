import type { Dim } from '../sym/expr.js';
import { add, mul } from '../sym/ops.js';
import { bytesOf, type DType } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/** How Hugging Face builds the float causal mask of eager attention (it changed between releases). */
export type CausalMaskStyle =
  /** `masking_utils.create_causal_mask` → `eager_mask`: a float [B, 1, S, S] from a bool [1, 1, S, S] comparison (`torch.where`). */
  | 'masking-utils'
  /**
   * Llama's `_update_causal_mask` (transformers 4.38 – 4.41): `torch.full((S, S + 1), min)`,
   * `triu`, `*=` a bool comparison; one [S, S + 1] storage in the activations' dtype that every
   * layer slices after an expand to [B, 1, S, S + 1].
   */
  | 'update-causal-mask'
  /**
   * `AttentionMaskConverter._make_causal_mask` (Mistral, Qwen2 up to 4.41): a float32
   * `torch.full((S, S), min)`, `masked_fill_` from an int64 comparison, `.to(dtype)`, and with a
   * sliding window a bool `tril` that `masked_fill_` applies; one [S, S] storage, expanded.
   */
  | 'make-causal-mask';

/** Attributes of {@link causalMaskOp}. */
export interface CausalMaskAttrs {
  /** Default `masking-utils`. */
  readonly style?: CausalMaskStyle;
  /** `_make_causal_mask`'s sliding window (a second bool mask while it is applied). */
  readonly slidingWindow?: boolean;
  /**
   * `masking-utils` for sdpa (`sdpa_mask`, a mask it cannot skip: a sliding window shorter than
   * the input): a bool [1, 1, S, S] that the model expands over the batch.
   */
  readonly bool?: boolean;
}

function maskSteps(style: CausalMaskStyle, b: Dim, s: Dim, dtype: DType, slidingWindow: boolean): { shape: Dim[]; steps: KernelStep[] } {
  const int64 = (n: Dim) => bytesOf(n, 'int64');
  if (style === 'update-causal-mask') {
    const cells = mul(s, add(s, 1));
    return {
      shape: [1, 1, s, add(s, 1)],
      steps: [
        { alloc: 'full', bytes: bytesOf(cells, dtype) },
        // triu makes the result; `*=` then multiplies it in place by a bool comparison,
        // which the kernel first promotes to the mask's dtype.
        { results: 'outputs' },
        { free: 'full' },
        { alloc: 'arange', bytes: int64(add(s, 1)) },
        { alloc: 'comparison', bytes: bytesOf(cells, 'bool') },
        { free: 'arange' },
        { alloc: 'promoted comparison', bytes: bytesOf(cells, dtype) },
        { free: 'promoted comparison' },
        { free: 'comparison' },
      ],
    };
  }
  if (style === 'make-causal-mask') {
    const cells = mul(s, s);
    const converted = dtype !== 'float32';
    return {
      shape: [1, 1, s, s],
      steps: [
        // torch.full without a dtype: float32 whatever the model's dtype.
        ...(converted ? [{ alloc: 'float32 mask', bytes: bytesOf(cells, 'float32') }] : []),
        ...(converted ? [] : [{ results: 'outputs' } as const]),
        { alloc: 'arange', bytes: int64(s) },
        { alloc: 'arange + 1', bytes: int64(s) },
        { alloc: 'comparison', bytes: bytesOf(cells, 'bool') },
        { free: 'arange + 1' },
        { free: 'comparison' },
        ...(converted ? [{ results: 'outputs' } as const, { free: 'float32 mask' }] : []),
        ...(slidingWindow
          ? [{ alloc: 'ones', bytes: bytesOf(cells, 'bool') }, { alloc: 'window', bytes: bytesOf(cells, 'bool') }, { free: 'ones' }, { free: 'window' }]
          : []),
        { free: 'arange' },
      ],
    };
  }
  return { shape: [b, 1, s, s], steps: [{ alloc: 'bool mask', bytes: mul(s, s) }, { results: 'outputs' }, { free: 'bool mask' }] };
}

/**
 * Hugging Face's float causal mask for eager attention, in the style of a release (see
 * {@link CausalMaskStyle}): 0 where a position may attend, the dtype's minimum elsewhere.
 * The output is the mask's own storage: [B, 1, S, S] for `masking-utils`; [1, 1, S, S] or
 * [1, 1, S, S + 1] for the older styles, which the model expands over the batch (a view).
 * Nothing needs a gradient. Reads the embeddings only for B, S and the dtype.
 */
export const causalMaskOp: OpRule<CausalMaskAttrs> = {
  name: 'causal_mask',
  arity: 1,
  apply([embeds], attrs) {
    const [b, s] = embeds!.shape as [Dim, Dim];
    if (attrs.bool === true)
      return { outputs: [tensor([1, 1, s, s], 'bool')], nonDifferentiableOutputs: [0], saves: () => [], backward: () => ({ inputGrads: ['none'] }) };
    const { shape, steps } = maskSteps(attrs.style ?? 'masking-utils', b, s, embeds!.dtype, attrs.slidingWindow ?? false);
    return {
      outputs: [tensor(shape, embeds!.dtype)],
      nonDifferentiableOutputs: [0],
      forwardSteps: steps,
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of {@link positionsOp}. */
export interface PositionsAttrs {
  /** Which input dimension is the sequence (default 1). */
  readonly seqDim?: number;
}

/**
 * `torch.arange(S)` as int64 [1, S]: the `cache_position` / `position_ids` a decoder makes
 * from its input's length (nothing needs a gradient).
 */
export const positionsOp: OpRule<PositionsAttrs> = {
  name: 'arange',
  arity: 1,
  apply([x], attrs) {
    return {
      outputs: [tensor([1, x!.shape[attrs.seqDim ?? 1]!], 'int64')],
      nonDifferentiableOutputs: [0],
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};
