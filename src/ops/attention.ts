import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { mul, product } from '../sym/ops.js';
import { tensor } from '../tensor/spec.js';
import type { DType } from '../tensor/dtype.js';
import type { OpRule } from './types.js';

/** Attributes of fused attention. */
export interface SdpaAttrs {
  readonly dropout?: number;
}

/**
 * scaled_dot_product_attention with the flash or memory-efficient kernel: no S×S tensor is
 * kept. Saves q, k, v, the output and the float32 log-sum-exp [B, heads, S] (plus the RNG
 * seed and offset when dropout is on).
 */
export const sdpaOp: OpRule<SdpaAttrs> = {
  name: 'scaled_dot_product_attention',
  arity: 3,
  apply([q, k, v], attrs, ctx) {
    if (ctx.framework === 'torch-1.13')
      fail('unsupported-op', 'scaled_dot_product_attention needs PyTorch 2 (transformers runs eager attention on 1.13)', {
        path: ctx.path,
        expected: "framework 'torch-2', or attention: 'eager'",
        received: ctx.framework,
      });
    const [b, h, s] = q!.shape as [Dim, Dim, Dim];
    // The value's head dim may differ from the query's (DeepSeek's MLA: v_head_dim).
    const out = tensor([...q!.shape.slice(0, -1), v!.shape[v!.shape.length - 1]!], q!.dtype);
    return {
      outputs: [out],
      saves: () => [
        { input: 0 },
        { input: 1 },
        { input: 2 },
        { output: 0 },
        { extra: tensor([b, h, s], 'float32' as DType), label: 'logsumexp' },
        // Dropout only in training (sdpa_attention_forward passes 0.0 in eval).
        ...((attrs.dropout ?? 0) > 0 && ctx.training ? [{ extra: tensor([2], 'int64'), label: 'philox seed/offset' }] : []),
      ],
      macs: () => mul(product(q!.shape), mul(k!.shape[2]!, 2)),
    };
  },
};

/**
 * scaled_dot_product_attention given a bool `attn_mask` (the fourth input): PyTorch first turns
 * it into a float mask of the query's dtype (`convert_boolean_attn_mask`, a new full-size
 * tensor), which the kernel's backward keeps besides what {@link sdpaOp} keeps.
 */
export const sdpaMaskedOp: OpRule<SdpaAttrs> = {
  name: 'scaled_dot_product_attention',
  arity: 4,
  apply([q, k, v, mask], attrs, ctx) {
    const base = sdpaOp.apply([q!, k!, v!], attrs, ctx);
    return { ...base, saves: (needs) => [...base.saves(needs), { extra: tensor(mask!.shape, q!.dtype), label: 'float attn_mask' }] };
  },
};
