import { fail } from '../errors.js';
import { castOp } from '../ops/cast.js';
import { causalWhereOp, copyOp, copyUnlessOne, expandOp, sliceOp, transposeOp, unusedCausalBuffersOp, viewOp } from '../ops/view.js';
import { matmulOp } from '../ops/matmul.js';
import { addOp, catOp, mulOp } from '../ops/merge.js';
import { mulScalarOp, negOp, softmaxOp } from '../ops/pointwise.js';
import { activationOp } from '../ops/activation.js';
import { sdpaMaskedOp, sdpaOp } from '../ops/attention.js';
import { ringSdpaOp } from '../ops/ring-attention.js';
import { linearOp } from '../ops/linear.js';
import { allGatherOp, allReduceOp, reduceScatterOp, tpCopyOp } from '../ops/collective.js';
import type { Dim } from '../sym/expr.js';
import { dropout } from './dropout.js';
import { sdpaMath, sdpaMathPath } from './sdpa-math.js';
import { graph } from './graph.js';
import { linear } from './linear.js';
import { VramError, type VramIssue } from '../errors.js';
import { boolean, integer, number, object, oneOf, show, string } from '../validate.js';
import { layerCheck } from './layer-check.js';
import { blockTensorParallel, checkInput, falseOr, fieldsOf, probability } from './block-schema.js';
import { checkOptions, opLayer, type Fields } from './op.js';
import type { GraphBuilder, Layer, LayerOptions, ModuleLayer, TensorRef } from './types.js';

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
   * `llama`: q/k/v/o projections, rotary embeddings, float32 softmax, `repeat_kv` for GQA
   * (Llama, Qwen2, Mistral). `gpt2`: one fused Conv1D `c_attn`, a bool [1, 1, P, P] mask
   * buffer and `torch.where` (unless `maskBuffer` is false), softmax in the activations'
   * dtype, residual dropout. After the hidden states (and, llama style without `rotary`, cos
   * and sin) comes an optional float mask that eager attention adds to the scores.
   */
  readonly style?: 'llama' | 'gpt2';
  /** GPT-2's n_positions (the side of its mask buffer). */
  readonly positions?: number;
  /** GPT-2: the bool `bias` and `masked_bias` buffers (default true; gone in transformers 5.x). */
  readonly maskBuffer?: boolean;
  readonly className?: string;
  /**
   * Llama style: a module run on the value states in every attention layer that returns
   * [cos, sin] (transformers up to 4.47 computed rotary tables per layer for some families).
   * Without it, cos and sin are the module's second and third inputs, computed once by the model.
   */
  readonly rotary?: Layer;
  /**
   * The rotary tables come gathered at `position_ids` inside `apply_rotary_pos_emb` (Mistral
   * and Qwen2 up to 4.44/4.41): they live until both rotations are done, not until forward returns.
   */
  readonly rotaryGathered?: boolean;
  /** A child module run first whose outputs attention does not use (a leftover rotary module that only holds buffers). */
  readonly unusedModule?: Layer;
  /**
   * Eager: return `[output, attention weights]` so the caller holds the weights (the decoder
   * layer binds them from transformers 4.48 on). Default false: they live until attention
   * returns (`attn_weights = None` after `o_proj`, up to 4.47).
   */
  readonly returnWeights?: boolean;
  /**
   * Which tensors stay referenced until attention returns: `inline` (default; attention
   * computed in forward: q and the repeated k/v are its locals) or `function`
   * (`eager_attention_forward`/`sdpa_attention_forward`: q and the un-repeated k/v are
   * locals of forward, the repeated k/v go when the function returns).
   */
  readonly locals?: 'inline' | 'function';
  /**
   * `use_cache`: the keys and values (after rotary, before `repeat_kv`; GPT-2's views of
   * `c_attn`'s output) go into the cache the model's output keeps until the forward returns:
   * the tensors themselves (`alias`) or `torch.cat` copies (`copy`), which attention then reads;
   * `-eval`: only in eval mode (Gemma 2/3 in 4.57 make no cache in training). Default `false`.
   */
  readonly cache?: false | 'alias' | 'copy' | 'copy-eval' | 'alias-eval';
  /** sdpa with GQA: `repeat` k/v to every head first (default), or `enable-gqa` (PyTorch ≥ 2.5, no mask). */
  readonly sdpaGqa?: 'repeat' | 'enable-gqa';
  /** sdpa: make q, k, v contiguous before the kernel (copies of the transposed views). Default false. */
  readonly sdpaContiguous?: boolean;
  /**
   * One rank of tensor parallelism (llama style): `heads`/`kvHeads` are then the rank's local
   * counts. q/k/v are ColwiseParallel (each wraps the replicated input: an all-reduce of its
   * gradient in backward), o_proj RowwiseParallel (its output all-reduced). With `sequence`
   * the input arrives sharded on the sequence and is all-gathered first (PrepareModuleInput;
   * a reduce-scatter of the summed gradient in backward), and o_proj's output is
   * reduce-scattered back to s/t positions.
   */
  readonly tensorParallel?: { readonly size: number; readonly sequence: boolean };
  /**
   * Llama style: RMSNorm modules over head_dim on the queries and keys (registered after
   * o_proj as `q_norm`, `k_norm`). `projection` (Qwen3): each right after its projection, on
   * the [B, S, heads, head_dim] view; `transpose` (Gemma 3): after all three projections, on
   * the transposed views.
   */
  readonly qkNorm?: { readonly q: Layer; readonly k: Layer; readonly at: 'projection' | 'transpose' };
  /** Attention-logit soft-capping (Gemma 2): eager scores become `tanh(scores / cap) * cap`, the tanh's result kept. */
  readonly softcap?: number;
  /** Phi-3: one fused `qkv_proj` (registered after `o_proj`) whose output q, k and v are slices (views) of. */
  readonly fusedQkv?: boolean;
  /** Phi-3's `apply_rotary_pos_emb`: rotary on `[..., :rotaryDim]`, then `cat` with the rest (a new tensor, even at head_dim). */
  readonly rotaryDim?: number;
  /** sdpa/flash output laid out [B, S, heads, D] (measured on CPU's flash kernel): the transpose back is contiguous, no copy. */
  readonly sdpaOutputTransposed?: boolean;
  /**
   * One rank of PyTorch's context parallelism (`context_parallel`, all-gather rotation): the
   * inputs hold the rank's s/c positions and sdpa runs as ring attention ({@link ringSdpaOp})
   * against every rank's keys and values. Needs `impl: 'sdpa'` with no mask (`is_causal`).
   */
  readonly contextParallel?: { readonly size: number; readonly rank: number; readonly loadBalance: boolean };
}

const ATTENTION_FIELDS: Fields = {
  ...fieldsOf(['hidden', 'heads', 'kvHeads', 'headDim', 'positions', 'rotaryDim'], integer(1)),
  ...fieldsOf(['qkvBias', 'outBias', 'maskBuffer', 'rotaryGathered', 'returnWeights', 'sdpaContiguous', 'fusedQkv', 'sdpaOutputTransposed'], boolean),
  ...fieldsOf(['dropout', 'residDropout'], probability),
  ...fieldsOf(['rotary', 'unusedModule'], layerCheck),
  impl: oneOf(['eager', 'sdpa', 'flash'], 'attention implementation'),
  style: oneOf(['llama', 'gpt2'], 'attention style'),
  className: string,
  locals: oneOf(['inline', 'function'], 'locals'),
  cache: falseOr(['alias', 'copy', 'copy-eval', 'alias-eval'], 'cache'),
  sdpaGqa: oneOf(['repeat', 'enable-gqa'], 'sdpaGqa'),
  softcap: number(Number.MIN_VALUE),
  tensorParallel: blockTensorParallel,
  qkNorm: object({ fields: { q: layerCheck, k: layerCheck, at: oneOf(['projection', 'transpose'], 'qkNorm placement') }, required: ['q', 'k', 'at'] }),
  contextParallel: object({
    fields: { size: integer(2, 1_000_000), rank: integer(0, 1_000_000), loadBalance: boolean },
    required: ['size', 'rank', 'loadBalance'],
  }),
};

/** Options of one style that the other ignores. */
const STYLE_ONLY = {
  llama: ['rotary', 'rotaryGathered', 'qkNorm', 'fusedQkv', 'rotaryDim', 'softcap', 'unusedModule'],
  gpt2: ['positions', 'maskBuffer', 'residDropout'],
} as const;

/**
 * The schema, then what the options must meet together: heads dividing hidden unless headDim
 * is given (transformers' `head_dim = hidden_size // num_heads`; GPT-2 raises "`embed_dim` must
 * be divisible by num_heads"), kv heads dividing heads (GQA's `num_key_value_groups`), rotaryDim
 * even and within a head, each style's own options, what is not modelled. Every problem at once.
 */
function checkAttentionOptions(options: AttentionOptions): void {
  checkOptions(options, ATTENTION_FIELDS, 'attention', ['hidden', 'heads']);
  const { hidden, heads, headDim, tensorParallel: tp, contextParallel: cp } = options;
  const kvHeads = options.kvHeads ?? heads;
  const gpt2 = options.style === 'gpt2';
  const issues: VramIssue[] = [];
  const add = (path: readonly string[], message: string, expected: string, received: string, code = 'bad-option') =>
    issues.push({ path: ['attention', ...path], code, message, expected, received });
  if ((headDim === undefined || gpt2) && hidden % heads !== 0)
    add(['heads'], 'heads must divide hidden (head_dim = hidden / heads)', `a divisor of ${hidden}`, show(heads));
  if (gpt2 && kvHeads !== heads) add(['kvHeads'], "GPT-2's fused c_attn has as many kv heads as heads", String(heads), show(kvHeads));
  else if (heads % kvHeads !== 0)
    add(['kvHeads'], 'kvHeads must divide heads (GQA: heads / kvHeads query heads per kv head)', `a divisor of ${heads}`, show(kvHeads));
  if (gpt2 && headDim !== undefined && headDim * heads !== hidden)
    add(['headDim'], "GPT-2's head dim is hidden / heads", String(hidden / heads), show(headDim));
  const d = headDim ?? hidden / heads;
  if (options.rotaryDim !== undefined && (options.rotaryDim % 2 !== 0 || options.rotaryDim > d))
    add(['rotaryDim'], 'rotaryDim is even (rotate_half splits it in halves) and at most the head dim', `an even integer <= ${d}`, show(options.rotaryDim));
  for (const key of STYLE_ONLY[gpt2 ? 'llama' : 'gpt2'])
    if (options[key] !== undefined) add([key], `applies to style '${gpt2 ? 'llama' : 'gpt2'}' only`, 'absent', show(options[key]));
  if (tp !== undefined && (gpt2 || options.fusedQkv === true))
    add(
      ['tensorParallel'],
      `tensor parallelism of ${gpt2 ? "GPT-2's fused Conv1D attention" : 'a fused qkv_proj'} is not modelled`,
      'absent',
      JSON.stringify(tp),
      'not-modelled',
    );
  if (cp !== undefined && options.impl !== 'sdpa')
    add(
      ['contextParallel'],
      'context parallelism runs sdpa as ring attention: eager and flash-attn attention are not context-parallel',
      "impl 'sdpa'",
      String(options.impl ?? 'eager'),
      'not-modelled',
    );
  if (cp !== undefined && cp.rank >= cp.size)
    add(['contextParallel', 'rank'], 'the context-parallel rank must be below the size', `0 .. ${cp.size - 1}`, show(cp.rank));
  if (issues.length > 0) throw new VramError(issues);
}

/** matmul's reshape of a transposed [B, heads, …] view to [B·heads, …]: a copy unless the batch is 1. */
function bmmOperand(g: GraphBuilder, t: TensorRef, batch: Dim): TensorRef {
  return g.call(copyOp, [t], { when: copyUnlessOne(batch) })[0]!;
}

function heads(g: GraphBuilder, x: TensorRef, batch: Dim, seq: Dim, count: number, dim: number): TensorRef {
  const split = g.call(viewOp, [x], { shape: [batch, seq, count, dim] })[0]!;
  return g.call(transposeOp, [split], { dim0: 1, dim1: 2 })[0]!;
}

/** `q*cos + rotate_half(q)*sin` (apply_rotary_pos_emb): saves cos and sin. */
function rotate(g: GraphBuilder, x: TensorRef, cos: TensorRef, sin: TensorRef, dim: number): TensorRef {
  const withCos = g.call(mulOp, [x, cos], {})[0]!;
  const x1 = g.call(sliceOp, [x], { dim: -1, start: 0, end: dim / 2 })[0]!;
  const x2 = g.call(sliceOp, [x], { dim: -1, start: dim / 2, end: dim })[0]!;
  const negated = g.call(negOp, [x2], {})[0]!;
  const rotated = g.call(catOp, [negated, x1], { dim: -1 })[0]!;
  const withSin = g.call(mulOp, [rotated, sin], {})[0]!;
  return g.call(addOp, [withCos, withSin], {})[0]!;
}

/** The scores' causal masking: GPT-2's buffer and `torch.where`, then an additive float mask (sliced when built longer). */
function maskScores(g: GraphBuilder, scores: TensorRef, mask: TensorRef | undefined, seq: Dim, buffer: number | null): TensorRef {
  let out = scores;
  if (buffer !== null) out = g.call(causalWhereOp, [out], { positions: buffer })[0]!;
  if (mask !== undefined) {
    // `attention_mask[:, :, :, : key_len]`: a view when the mask was built longer.
    const sliced = mask.shape[3] === seq ? mask : g.call(sliceOp, [mask], { dim: 3, start: 0, end: seq })[0]!;
    out = g.call(addOp, [out, sliced], {})[0]!;
  }
  return out;
}

/**
 * Multi-head attention as Hugging Face runs it (MHA, GQA or MQA), op for op, so what autograd
 * keeps follows: eager attention keeps the S×S probabilities (float32 softmax in the llama
 * style) and, with dropout, their mask per head, while `sdpa`/`flash` keep only q, k, v, the
 * output and a float32 log-sum-exp per head and position. Which Python locals keep tensors
 * alive, what the KV cache holds and how sdpa treats GQA follow the options, which
 * {@link llamaFamily} and {@link gpt2Model} set from a transformers release's rules.
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
  checkAttentionOptions(options);
  const a = attentionSetup(options);
  const body = graph((g, inputs) => {
    const { tp } = a;
    // Gradient checkpointing in train mode: transformers sets use_cache=False.
    const asked = options.cache ?? false;
    const cache =
      (g.training && g.checkpointing) || (g.training && asked !== false && asked.endsWith('-eval'))
        ? false
        : asked === false
          ? false
          : (asked.replace('-eval', '') as 'alias' | 'copy');
    // Sequence parallel: PrepareModuleInput all-gathers the sequence-sharded input.
    const h = tp?.sequence === true ? g.call(allGatherOp, [inputs[0]!], { dim: 1, size: tp.size })[0]! : inputs[0]!;
    checkInput(g, h, [3, 3], ['attention', 'hidden', options.hidden]);
    const [batch, seq] = h.shape as [Dim, Dim];
    const t: AttentionTrace = { g, h, batch, seq, cache };
    if (options.unusedModule !== undefined) g.applyAll(options.unusedModule, h);
    if (a.style === 'gpt2' && a.impl !== 'eager' && options.maskBuffer !== false) g.call(unusedCausalBuffersOp, [h], { positions: options.positions ?? 1024 });
    const qkv = a.style === 'gpt2' ? gpt2Projections(a, t, inputs) : llamaRotary(a, t, inputs, llamaProjections(a, t));
    const kv = keysValues(a, t, qkv);
    const math = a.impl === 'sdpa' && a.cp === undefined && sdpaMathPath(g, qkv.q, kv.v, a.p);
    const contiguousKv = (kv.repeats && !a.repeatIsView) || cache === 'copy';
    const sdpa = () => (math ? sdpaMath(g, qkv.q, kv.k, kv.v, a.p, batch, contiguousKv, qkv.mask) : fusedKernel(a, t, qkv.q, kv, qkv.mask));
    const { context, weights } = a.impl === 'eager' ? eagerKernel(a, t, qkv.q, kv, qkv.mask) : { context: sdpa(), weights: undefined };
    return attentionOutput(a, t, context, kv, weights, math);
  });
  // __init__ registers q/k/v/o then the norms (Qwen3, Gemma 3); Phi-3 registers o_proj before qkv_proj.
  const childOrder = a.fusedQkv
    ? { childOrder: Object.freeze(['o_proj', 'qkv_proj']) }
    : a.qkNorm !== undefined
      ? { childOrder: Object.freeze(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'q_norm', 'k_norm']) }
      : {};
  return Object.freeze({
    kind: 'module',
    ...childOrder,
    className: options.className ?? (a.style === 'gpt2' ? 'GPT2Attention' : 'LlamaAttention'),
    body,
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}

/** An attention layer's build: its options checked, the sizes and choices they make, its child layers. */
type AttentionSetup = ReturnType<typeof attentionSetup>;

/** One trace of an attention layer: the builder, the (gathered) hidden states, their batch and sequence, the cache in use. */
interface AttentionTrace {
  readonly g: GraphBuilder;
  readonly h: TensorRef;
  readonly batch: Dim;
  readonly seq: Dim;
  readonly cache: false | 'alias' | 'copy';
}

/** Queries, keys, values as [B, heads, S, D] (transposed views), and the float mask eager attention adds. */
interface Qkv {
  readonly q: TensorRef;
  readonly k: TensorRef;
  readonly v: TensorRef;
  readonly mask: TensorRef | undefined;
}

/** The keys and values attention reads (cached, repeated to every head), and whether repeat_kv ran. */
interface KeysValues {
  readonly k: TensorRef;
  readonly v: TensorRef;
  readonly repeats: boolean;
}

/** The options checked, the sizes and the child layers: made once rather than at every trace. */
function attentionSetup(options: AttentionOptions) {
  const nh = options.heads;
  const nkv = options.kvHeads ?? nh;
  const d = options.headDim ?? options.hidden / nh;
  const impl = options.impl ?? 'eager';
  const style = options.style ?? 'llama';
  const tp = options.tensorParallel;
  const groups = nh / nkv;
  const p = options.dropout ?? 0;
  const cp = options.contextParallel;
  const locals = options.locals ?? 'inline';
  // repeat_kv is expand + reshape: a view when there is one kv head (the merged dimension has
  // stride 0), a copy otherwise. Flash takes the kv heads as they are; so does sdpa with enable_gqa.
  const repeatsUnmasked = groups > 1 && impl !== 'flash' && !(impl === 'sdpa' && options.sdpaGqa === 'enable-gqa');
  const repeatIsView = nkv === 1;
  // The projections and dropouts, made once rather than at every trace.
  const bias = options.qkvBias ?? false;
  const cAttn = opLayer(linearOp, 'Conv1D', { out: 3 * options.hidden, transposedWeight: true, bias: options.qkvBias ?? true }, { name: 'c_attn' });
  const qProj = linear({ out: nh * d, bias, name: 'q_proj' });
  const kProj = linear({ out: nkv * d, bias, name: 'k_proj' });
  const vProj = linear({ out: nkv * d, bias, name: 'v_proj' });
  const qkvProj = linear({ out: (nh + 2 * nkv) * d, bias, name: 'qkv_proj' });
  const fusedQkv = options.fusedQkv === true;
  const qkNorm = options.qkNorm;
  const rotaryDim = options.rotaryDim;
  const tanh = activationOp('tanh');
  const attnDropout = dropout({ p, name: style === 'gpt2' ? 'attn_dropout' : 'attention_dropout' });
  const outProj =
    style === 'gpt2'
      ? opLayer(linearOp, 'Conv1D', { out: options.hidden, transposedWeight: true, bias: options.outBias ?? true }, { name: 'c_proj' })
      : linear({ out: options.hidden, bias: options.outBias ?? false, name: 'o_proj' });
  const residDropout = dropout({ p: options.residDropout ?? 0, name: 'resid_dropout' });
  const sizes = { options, nh, nkv, d, impl, style, tp, groups, p, cp, locals, repeatsUnmasked, repeatIsView };
  return { ...sizes, cAttn, qProj, kProj, vProj, qkvProj, fusedQkv, qkNorm, rotaryDim, tanh, attnDropout, outProj, residDropout };
}

/** GPT-2: one fused Conv1D `c_attn`, q, k and v views of its output. */
function gpt2Projections(a: AttentionSetup, t: AttentionTrace, inputs: readonly TensorRef[]): Qkv {
  const { g, batch, seq } = t;
  const { options, nh, d } = a;
  const fused = g.apply(a.cAttn, t.h);
  const part = (i: number) => g.call(sliceOp, [fused], { dim: -1, start: i * options.hidden, end: (i + 1) * options.hidden })[0]!;
  const q = heads(g, part(0), batch, seq, nh, d);
  const k = heads(g, part(1), batch, seq, nh, d);
  const v = heads(g, part(2), batch, seq, nh, d);
  // query, key, value are views of c_attn's output, locals until forward returns.
  g.hold(q);
  return { q, k, v, mask: inputs[1] };
}

/** Llama style: q/k/v projections (Phi-3: a fused one; Qwen3: normed per projection, Gemma 3: after the transposes). */
function llamaProjections(a: AttentionSetup, t: AttentionTrace): Omit<Qkv, 'mask'> {
  const { g, h, batch, seq } = t;
  const { nh, nkv, d, tp, qkNorm } = a;
  // ColwiseParallel without sequence parallel: each projection wraps the replicated input.
  const projected = (): TensorRef => (tp !== undefined && !tp.sequence ? g.call(tpCopyOp, [h], {})[0]! : h);
  let q: TensorRef;
  let k: TensorRef;
  let v: TensorRef;
  if (a.fusedQkv) {
    // Phi3Attention.forward's `qkv` local: alive until the attention returns.
    const fused = g.apply(a.qkvProj, h);
    g.hold(fused);
    const part = (start: number, end: number) => g.call(sliceOp, [fused], { dim: -1, start: start * d, end: end * d })[0]!;
    q = heads(g, part(0, nh), batch, seq, nh, d);
    k = heads(g, part(nh, nh + nkv), batch, seq, nkv, d);
    v = heads(g, part(nh + nkv, nh + 2 * nkv), batch, seq, nkv, d);
  } else if (qkNorm?.at === 'projection') {
    // Qwen3: `self.q_norm(self.q_proj(x).view(hidden_shape)).transpose(1, 2)`.
    const normed = (proj: Layer, norm: Layer, count: number) => {
      const split = g.call(viewOp, [g.apply(proj, projected())], { shape: [batch, seq, count, d] })[0]!;
      return g.call(transposeOp, [g.apply(norm, split)], { dim0: 1, dim1: 2 })[0]!;
    };
    q = normed(a.qProj, qkNorm.q, nh);
    k = normed(a.kProj, qkNorm.k, nkv);
    v = heads(g, g.apply(a.vProj, projected()), batch, seq, nkv, d);
  } else {
    q = heads(g, g.apply(a.qProj, projected()), batch, seq, nh, d);
    k = heads(g, g.apply(a.kProj, projected()), batch, seq, nkv, d);
    v = heads(g, g.apply(a.vProj, projected()), batch, seq, nkv, d);
  }
  if (qkNorm?.at === 'transpose') {
    q = g.apply(qkNorm.q, q);
    k = g.apply(qkNorm.k, k);
  }
  return { q, k, v };
}

/** Llama style: the rotary tables (its own module's, or the model's as inputs) applied to q and k. */
function llamaRotary(a: AttentionSetup, t: AttentionTrace, inputs: readonly TensorRef[], projected: Omit<Qkv, 'mask'>): Qkv {
  const { g, seq } = t;
  const { options, d, rotaryDim } = a;
  const { v } = projected;
  let cosIn: TensorRef;
  let sinIn: TensorRef;
  let mask: TensorRef | undefined;
  if (options.rotary !== undefined) {
    [cosIn, sinIn] = g.applyAll(options.rotary, v) as [TensorRef, TensorRef];
    mask = inputs[1];
  } else {
    // Llama style without its own rotary module takes the model's tables as inputs.
    if (inputs[1] === undefined || inputs[2] === undefined)
      fail('bad-layer', 'llama-style attention without `rotary` takes the rotary tables as its second and third inputs (cos, sin)', {
        path: ['attention', 'inputs'],
        expected: 'hidden states, cos, sin[, mask]',
        received: `${inputs.length} input${inputs.length === 1 ? '' : 's'}`,
      });
    cosIn = inputs[1];
    sinIn = inputs[2];
    mask = inputs[3];
  }
  // `cos, sin = ...` are locals of forward until it returns; tables gathered inside
  // apply_rotary_pos_emb (`cos[position_ids]`) go when both rotations are done.
  const gathered = options.rotaryGathered ?? false;
  if (!gathered) {
    g.hold(cosIn);
    g.hold(sinIn);
  }
  const rot = rotaryDim ?? d;
  const cos = g.call(viewOp, [cosIn], { shape: [1, 1, seq, rot] })[0]!;
  const sin = g.call(viewOp, [sinIn], { shape: [1, 1, seq, rot] })[0]!;
  // `query_states, key_states = apply_rotary_pos_emb(...)`: the originals are dropped only
  // when both are rotated.
  const [q0, k0] = [projected.q, projected.k];
  // Phi-3: `cat([rotate(x[..., :rot]), x[..., rot:]])`.
  const partial = (x: TensorRef) => {
    const head = g.call(sliceOp, [x], { dim: -1, start: 0, end: rot })[0]!;
    const rest = g.call(sliceOp, [x], { dim: -1, start: rot, end: d })[0]!;
    return g.call(catOp, [rotate(g, head, cos, sin, rot), rest], { dim: -1 })[0]!;
  };
  const q = rotaryDim === undefined ? rotate(g, q0, cos, sin, d) : partial(q0);
  const k = rotaryDim === undefined ? rotate(g, k0, cos, sin, d) : partial(k0);
  for (const x of gathered ? [q0, k0, cosIn, sinIn] : [q0, k0]) g.touch(x);
  g.hold(q);
  return { q, k, v, mask };
}

/** The KV cache (the tensors, or `torch.cat` copies, kept to the forward's end), the locals that hold k/v, repeat_kv. */
function keysValues(a: AttentionSetup, t: AttentionTrace, qkv: Qkv): KeysValues {
  const { g, batch, seq, cache } = t;
  const { nh, d, groups, impl, style, locals } = a;
  let { k, v } = qkv;
  if (cache === 'copy') {
    // DynamicLayer: torch.cat([empty, key_states]) — the cache's copies are what attention reads.
    // Both empties are made in the keys' dtype (cache_utils.py lazy_initialization): under autocast
    // the keys are float32 after rotary, so the values' cat promotes them to float32 too.
    k = g.call(copyOp, [k], {})[0]!;
    v = v.dtype === k.dtype ? g.call(copyOp, [v], {})[0]! : g.call(castOp, [v], { dtype: k.dtype })[0]!;
  }
  if (cache === 'alias' || cache === 'copy') {
    g.hold(k, 'forward');
    g.hold(v, 'forward');
  }
  if (locals === 'function') {
    g.hold(k);
    g.hold(v);
  }
  // use_gqa_in_sdpa: enable_gqa only without a mask.
  const repeats = a.repeatsUnmasked || (groups > 1 && impl === 'sdpa' && style === 'llama' && qkv.mask !== undefined);
  if (repeats) {
    const repeat = a.repeatIsView ? expandOp : copyOp;
    k = g.call(repeat, [k], { shape: [batch, nh, seq, d] })[0]!;
    v = g.call(repeat, [v], { shape: [batch, nh, seq, d] })[0]!;
  }
  if (locals === 'inline') {
    g.hold(k);
    g.hold(v);
  }
  return { k, v, repeats };
}

/** Eager attention: the S×S scores (scaled, soft-capped, masked), the softmax, dropout, the product with v. */
function eagerKernel(
  a: AttentionSetup,
  t: AttentionTrace,
  q: TensorRef,
  kv: KeysValues,
  mask: TensorRef | undefined,
): { context: TensorRef; weights: TensorRef } {
  const { g, batch, seq, cache } = t;
  const { options } = a;
  const { k, v, repeats } = kv;
  // matmul reshapes [B, heads, ...] to [B·heads, ...]: a view at batch 1 or for a
  // contiguous repeat_kv copy (or cache copy), a copy otherwise (q, k and v are transposed
  // views, and an expanded kv head has stride 0).
  const contiguousKv = (repeats && !a.repeatIsView) || (!repeats && cache === 'copy');
  const qm = bmmOperand(g, q, batch);
  const kt = g.call(transposeOp, [k], { dim0: 2, dim1: 3 })[0]!;
  const km = contiguousKv ? kt : bmmOperand(g, kt, batch);
  let scores = g.call(matmulOp, [qm, km], {})[0]!;
  if (a.style === 'gpt2') {
    const buffer = options.maskBuffer ?? true;
    // 4.x divides by torch.full([], √d) in the scores' dtype; 5.x multiplies by a Python float.
    scores = g.call(mulScalarOp, [scores], buffer ? { scalarDtype: scores.dtype } : {})[0]!;
    scores = maskScores(g, scores, mask, seq, buffer ? (options.positions ?? 1024) : null);
    scores = g.call(softmaxOp, [scores], { dim: -1 })[0]!;
  } else {
    scores = g.call(mulScalarOp, [scores], {})[0]!;
    if (options.softcap !== undefined) {
      // Gemma 2: `attn_weights / softcap`, `tanh`, `* softcap` (tanh keeps its result).
      scores = g.call(mulScalarOp, [scores], {})[0]!;
      scores = g.call(a.tanh, [scores], {})[0]!;
      scores = g.call(mulScalarOp, [scores], {})[0]!;
    }
    scores = maskScores(g, scores, mask, seq, null);
    scores = g.call(softmaxOp, [scores], { dim: -1, dtype: 'float32' })[0]!;
    scores = g.call(castOp, [scores], { dtype: q.dtype })[0]!;
  }
  const probs = g.apply(a.attnDropout, scores);
  const vm = contiguousKv ? v : bmmOperand(g, v, batch);
  return { context: g.call(matmulOp, [probs, vm], {})[0]!, weights: probs };
}

/** sdpa or flash (one kernel keeping q, k, v, the output and a log-sum-exp), or ring attention under context parallelism. */
function fusedKernel(a: AttentionSetup, t: AttentionTrace, q: TensorRef, kv: KeysValues, mask: TensorRef | undefined): TensorRef {
  const { g, cache } = t;
  const { options, impl, cp, p, repeatIsView } = a;
  const { k, v, repeats } = kv;
  let [qs, ks, vs] = [q, k, v];
  if (impl === 'sdpa' && options.sdpaContiguous) {
    // .contiguous() copies the transposed views; a repeat_kv copy already is contiguous.
    qs = g.call(copyOp, [q], {})[0]!;
    if (!repeats || repeatIsView) ks = g.call(copyOp, [k], {})[0]!;
    if (!repeats || repeatIsView) vs = g.call(copyOp, [v], {})[0]!;
  }
  // A mask sdpa is given (a sliding window it could not skip): the kernel keeps its float copy.
  if (cp !== undefined) {
    // context_parallel dispatches is_causal sdpa to the ring; a mask has no context-parallel form.
    if (mask !== undefined)
      fail('not-modelled', 'context parallelism needs causal sdpa without a mask (a sliding window or padding mask is not context-parallel)', {
        path: [options.name ?? 'attention', 'contextParallel'],
        expected: 'no attention mask',
        received: 'a mask',
      });
    // k and v: contiguous as repeat_kv (or cache) copies; otherwise transposed views (the rotary result keeps the [B, S, heads, D] layout, measured), copied by the ring.
    const copied = (repeats && !repeatIsView) || cache === 'copy';
    return g.call(ringSdpaOp, [qs, ks, vs], { size: cp.size, rank: cp.rank, loadBalance: cp.loadBalance, keyContiguous: copied, valueContiguous: copied })[0]!;
  }
  return impl === 'sdpa' && mask !== undefined
    ? g.call(sdpaMaskedOp, [qs, ks, vs, mask], { dropout: p })[0]!
    : g.call(sdpaOp, [qs, ks, vs], { dropout: p })[0]!;
}

/** The heads merged back (a copy unless the kernel's layout is already [B, S, heads, D]), the output projection (TP: reduced), GPT-2's dropout, the weights. */
function attentionOutput(
  a: AttentionSetup,
  t: AttentionTrace,
  context: TensorRef,
  kv: KeysValues,
  weights: TensorRef | undefined,
  math: boolean,
): TensorRef | TensorRef[] {
  const { g, batch, seq } = t;
  const { options, impl, cp, tp, nh, d } = a;
  const back = g.call(transposeOp, [context], { dim0: 1, dim1: 2 })[0]!;
  // Ring attention's merged output is a torch.cat ([B, heads, S, D] contiguous) when its last
  // step updated half the positions: load balancing, on every rank but the last.
  const catOutput = cp?.loadBalance === true && cp.rank < cp.size - 1;
  // sdpa's output takes the query's memory layout (torch 2.x CPU): a query made by partial rotary's
  // torch.cat is contiguous [B, heads, S, D], so the transpose back needs a copy (Phi-3, measured 5.18).
  const catQuery = options.rotaryDim !== undefined;
  const merged = impl !== 'eager' && options.sdpaOutputTransposed === true && !catOutput && !catQuery && !math ? back : g.call(copyOp, [back], {})[0]!;
  if (a.locals === 'function') {
    // eager_attention_forward returns here: its repeated k/v go now.
    g.touch(kv.k);
    g.touch(kv.v);
  }
  const flat = g.call(viewOp, [merged], { shape: [batch, seq, nh * d] })[0]!;
  let out = g.apply(a.outProj, flat);
  // RowwiseParallel's output: all-reduced (Replicate) or reduce-scattered (Shard(1)).
  if (tp !== undefined) out = tp.sequence ? g.call(reduceScatterOp, [out], { dim: 1, size: tp.size })[0]! : g.call(allReduceOp, [out], {})[0]!;
  const result = a.style === 'gpt2' ? g.apply(a.residDropout, out) : out;
  if (weights === undefined) return result;
  if (options.returnWeights) return [result, weights];
  // `attn_weights` is a local of forward until it returns.
  g.hold(weights);
  return result;
}
