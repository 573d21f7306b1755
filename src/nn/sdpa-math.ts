/**
 * `scaled_dot_product_attention` on PyTorch 2.x CPU when its flash kernel declines the inputs —
 * dropout in training (`check_for_dropout`) or a value head size unlike the query's
 * (`check_head_dim_size_cpp`: DeepSeek's MLA) — and it runs `_scaled_dot_product_attention_math`
 * (aten/src/ATen/native/transformers/attention.cpp): the query and the transposed key each
 * scaled by √scale, their matmul, `_safe_softmax`, dropout's float noise, the matmul with the
 * value. Composed of the primitive rules, so what autograd saves and the kernels allocate follow
 * theirs; measured on torch 2.13 CPU (GPT-2 with attn_pdrop, DeepSeek-V3's MLA: test/fixtures/
 * hf-5.18.0): bmm's operands are views where their layout allows (batch 1, contiguous copies), and
 * the output is [B, heads, S, D] contiguous, so the transpose back copies.
 */
import { castOp } from '../ops/cast.js';
import { causalMaskOp } from '../ops/causal-mask.js';
import { dropoutOp } from '../ops/dropout.js';
import { matmulOp } from '../ops/matmul.js';
import { mulScalarOp, softmaxOp } from '../ops/pointwise.js';
import { copyOp, copyUnlessOne, transposeOp } from '../ops/view.js';
import type { Dim } from '../sym/expr.js';
import type { GraphBuilder, TensorRef } from './types.js';

/** Whether sdpa runs the math path here: on CPU, with dropout in training or unequal head sizes. */
export function sdpaMathPath(g: GraphBuilder, query: TensorRef, value: TensorRef, dropout: number): boolean {
  if (g.device !== 'cpu') return false;
  return (g.training && dropout > 0) || query.shape[query.shape.length - 1] !== value.shape[value.shape.length - 1];
}

/**
 * The math path's context `[B, heads, S, Dv]`. The scaled query and key are bmm's operands: a
 * copy unless the batch is 1 (the views' layout, as eager attention's matmul); `kvContiguous`:
 * k and v are already contiguous copies (repeat_kv, the cache), which bmm reads as they are.
 */
export function sdpaMath(
  g: GraphBuilder,
  query: TensorRef,
  key: TensorRef,
  value: TensorRef,
  dropout: number,
  batch: Dim,
  kvContiguous = false,
  mask?: TensorRef,
): TensorRef {
  // enable_gqa: key and value repeat_interleave'd to every query head (new contiguous tensors).
  const [b, heads] = query.shape as [Dim, Dim];
  const repeated = key.shape[1] !== heads;
  // Contiguous k/v (repeat_kv's or the cache's copies, or enable_gqa's) reach bmm as views; transposed views are copied.
  const contiguous = repeated || kvContiguous;
  const full = (x: TensorRef) => g.call(copyOp, [x], { shape: [b, heads, ...x.shape.slice(2)] })[0]!;
  const [k0, v0] = repeated ? [full(key), full(value)] : [key, value];
  // convert_boolean_attn_mask: a float copy of a bool mask, a local of the kernel until it returns;
  // is_causal (no mask) builds ones(L, S, bool).tril() and converts it the same way.
  const bool = mask ?? g.call(causalMaskOp, [g.call(transposeOp, [query], { dim0: 1, dim1: 2 })[0]!], { bool: true })[0]!;
  const floatMask = bool.dtype !== 'bool' ? bool : g.call(castOp, [bool], { dtype: query.dtype })[0]!;
  const q = g.call(copyOp, [g.call(mulScalarOp, [query], {})[0]!], { when: copyUnlessOne(batch) })[0]!;
  const ks = g.call(mulScalarOp, [g.call(transposeOp, [k0], { dim0: 2, dim1: 3 })[0]!], {})[0]!;
  const k = contiguous ? ks : g.call(copyOp, [ks], { when: copyUnlessOne(batch) })[0]!;
  let probs = g.call(softmaxOp, [g.call(matmulOp, [q, k], {})[0]!], { dim: -1 })[0]!;
  if (g.training && dropout > 0) probs = g.call(dropoutOp, [probs], { p: dropout })[0]!;
  // A transposed or expanded value reshapes to [B·heads, S, D] as a view only at batch 1 (measured: torch 2.13 CPU).
  const v = contiguous ? v0 : g.call(copyOp, [value], { when: copyUnlessOne(batch) })[0]!;
  const out = g.call(matmulOp, [probs, v], {})[0]!;
  // The scaled query, the float mask and enable_gqa's repeated key are the C++ function's locals:
  // alive until it returns.
  g.touch(q);
  g.touch(floatMask);
  if (repeated) g.touch(k0);
  return out;
}
