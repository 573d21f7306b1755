import { fail } from '../errors.js';
import { sdpaOp } from '../ops/attention.js';
import { sdpaMath, sdpaMathPath } from './sdpa-math.js';
import { castOp } from '../ops/cast.js';
import { addOp, catOp, mulOp } from '../ops/merge.js';
import { matmulOp } from '../ops/matmul.js';
import { mulScalarOp, softmaxOp } from '../ops/pointwise.js';
import { copyOp, copyUnlessOne, expandOp, sliceOp, transposeOp, viewOp } from '../ops/view.js';
import type { Dim } from '../sym/expr.js';
import { graph } from './graph.js';
import { linear } from './linear.js';
import { boolean, integer, oneOf, string } from '../validate.js';
import { checkInput, falseOr, fieldsOf } from './block-schema.js';
import { checkOptions, type Fields } from './op.js';
import { rmsNorm } from './rmsNorm.js';
import type { GraphBuilder, Layer, LayerOptions, ModuleLayer, TensorRef } from './types.js';

/** Options of {@link mlaAttention}. */
export interface MlaOptions extends LayerOptions {
  readonly hidden: number;
  readonly heads: number;
  /** `q_lora_rank`: q through q_a_proj → q_a_layernorm → q_b_proj; null: one q_proj. */
  readonly qLoraRank: number | null;
  readonly kvLoraRank: number;
  readonly qkNopeHeadDim: number;
  readonly qkRopeHeadDim: number;
  readonly vHeadDim: number;
  /** `attention_bias`: biases on q_a_proj, kv_a_proj_with_mqa and o_proj. */
  readonly bias?: boolean;
  /** `rope_interleave` (DeepSeek-V3's default true): the rotation on even/odd slices; false: rotate_half. */
  readonly interleave?: boolean;
  /**
   * DeepSeek-V2's `apply_rotary_emb`: q/k as complex pairs times the complex `freqs_cis` (one
   * product each, which keeps the table), then back to real.
   */
  readonly complexRotary?: boolean;
  /** Eager attention (materialised scores, returned as the second output) or sdpa. Default eager. */
  readonly impl?: 'eager' | 'sdpa';
  /**
   * Where the forward's cache puts the latents: `latent` (transformers 5.x: `past_key_values.update(kv_nope, k_rot)`
   * holds copies of the normed latent [B, 1, S, kv_lora_rank] and the rotated k_rot [B, 1, S, rope]), or false.
   */
  readonly cache?: 'latent' | 'heads' | false;
  readonly className?: string;
}

const positive = integer(1);

const MLA_FIELDS: Fields = {
  ...fieldsOf(['hidden', 'heads', 'kvLoraRank', 'qkNopeHeadDim', 'qkRopeHeadDim', 'vHeadDim'], positive),
  // `q_lora_rank: null` is a config's way of saying one q_proj.
  qLoraRank: (value, path, issues) => {
    if (value !== null) positive(value, path, issues);
  },
  ...fieldsOf(['bias', 'interleave', 'complexRotary'], boolean),
  impl: oneOf(['eager', 'sdpa'], 'attention implementation'),
  cache: falseOr(['latent', 'heads'], 'cache'),
  className: string,
};

/** The attention's projections (q's one or three by `q_lora_rank`), built once. */
interface MlaParts {
  readonly options: MlaOptions;
  readonly qProj: Layer | undefined;
  readonly qA: Layer | undefined;
  readonly qNorm: Layer | undefined;
  readonly qB: Layer | undefined;
  readonly kvA: Layer;
  readonly kvNorm: Layer;
  readonly kvB: Layer;
  readonly oProj: Layer;
}

function checkMlaOptions(options: MlaOptions): void {
  checkOptions(options, MLA_FIELDS, 'mlaAttention', ['hidden', 'heads', 'qLoraRank', 'kvLoraRank', 'qkNopeHeadDim', 'qkRopeHeadDim', 'vHeadDim']);
  // The rotary part is rotated in halves (rotate_half) or in even/odd pairs.
  if (options.qkRopeHeadDim % 2 !== 0)
    fail('bad-option', 'the rotary head dim is even', {
      path: ['mlaAttention', 'qkRopeHeadDim'],
      expected: 'an even integer',
      received: String(options.qkRopeHeadDim),
    });
}

/** q (through q_proj or q_a_proj → q_a_layernorm → q_b_proj) as heads, split into its nope and rotary parts. */
function queryParts(g: GraphBuilder, parts: MlaParts, h: TensorRef, batch: Dim, seq: Dim): [TensorRef, TensorRef] {
  const { qProj, qA, qNorm, qB } = parts;
  const { heads: nh, qkNopeHeadDim: nope, qkRopeHeadDim: rope } = parts.options;
  const qk = nope + rope;
  const q = qProj !== undefined ? g.apply(qProj, h) : g.apply(qB!, g.apply(qNorm!, g.apply(qA!, h)));
  g.hold(q);
  const qHeads = g.call(transposeOp, [g.call(viewOp, [q], { shape: [batch, seq, nh, qk] })[0]!], { dim0: 1, dim1: 2 })[0]!;
  const qPass = g.call(sliceOp, [qHeads], { dim: -1, start: 0, end: nope })[0]!;
  const qRot = g.call(sliceOp, [qHeads], { dim: -1, start: nope, end: qk })[0]!;
  return [qPass, qRot];
}

/** kv_a_proj_with_mqa's output split: the normed latent [B, 1, S, r] and the shared rotary key [B, 1, S, rope]. */
function latentParts(g: GraphBuilder, parts: MlaParts, h: TensorRef, batch: Dim, seq: Dim): [TensorRef, TensorRef] {
  const { kvLoraRank: r, qkRopeHeadDim: rope } = parts.options;
  const compressed = g.apply(parts.kvA, h);
  g.hold(compressed);
  const kvSlice = g.call(sliceOp, [compressed], { dim: -1, start: 0, end: r })[0]!;
  const kRotSlice = g.call(sliceOp, [compressed], { dim: -1, start: r, end: r + rope })[0]!;
  const kvNormed = g.call(viewOp, [g.apply(parts.kvNorm, kvSlice)], { shape: [batch, 1, seq, r] })[0]!;
  const kRot0 = g.call(viewOp, [kRotSlice], { shape: [batch, 1, seq, rope] })[0]!;
  return [kvNormed, kRot0];
}

/** expand_kv: kv_b_proj, per-head keys and values, keys in a new tensor (new_empty + two copy_). */
function expandKv(g: GraphBuilder, parts: MlaParts, kvNope: TensorRef, kRot: TensorRef, batch: Dim, seq: Dim): [TensorRef, TensorRef] {
  const { heads: nh, qkNopeHeadDim: nope, qkRopeHeadDim: rope, vHeadDim: vd } = parts.options;
  const kv = g.apply(parts.kvB, kvNope);
  const kvHeads = g.call(transposeOp, [g.call(viewOp, [kv], { shape: [batch, seq, nh, nope + vd] })[0]!], { dim0: 1, dim1: 2 })[0]!;
  const kNope = g.call(sliceOp, [kvHeads], { dim: -1, start: 0, end: nope })[0]!;
  const value = g.call(sliceOp, [kvHeads], { dim: -1, start: nope, end: nope + vd })[0]!;
  g.hold(value);
  const kRotAll = g.call(expandOp, [kRot], { shape: [batch, nh, seq, rope] })[0]!;
  const key = g.call(catOp, [kNope, kRotAll], { dim: -1 })[0]!;
  g.hold(key);
  return [key, value];
}

/** Eager attention (the context and the probabilities it returns) or sdpa (the context alone). */
function attend(
  g: GraphBuilder,
  impl: 'eager' | 'sdpa',
  query: TensorRef,
  key: TensorRef,
  value: TensorRef,
  mask: TensorRef | undefined,
  batch: Dim,
): [TensorRef, TensorRef | undefined] {
  if (impl === 'sdpa') {
    // sdpa_attention_forward (5.x): no repeat (as many kv heads as heads), no .contiguous(), is_causal without a mask;
    // on CPU a value head unlike the query's sends it down the math path.
    if (sdpaMathPath(g, query, value, 0)) return [sdpaMath(g, query, key, value, 0, batch), undefined];
    return [g.call(sdpaOp, [query, key, value], { dropout: 0 })[0]!, undefined];
  }
  // query and key are contiguous: bmm takes them as views; the value slice is copied unless B = 1.
  const kt = g.call(transposeOp, [key], { dim0: 2, dim1: 3 })[0]!;
  let scores = g.call(matmulOp, [query, kt], {})[0]!;
  scores = g.call(mulScalarOp, [scores], {})[0]!;
  if (mask !== undefined) scores = g.call(addOp, [scores, mask], {})[0]!;
  scores = g.call(softmaxOp, [scores], { dim: -1, dtype: 'float32' })[0]!;
  scores = g.call(castOp, [scores], { dtype: query.dtype })[0]!;
  const vm = g.call(copyOp, [value], { when: copyUnlessOne(batch) })[0]!;
  return [g.call(matmulOp, [scores, vm], {})[0]!, scores];
}

/** The attention's forward on (hidden states, cos, sin, optional mask). */
function mlaForward(g: GraphBuilder, parts: MlaParts, [h, cosIn, sinIn, mask]: readonly TensorRef[]): TensorRef | readonly TensorRef[] {
  const { options } = parts;
  const { heads: nh, qkRopeHeadDim: rope, vHeadDim: vd } = options;
  checkInput(g, h!, [3, 3], ['mlaAttention', 'hidden', options.hidden]);
  if (cosIn === undefined || sinIn === undefined)
    fail('bad-layer', 'multi-head latent attention takes the rotary tables as its second and third inputs (cos, sin)', {
      path: ['mlaAttention', 'inputs'],
      expected: 'hidden states, cos, sin[, mask]',
      received: `${cosIn === undefined ? 1 : 2} inputs`,
    });
  const [batch, seq] = h!.shape as [Dim, Dim];
  const [qPass, qRot] = queryParts(g, parts, h!, batch, seq);
  const [kvNormed, kRot0] = latentParts(g, parts, h!, batch, seq);
  g.hold(cosIn!);
  g.hold(sinIn!);
  const cos = g.call(viewOp, [cosIn!], { shape: [1, 1, seq, rope] })[0]!;
  const sin = g.call(viewOp, [sinIn!], { shape: [1, 1, seq, rope] })[0]!;
  const rotate = (x: TensorRef): TensorRef =>
    options.complexRotary === true
      ? g.call(mulOp, [x, cos], {})[0]!
      : (options.interleave ?? true)
        ? interleaved(g, x, cos, sin, rope)
        : rotateHalf(g, x, cos, sin, rope);
  const qEmbed = rotate(qRot);
  let kRot = rotate(kRot0);
  let kvNope = kvNormed;
  if (options.cache === 'latent') {
    // DynamicLayer.update: torch.cat onto an empty tensor, the cache's copies are returned.
    g.touch(kvNope);
    g.touch(kRot);
    kvNope = g.call(copyOp, [kvNope], {})[0]!;
    kRot = g.call(copyOp, [kRot], {})[0]!;
    g.hold(kvNope, 'forward');
    g.hold(kRot, 'forward');
  }
  g.hold(kvNope);
  g.hold(kRot);
  const query = g.call(catOp, [qPass, qEmbed], { dim: -1 })[0]!;
  g.hold(query);
  let [key, value] = expandKv(g, parts, kvNope, kRot, batch, seq);
  if (options.cache === 'heads') {
    // 4.57: the per-head keys (torch.cat of k_pass and the expanded k_rot) and values are what
    // DynamicLayer.update concatenates onto empty tensors and returns; the copies live to the end.
    [key, value] = [g.call(copyOp, [key], {})[0]!, g.call(copyOp, [value], {})[0]!];
    g.hold(key, 'forward');
    g.hold(value, 'forward');
  }
  const [context, weights] = attend(g, options.impl ?? 'eager', query, key, value, mask, batch);
  const merged = g.call(copyOp, [g.call(transposeOp, [context], { dim0: 1, dim1: 2 })[0]!], {})[0]!;
  const out = g.apply(parts.oProj, g.call(viewOp, [merged], { shape: [batch, seq, nh * vd] })[0]!);
  return weights === undefined ? out : [out, weights];
}

/**
 * DeepSeek's multi-head latent attention (MLA) as transformers 5.x's `DeepseekV3Attention`
 * runs it (`modeling_deepseek_v3.py:361-500`): q through the low-rank `q_a_proj` →
 * `q_a_layernorm` → `q_b_proj` (or one `q_proj` when `q_lora_rank` is null), split into the
 * `qk_nope_head_dim` part and the rotated `qk_rope_head_dim` part; `kv_a_proj_with_mqa` makes the
 * latent (kv_lora_rank, normed by `kv_a_layernorm`) and one shared rotary key; the cache keeps
 * the latent and the rotated key (kv_lora_rank + qk_rope_head_dim per token and layer);
 * `expand_kv` decompresses keys and values per head with `kv_b_proj`. Inputs: hidden states, the
 * model's cos and sin ([1, S, rope]) and optionally the additive mask.
 *
 * @example
 * ```ts
 * import { mlaAttention } from 'vram-ts';
 * const attn = mlaAttention({ hidden: 64, heads: 4, qLoraRank: 32, kvLoraRank: 16, qkNopeHeadDim: 16, qkRopeHeadDim: 8, vHeadDim: 16, name: 'self_attn' });
 * console.log(attn.childOrder?.join(' ')); // "q_a_proj q_a_layernorm q_b_proj kv_a_proj_with_mqa kv_a_layernorm kv_b_proj o_proj"
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function mlaAttention(options: MlaOptions): ModuleLayer {
  checkMlaOptions(options);
  const { hidden, heads: nh, qLoraRank, kvLoraRank: r, qkNopeHeadDim: nope, qkRopeHeadDim: rope, vHeadDim: vd } = options;
  const qk = nope + rope;
  const bias = options.bias ?? false;
  const prefix = options.className?.replace(/Attention$/, '') ?? 'DeepseekV3';
  const parts: MlaParts = {
    options,
    qProj: qLoraRank === null ? linear({ out: nh * qk, bias: false, name: 'q_proj' }) : undefined,
    qA: qLoraRank === null ? undefined : linear({ out: qLoraRank, bias, name: 'q_a_proj' }),
    qNorm: qLoraRank === null ? undefined : rmsNorm({ size: qLoraRank, name: 'q_a_layernorm', className: `${prefix}RMSNorm` }),
    qB: qLoraRank === null ? undefined : linear({ out: nh * qk, bias: false, name: 'q_b_proj' }),
    kvA: linear({ out: r + rope, bias, name: 'kv_a_proj_with_mqa' }),
    kvNorm: rmsNorm({ size: r, name: 'kv_a_layernorm', className: `${prefix}RMSNorm` }),
    kvB: linear({ out: nh * (nope + vd), bias: false, name: 'kv_b_proj' }),
    oProj: linear({ out: hidden, bias, name: 'o_proj' }),
  };
  const body = graph((g, inputs) => mlaForward(g, parts, inputs));
  const childOrder = Object.freeze(
    qLoraRank === null
      ? ['q_proj', 'kv_a_proj_with_mqa', 'kv_a_layernorm', 'kv_b_proj', 'o_proj']
      : ['q_a_proj', 'q_a_layernorm', 'q_b_proj', 'kv_a_proj_with_mqa', 'kv_a_layernorm', 'kv_b_proj', 'o_proj'],
  );
  return Object.freeze({
    kind: 'module',
    className: options.className ?? 'DeepseekV3Attention',
    childOrder,
    body,
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}

/** `apply_rotary_pos_emb_interleave`: cos/sin halves, even/odd slices, four products, two sums, one cat. */
function interleaved(g: GraphBuilder, x: TensorRef, cosFull: TensorRef, sinFull: TensorRef, rope: number): TensorRef {
  const cos = g.call(sliceOp, [cosFull], { dim: -1, start: 0, end: rope / 2 })[0]!;
  const sin = g.call(sliceOp, [sinFull], { dim: -1, start: 0, end: rope / 2 })[0]!;
  const x1 = g.call(sliceOp, [x], { dim: -1, start: 0, end: rope / 2 })[0]!;
  const x2 = g.call(sliceOp, [x], { dim: -1, start: rope / 2, end: rope })[0]!;
  const a = g.call(addOp, [g.call(mulOp, [x1, cos], {})[0]!, g.call(mulOp, [x2, sin], {})[0]!], {})[0]!;
  const b = g.call(addOp, [g.call(mulOp, [x2, cos], {})[0]!, g.call(mulOp, [x1, sin], {})[0]!], {})[0]!;
  return g.call(catOp, [a, b], { dim: -1 })[0]!;
}

/** `apply_rotary_pos_emb`: `x * cos + rotate_half(x) * sin`. */
function rotateHalf(g: GraphBuilder, x: TensorRef, cos: TensorRef, sin: TensorRef, rope: number): TensorRef {
  const x1 = g.call(sliceOp, [x], { dim: -1, start: 0, end: rope / 2 })[0]!;
  const x2 = g.call(sliceOp, [x], { dim: -1, start: rope / 2, end: rope })[0]!;
  const rotated = g.call(catOp, [x2, x1], { dim: -1 })[0]!;
  return g.call(addOp, [g.call(mulOp, [x, cos], {})[0]!, g.call(mulOp, [rotated, sin], {})[0]!], {})[0]!;
}
