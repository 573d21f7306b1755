import { fail } from '../errors.js';
import { castRule } from '../ops/cast.js';
import { causalWhereRule, copyRule, sliceRule, transposeRule, viewRule } from '../ops/view.js';
import { matmulRule } from '../ops/matmul.js';
import { addRule, catRule, mulRule } from '../ops/merge.js';
import { mulScalarRule, negRule, softmaxRule } from '../ops/pointwise.js';
import { sdpaRule } from '../ops/attention.js';
import type { Dim } from '../sym/expr.js';
import { dropout } from './dropout.js';
import { graph } from './graph.js';
import { linear } from './linear.js';
import { module } from './module.js';
import type { GraphBuilder, LayerOptions, ModuleLayer, TensorRef } from './types.js';

/** How attention runs: materialised scores (`eager`), PyTorch's fused `sdpa`, or FlashAttention-2 (`flash`). */
export type AttentionImpl = 'eager' | 'sdpa' | 'flash';

/** Options of {@link attention}. */
export interface AttentionOptions extends LayerOptions {
  readonly hidden: number;
  readonly heads: number;
  /** Key/value heads: = heads (MHA), fewer (GQA), 1 (MQA). Default: heads. */
  readonly kvHeads?: number;
  /** Default hidden / heads. */
  readonly headDim?: number;
  readonly qkvBias?: boolean;
  readonly outBias?: boolean;
  readonly impl?: AttentionImpl;
  /** Attention-probability dropout (train mode). */
  readonly dropout?: number;
  /** GPT-2's dropout after the output projection (resid_pdrop). */
  readonly residDropout?: number;
  /**
   * `llama`: q/k/v/o projections, rotary embeddings, float32 softmax, `repeat_kv` for GQA, a
   * float [B,1,S,S] causal mask as fourth input (Llama, Qwen2, Mistral). `gpt2`: one fused
   * Conv1D `c_attn`, a bool [1,1,P,P] mask buffer and `torch.where`, residual dropout.
   */
  readonly style?: 'llama' | 'gpt2';
  /** GPT-2's n_positions (the side of its mask buffer). */
  readonly positions?: number;
  readonly className?: string;
}

/** A reshape across batch and heads copies unless the batch is 1 (then a view suffices). */
function mergesAsView(batch: Dim): boolean {
  return batch === 1;
}

function heads(g: GraphBuilder, x: TensorRef, batch: Dim, seq: Dim, count: number, dim: number): TensorRef {
  const split = g.call(viewRule, [x], { shape: [batch, seq, count, dim] })[0]!;
  return g.call(transposeRule, [split], { dim0: 1, dim1: 2 })[0]!;
}

/** `q*cos + rotate_half(q)*sin` (apply_rotary_pos_emb): saves cos and sin (shared by all layers). */
function rotate(g: GraphBuilder, x: TensorRef, cos: TensorRef, sin: TensorRef, dim: number): TensorRef {
  const withCos = g.call(mulRule, [x, cos], {})[0]!;
  const x1 = g.call(sliceRule, [x], { dim: -1, start: 0, end: dim / 2 })[0]!;
  const x2 = g.call(sliceRule, [x], { dim: -1, start: dim / 2, end: dim })[0]!;
  const negated = g.call(negRule, [x2], {})[0]!;
  const rotated = g.call(catRule, [negated, x1], { dim: -1 })[0]!;
  const withSin = g.call(mulRule, [rotated, sin], {})[0]!;
  return g.call(addRule, [withCos, withSin], {})[0]!;
}

/**
 * Multi-head attention as Hugging Face runs it (MHA, GQA or MQA), op for op, so what autograd
 * keeps follows: eager attention keeps the S×S float32 probabilities (and, with dropout, their
 * mask) per head, while `sdpa`/`flash` keep only q, k, v, the output and a float32
 * log-sum-exp per head and position. The module's inputs: the hidden states, then (llama
 * style) cos, sin and, for eager, the causal mask.
 *
 * @example
 * ```ts
 * import { attention, estimate } from 'vram-ts';
 * const gpt = attention({ hidden: 64, heads: 4, style: 'gpt2', positions: 32, qkvBias: true, outBias: true });
 * console.log(estimate(gpt, { input: [1, 16, 64], loss: 'none' }).params.total); // 16640
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function attention(options: AttentionOptions): ModuleLayer {
  const nh = options.heads;
  const nkv = options.kvHeads ?? nh;
  const d = options.headDim ?? options.hidden / nh;
  const impl = options.impl ?? 'eager';
  const style = options.style ?? 'llama';
  if (!Number.isInteger(d) || nh % nkv !== 0) fail('bad-config', 'heads must divide hidden and kv heads must divide heads', { path: [options.name ?? 'attention'], received: `hidden ${options.hidden}, heads ${nh}, kv heads ${nkv}` });
  const groups = nh / nkv;
  const p = options.dropout ?? 0;

  const body = graph((g, inputs) => {
    const h = inputs[0]!;
    const [batch, seq] = h.shape as [Dim, Dim];
    let q: TensorRef;
    let k: TensorRef;
    let v: TensorRef;
    if (style === 'gpt2') {
      const fused = g.apply(module('c_attn', 'Conv1D', linear({ out: 3 * options.hidden, transposedWeight: true, bias: options.qkvBias ?? true })), h);
      const part = (i: number) => g.call(sliceRule, [fused], { dim: -1, start: i * options.hidden, end: (i + 1) * options.hidden })[0]!;
      q = heads(g, part(0), batch, seq, nh, d);
      k = heads(g, part(1), batch, seq, nh, d);
      v = heads(g, part(2), batch, seq, nh, d);
    } else {
      const bias = options.qkvBias ?? false;
      q = heads(g, g.apply(linear({ out: nh * d, bias, name: 'q_proj' }), h), batch, seq, nh, d);
      k = heads(g, g.apply(linear({ out: nkv * d, bias, name: 'k_proj' }), h), batch, seq, nkv, d);
      v = heads(g, g.apply(linear({ out: nkv * d, bias, name: 'v_proj' }), h), batch, seq, nkv, d);
      const cos = g.call(viewRule, [inputs[1]!], { shape: [1, 1, seq, d] })[0]!;
      const sin = g.call(viewRule, [inputs[2]!], { shape: [1, 1, seq, d] })[0]!;
      q = rotate(g, q, cos, sin, d);
      k = rotate(g, k, cos, sin, d);
    }
    // repeat_kv: expand + reshape copies when kv heads are shared (GQA/MQA); flash handles GQA natively.
    if (groups > 1 && impl !== 'flash') {
      k = g.call(copyRule, [k], { shape: [batch, nh, seq, d] })[0]!;
      v = g.call(copyRule, [v], { shape: [batch, nh, seq, d] })[0]!;
    }
    let context: TensorRef;
    let weights: TensorRef | undefined;
    if (impl === 'eager') {
      // matmul reshapes [B, heads, ...] to [B·heads, ...]: a copy unless it is a view.
      const qm = mergesAsView(batch) ? q : g.call(copyRule, [q], {})[0]!;
      const kt = g.call(transposeRule, [k], { dim0: 2, dim1: 3 })[0]!;
      const km = mergesAsView(batch) || (groups > 1 && style === 'llama') ? kt : g.call(copyRule, [kt], {})[0]!;
      let scores = g.call(matmulRule, [qm, km], {})[0]!;
      if (style === 'gpt2') {
        scores = g.call(mulScalarRule, [scores], { scalarDtype: scores.dtype })[0]!;
        scores = g.call(causalWhereRule, [scores], { positions: options.positions ?? 1024 })[0]!;
        scores = g.call(softmaxRule, [scores], { dim: -1 })[0]!;
      } else {
        scores = g.call(mulScalarRule, [scores], {})[0]!;
        if (inputs[3] !== undefined) scores = g.call(addRule, [scores, inputs[3]], {})[0]!;
        scores = g.call(softmaxRule, [scores], { dim: -1, dtype: 'float32' })[0]!;
        scores = g.call(castRule, [scores], { dtype: q.dtype })[0]!;
      }
      const probs = g.apply(dropout({ p, name: style === 'gpt2' ? 'attn_dropout' : 'attention_dropout' }), scores);
      weights = probs;
      const vm = mergesAsView(batch) || (groups > 1 && style === 'llama') ? v : g.call(copyRule, [v], {})[0]!;
      context = g.call(matmulRule, [probs, vm], {})[0]!;
    } else {
      context = g.call(sdpaRule, [q, k, v], { dropout: p })[0]!;
    }
    const merged = g.call(copyRule, [g.call(transposeRule, [context], { dim0: 1, dim1: 2 })[0]!], {})[0]!;
    const flat = g.call(viewRule, [merged], { shape: [batch, seq, nh * d] })[0]!;
    if (style === 'gpt2') {
      const out = g.apply(module('c_proj', 'Conv1D', linear({ out: options.hidden, transposedWeight: true, bias: options.outBias ?? true })), flat);
      return g.apply(dropout({ p: options.residDropout ?? 0, name: 'resid_dropout' }), out);
    }
    const out = g.apply(linear({ out: options.hidden, bias: options.outBias ?? false, name: 'o_proj' }), flat);
    // Llama-style attention returns (output, attn_weights); the caller holds the weights.
    return weights === undefined ? out : [out, weights];
  });
  return Object.freeze({
    kind: 'module',
    className: options.className ?? (style === 'gpt2' ? 'GPT2Attention' : 'LlamaAttention'),
    body,
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
