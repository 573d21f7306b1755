import type { Dim } from '../sym/expr.js';
import { mul, product } from '../sym/ops.js';
import { bytesOf } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { DType } from '../tensor/dtype.js';
import type { OpRule } from './types.js';

/**
 * Hugging Face's causal mask for eager attention (`create_causal_mask` → `eager_mask`):
 * a float [B, 1, S, S] tensor (0 or the dtype's minimum) built from a bool [1, 1, S, S]
 * comparison; nothing needs a gradient. Reads the embeddings only for B, S and dtype.
 */
export const causalMaskRule: OpRule<Record<string, never>> = {
  name: 'causal_mask',
  arity: 1,
  apply([embeds]) {
    const [b, s] = embeds!.shape as [Dim, Dim];
    return {
      outputs: [tensor([b, 1, s, s], embeds!.dtype)],
      nonDifferentiableOutputs: [0],
      forwardSteps: [{ alloc: 'bool mask', bytes: mul(s, s) }, { results: 'outputs' }, { free: 'bool mask' }],
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of rotary embeddings (default RoPE). */
export interface RotaryAttrs {
  readonly headDim: number;
}

/**
 * LlamaRotaryEmbedding under no_grad: cos and sin [1, S, head_dim] in the activations'
 * dtype, computed once per forward from the float32 buffer inv_freq [head_dim/2].
 */
export const rotaryRule: OpRule<RotaryAttrs> = {
  name: 'rotary',
  arity: 1,
  apply([embeds], attrs) {
    const s = embeds!.shape[1]!;
    const d = attrs.headDim;
    const table = tensor([1, s, d], embeds!.dtype);
    const f32 = (n: Dim) => bytesOf(n, 'float32');
    return {
      outputs: [table, table],
      buffers: [{ name: 'inv_freq', spec: tensor([d / 2], 'float32') }],
      nonDifferentiableOutputs: [0, 1],
      forwardSteps: [
        { alloc: 'positions', bytes: f32(s) },
        { alloc: 'freqs', bytes: f32(mul(s, d / 2)) },
        { alloc: 'emb', bytes: f32(mul(s, d)) },
        { results: 'outputs' },
        { free: 'positions' },
        { free: 'freqs' },
        { free: 'emb' },
      ],
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of fused attention. */
export interface SdpaAttrs {
  readonly dropout?: number;
}

/**
 * scaled_dot_product_attention with the flash or memory-efficient kernel: no S×S tensor is
 * kept. Saves q, k, v, the output and the float32 log-sum-exp [B, heads, S] (plus the RNG
 * seed and offset when dropout is on).
 */
export const sdpaRule: OpRule<SdpaAttrs> = {
  name: 'scaled_dot_product_attention',
  arity: 3,
  apply([q, k, v], attrs) {
    const [b, h, s] = q!.shape as [Dim, Dim, Dim];
    const out = tensor(q!.shape, q!.dtype);
    return {
      outputs: [out],
      saves: () => [
        { input: 0 },
        { input: 1 },
        { input: 2 },
        { output: 0 },
        { extra: tensor([b, h, s], 'float32' as DType), label: 'logsumexp' },
        ...((attrs.dropout ?? 0) > 0 ? [{ extra: tensor([2], 'int64'), label: 'philox seed/offset' }] : []),
      ],
      macs: mul(product(q!.shape), mul(k!.shape[2]!, 2)),
    };
  },
};
