import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { add, max, mul, product, sub } from '../sym/ops.js';
import { specBytes, tensor, type TensorSpec } from '../tensor/spec.js';
import type { DType } from '../tensor/dtype.js';
import { formatDim } from '../sym/format.js';
import { expectRank } from './check.js';
import type { OpContext, OpRule } from './types.js';

/** Attributes of fused attention. */
export interface SdpaAttrs {
  readonly dropout?: number;
}

/**
 * What scaled_dot_product_attention checks of its arguments (`sdp_utils` `check_tensor_shapes`,
 * `check_batch_size_and_num_heads_dense`, F.dropout's range): q, k, v of rank 4, one batch, as
 * many query heads as a multiple of the key/value heads (GQA), the key's head size the query's,
 * keys and values of one length, dropout in [0, 1]. Symbolic dimensions are left as they are.
 */
function checkSdpa(q: TensorSpec, k: TensorSpec, v: TensorSpec, attrs: SdpaAttrs, ctx: OpContext): void {
  for (const x of [q, k, v]) expectRank(x, [4], ctx, 'scaled_dot_product_attention');
  const p = attrs.dropout ?? 0;
  if (typeof p !== 'number' || !(p >= 0 && p <= 1))
    fail('bad-attribute', 'dropout probability has to be between 0 and 1', { path: [...ctx.path, 'dropout'], expected: '0 <= p <= 1', received: String(p) });
  const differ = (a: Dim, b: Dim) => typeof a === 'number' && typeof b === 'number' && a !== b;
  const heads = (a: Dim, b: Dim) => typeof a === 'number' && typeof b === 'number' && a % b !== 0;
  const problem =
    differ(q.shape[0]!, k.shape[0]!) || differ(k.shape[0]!, v.shape[0]!)
      ? 'query, key and value have one batch size'
      : heads(q.shape[1]!, k.shape[1]!) || differ(k.shape[1]!, v.shape[1]!)
        ? 'the key and value heads are as many, and divide the query heads'
        : differ(q.shape[3]!, k.shape[3]!)
          ? "the key's head size is the query's"
          : differ(k.shape[2]!, v.shape[2]!)
            ? 'keys and values have one length'
            : undefined;
  if (problem !== undefined)
    fail('shape-mismatch', problem, {
      path: ctx.path,
      expected: 'q [B, H, L, E], k [B, h, S, E], v [B, h, S, Ev] with h dividing H',
      received: [q, k, v].map((x) => `[${x.shape.map(formatDim).join(', ')}]`).join(', '),
    });
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
    checkSdpa(q!, k!, v!, attrs, ctx);
    if (ctx.framework === 'torch-1.13')
      fail('unsupported-op', 'scaled_dot_product_attention needs PyTorch 2 (transformers runs eager attention on 1.13)', {
        path: ctx.path,
        expected: "framework 'torch-2', or attention: 'eager'",
        received: ctx.framework,
      });
    const [b, h, s] = q!.shape as [Dim, Dim, Dim];
    // The value's head dim may differ from the query's (DeepSeek's MLA: v_head_dim).
    const out = tensor([...q!.shape.slice(0, -1), v!.shape[v!.shape.length - 1]!], q!.dtype);
    const lse = tensor([b, h, s], 'float32' as DType);
    const scratch = ctx.device === 'cpu' ? cpuFlashScratch(q!, k!) : 0;
    const backScratch = ctx.device === 'cpu' ? cpuFlashBackwardScratch(q!, k!) : null;
    return {
      outputs: [out],
      // The CPU flash kernel's per-thread buffer while it runs; without autograd its log-sum-exp is made and dropped too.
      ...(scratch !== 0 ? { forwardSteps: [{ results: 'outputs' as const }, { alloc: 'flash buffer', bytes: scratch }, { free: 'flash buffer' }] } : {}),
      forwardStepsUnrecorded: [
        { results: 'outputs' },
        { alloc: 'logsumexp', bytes: specBytes(lse) },
        ...(scratch !== 0 ? [{ alloc: 'flash buffer', bytes: scratch }, { free: 'flash buffer' }] : []),
        { free: 'logsumexp' },
      ],
      saves: () => [
        { input: 0 },
        { input: 1 },
        { input: 2 },
        { output: 0 },
        { extra: lse, label: 'logsumexp' },
        // Dropout only in training (sdpa_attention_forward passes 0.0 in eval).
        ...((attrs.dropout ?? 0) > 0 && ctx.training ? [{ extra: tensor([2], 'int64'), label: 'philox seed/offset' }] : []),
      ],
      macs: () => mul(product(q!.shape), mul(k!.shape[2]!, 2)),
      // The CPU flash backward's per-thread buffers, made after the q, k, v gradients.
      ...(backScratch !== null
        ? {
            backward: () => ({
              steps: [
                { results: 'inputGrads' as const },
                { alloc: 'flash buffer', bytes: backScratch.buffer },
                { alloc: 'dsum', bytes: backScratch.dsum },
                { free: 'dsum' },
                { free: 'flash buffer' },
              ],
            }),
          }
        : {}),
    };
  },
};

/**
 * `cpu_flash_attention`'s buffer (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp), one per
 * thread — the oracle's single thread here: qk [qSplit × kvSplit], its max and sum [qSplit] and the
 * output block [qSplit × D], in float32 (qSplit 32, 64 from 192 positions, 256 from 768; kvSplit
 * 512; both at most the sequence). Measured: 10,496 bytes at 64 positions, head size 16.
 */
function cpuFlashScratch(q: TensorSpec, k: TensorSpec): Dim {
  const s = q.shape[2]!;
  const sk = k.shape[2]!;
  const d = q.shape[3]!;
  if (typeof s === 'number' && typeof sk === 'number' && typeof d === 'number') {
    const qSplit = Math.min(s >= 768 ? 256 : s >= 192 ? 64 : 32, s);
    const kvSplit = Math.min(512, sk);
    return (qSplit * kvSplit + 2 * qSplit + qSplit * d) * 4;
  }
  // A symbolic sequence: the same splits as expressions of it (integers: [s ≥ t] = max(0, s − t + 1) − max(0, s − t)).
  const atLeast = (x: Dim, t: number) => sub(max(0, sub(x, t - 1)), max(0, sub(x, t)));
  const atMost = (x: Dim, t: number) => sub(x, max(0, sub(x, t)));
  const qSplit = add(add(atMost(s, 32), mul(32, atLeast(s, 192))), mul(192, atLeast(s, 768)));
  const kvSplit = atMost(sk, 512);
  return mul(add(add(mul(qSplit, kvSplit), mul(2, qSplit)), mul(qSplit, d)), 4);
}

/**
 * `cpu_flash_attention_backward`'s buffers (same file, the oracle's single thread): attn and
 * grad_attn [qSplit × kvSplit] in float32 (and again in the input's dtype for 16-bit inputs: read
 * from the source, not measured),
 * then dsum [qSplit] in float32, with the forward's splits. Measured (torch 2.13 CPU, float32):
 * 10,240 + 128 bytes at 40 positions, 512 + 32 at 8, 16,384 + 128 at 64.
 */
function cpuFlashBackwardScratch(q: TensorSpec, k: TensorSpec): { buffer: Dim; dsum: Dim } {
  const s = q.shape[2]!;
  const sk = k.shape[2]!;
  const reduced = q.dtype === 'float16' || q.dtype === 'bfloat16';
  const perElement = reduced ? 4 + 2 : 4;
  if (typeof s === 'number' && typeof sk === 'number') {
    const qSplit = Math.min(s >= 768 ? 256 : s >= 192 ? 64 : 32, s);
    const kvSplit = Math.min(512, sk);
    return { buffer: 2 * qSplit * kvSplit * perElement, dsum: qSplit * 4 };
  }
  const atLeast = (x: Dim, t: number) => sub(max(0, sub(x, t - 1)), max(0, sub(x, t)));
  const atMost = (x: Dim, t: number) => sub(x, max(0, sub(x, t)));
  const qSplit = add(add(atMost(s, 32), mul(32, atLeast(s, 192))), mul(192, atLeast(s, 768)));
  const kvSplit = atMost(sk, 512);
  return { buffer: mul(mul(qSplit, kvSplit), 2 * perElement), dsum: mul(qSplit, 4) };
}

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
    const floatMask = tensor(mask!.shape, q!.dtype);
    return {
      ...base,
      saves: (needs) => [...base.saves(needs), { extra: floatMask, label: 'float attn_mask' }],
      // Without autograd the float copy is made for the kernel and dropped after it.
      forwardStepsUnrecorded: [{ alloc: 'float attn_mask', bytes: specBytes(floatMask) }, ...(base.forwardStepsUnrecorded ?? []), { free: 'float attn_mask' }],
    };
  },
};
