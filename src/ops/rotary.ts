import type { Dim } from '../sym/expr.js';
import { max, mul } from '../sym/ops.js';
import { bytesOf } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule, OwnedTensor } from './types.js';

/** Attributes of {@link rotaryOp}. */
export interface RotaryAttrs {
  readonly headDim: number;
  /** The input dimension that holds the sequence: 1 for [B, S, hidden], 2 for [B, heads, S, D] (default 1). */
  readonly seqDim?: number;
  /**
   * Llama's rotary module up to transformers 4.44 also registers `_cos_cached` and
   * `_sin_cached`, [max_position_embeddings, head_dim] in the model's dtype, which forward
   * never reads (kept for backward compatibility): buffers that cost memory all the same.
   */
  readonly cachedPositions?: number;
  /** transformers 5.x: `original_inv_freq`, a second float32 [head_dim/2] buffer. */
  readonly originalInvFreq?: boolean;
  /** A prefix of the buffers' names (Gemma 3 keeps one set per layer type: `sliding_attention_inv_freq`). */
  readonly bufferPrefix?: string;
}

/**
 * LlamaRotaryEmbedding under no_grad: cos and sin [1, S, head_dim] in the activations'
 * dtype, computed from the float32 buffer inv_freq [head_dim/2] and the positions (float32
 * positions, their outer product with inv_freq, the doubled table, then cos and sin, cast
 * when the activations are not float32).
 */
export const rotaryOp: OpRule<RotaryAttrs> = {
  name: 'rotary',
  arity: 1,
  apply([x], attrs, ctx) {
    const s = x!.shape[attrs.seqDim ?? 1]!;
    const d = attrs.headDim;
    const dtype = x!.dtype;
    const table = tensor([1, s, d], dtype);
    const f32 = (n: Dim) => bytesOf(n, 'float32');
    const prefix = attrs.bufferPrefix ?? '';
    const buffers: OwnedTensor[] = [{ name: `${prefix}inv_freq`, spec: tensor([d / 2], 'float32') }];
    if (attrs.originalInvFreq) buffers.push({ name: `${prefix}original_inv_freq`, spec: tensor([d / 2], 'float32') });
    if (attrs.cachedPositions !== undefined) {
      buffers.push(
        { name: '_cos_cached', spec: tensor([attrs.cachedPositions, d], ctx.paramDtype) },
        { name: '_sin_cached', spec: tensor([attrs.cachedPositions, d], ctx.paramDtype) },
      );
    }
    const cast = dtype !== 'float32';
    const steps: KernelStep[] = [
      { alloc: 'positions', bytes: f32(s) },
      { alloc: 'freqs', bytes: f32(mul(s, d / 2)) },
      { alloc: 'emb', bytes: f32(mul(s, d)) },
      ...(cast
        ? [
            { alloc: 'cos float32', bytes: f32(mul(s, d)) },
            { alloc: 'sin float32', bytes: f32(mul(s, d)) },
          ]
        : []),
      { results: 'outputs' },
      ...(cast ? [{ free: 'cos float32' }, { free: 'sin float32' }] : []),
      { free: 'positions' },
      { free: 'freqs' },
      { free: 'emb' },
    ];
    return {
      outputs: [table, table],
      buffers,
      nonDifferentiableOutputs: [0, 1],
      forwardSteps: steps,
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of {@link rotaryCacheOp}. */
export interface RotaryCacheAttrs {
  readonly headDim: number;
  /** max_position_embeddings: the cached table's length (it grows to S when a longer input comes). */
  readonly positions: number;
  /** The input dimension that holds the sequence (default 2: value states [B, heads, S, D]). */
  readonly seqDim?: number;
}

/**
 * Mistral's and Qwen2's rotary embedding up to transformers 4.41: buffers `cos_cached` and
 * `sin_cached` [max(max_position_embeddings, S), head_dim] in the model's dtype (rebuilt
 * longer when a longer input arrives), sliced to S and cast to the activations' dtype, then
 * gathered at `position_ids` by `apply_rotary_pos_emb`: new [1, S, head_dim] tensors, made
 * in every attention layer.
 */
export const rotaryCacheOp: OpRule<RotaryCacheAttrs> = {
  name: 'rotary_cached',
  arity: 1,
  apply([x], attrs, ctx) {
    const s = x!.shape[attrs.seqDim ?? 2]!;
    const d = attrs.headDim;
    const rows = max(attrs.positions, s);
    const cast = x!.dtype !== ctx.paramDtype;
    return {
      outputs: [tensor([1, s, d], x!.dtype), tensor([1, s, d], x!.dtype)],
      buffers: [
        { name: 'inv_freq', spec: tensor([d / 2], 'float32') },
        { name: 'cos_cached', spec: tensor([rows, d], ctx.paramDtype) },
        { name: 'sin_cached', spec: tensor([rows, d], ctx.paramDtype) },
      ],
      nonDifferentiableOutputs: [0, 1],
      forwardSteps: cast
        ? [
            { alloc: 'cos slice cast', bytes: bytesOf(mul(s, d), x!.dtype) },
            { alloc: 'sin slice cast', bytes: bytesOf(mul(s, d), x!.dtype) },
            { results: 'outputs' },
            { free: 'cos slice cast' },
            { free: 'sin slice cast' },
          ]
        : [{ results: 'outputs' }],
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of {@link rotaryBuffersOp}. */
export interface RotaryBuffersAttrs {
  readonly headDim: number;
}

/**
 * A rotary module that is built but never called (transformers 4.43 – 4.47 left one in every
 * attention layer once the model computed the tables): its float32 `inv_freq` [head_dim/2]
 * buffer, nothing else.
 */
export const rotaryBuffersOp: OpRule<RotaryBuffersAttrs> = {
  name: 'rotary_buffers',
  arity: 1,
  apply(_inputs, attrs) {
    return { outputs: [], buffers: [{ name: 'inv_freq', spec: tensor([attrs.headDim / 2], 'float32') }], saves: () => [] };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
