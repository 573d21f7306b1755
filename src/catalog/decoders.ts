import { causalMaskRule, rotaryRule } from '../ops/attention.js';
import { castRule } from '../ops/cast.js';
import { logSoftmaxRule, nllLossRule } from '../ops/loss.js';
import { addRule } from '../ops/merge.js';
import { copyRule, sliceRule, viewRule } from '../ops/view.js';
import { attention, type AttentionImpl } from '../nn/attention.js';
import { dropout } from '../nn/dropout.js';
import { embedding } from '../nn/embedding.js';
import { graph } from '../nn/graph.js';
import { layerNorm } from '../nn/layerNorm.js';
import { linear } from '../nn/linear.js';
import { gatedMlp, mlp } from '../nn/mlp.js';
import { module } from '../nn/module.js';
import { rmsNorm } from '../nn/rmsNorm.js';
import type { GraphBuilder, Layer, ModuleLayer, ModelMeta, TensorRef } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import { mul, sub } from '../sym/ops.js';
import type { DType } from '../tensor/dtype.js';

/** The shape of a Llama-family decoder (Llama, Qwen2, Mistral). */
export interface LlamaShape {
  readonly family: 'llama' | 'qwen2' | 'mistral';
  readonly hidden: number;
  readonly intermediate: number;
  readonly layers: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly vocab: number;
  readonly tied: boolean;
  /** Bias on q/k/v (Qwen2: always; Llama: attention_bias, which also puts one on o). */
  readonly qkvBias: boolean;
  readonly outBias: boolean;
  readonly mlpBias: boolean;
  readonly attentionDropout: number;
  readonly slidingWindow?: number;
}

/** Options shared by the decoder builders. */
export interface DecoderOptions {
  /** `eager` (default, materialised S×S scores), `sdpa` or `flash`. */
  readonly attention?: AttentionImpl;
  /** Default parameter dtype (e.g. `bfloat16`, as checkpoints ship); estimate's dtype/precision override it. */
  readonly dtype?: DType;
}

const PREFIX: Readonly<Record<LlamaShape['family'], string>> = { llama: 'Llama', qwen2: 'Qwen2', mistral: 'Mistral' };

/** The training loss of `ForCausalLMLoss`: logits upcast to float32, labels padded and shifted, mean cross-entropy. */
function causalLmLoss(g: GraphBuilder, logits: TensorRef, ids: TensorRef, vocab: number, shiftLogits: boolean, upcast: boolean): TensorRef {
  const [batch, seq] = ids.shape as [Dim, Dim];
  let scores = upcast ? g.call(castRule, [logits], { dtype: 'float32' })[0]! : logits;
  let rows: Dim = mul(batch, seq);
  let labels: TensorRef;
  if (shiftLogits) {
    // GPT-2 (HF 4.45): logits[..., :-1, :].contiguous() and labels[..., 1:].contiguous().
    const kept = sub(seq, 1);
    scores = g.call(copyRule, [g.call(sliceRule, [scores], { dim: 1, start: 0, end: kept })[0]!], {})[0]!;
    labels = g.call(copyRule, [g.call(sliceRule, [ids], { dim: 1, start: 1, end: seq })[0]!], {})[0]!;
    rows = mul(batch, kept);
  } else {
    // ForCausalLMLoss: F.pad(labels, (0, 1), -100)[..., 1:].contiguous(): a new int64 [B, S].
    labels = g.call(copyRule, [ids], {})[0]!;
  }
  const flat = g.call(viewRule, [scores], { shape: [rows, vocab] })[0]!;
  const target = g.call(viewRule, [labels], { shape: [rows] })[0]!;
  const logp = g.call(logSoftmaxRule, [flat], { dim: 1 })[0]!;
  return g.call(nllLossRule, [logp, target], {})[0]!;
}

/**
 * A Llama-family causal LM as Hugging Face's `*ForCausalLM` runs it with `labels`: embed
 * tokens, build the eager causal mask and the rotary tables once, N pre-norm decoder layers
 * (RMSNorm, attention, residual, RMSNorm, SwiGLU, residual), final RMSNorm, LM head, and in
 * training the loss. Module names and parameters follow the checkpoints.
 *
 * @example
 * ```ts
 * import { estimate, llamaFamily } from 'vram-ts';
 * const tiny = llamaFamily({ family: 'llama', hidden: 64, intermediate: 172, layers: 1, heads: 4, kvHeads: 4, headDim: 16, vocab: 256, tied: false, qkvBias: false, outBias: false, mlpBias: false, attentionDropout: 0 });
 * console.log(estimate(tiny, { input: [1, 16] }).params.total); // 82368
 * ```
 */
export function llamaFamily(shape: LlamaShape, options: DecoderOptions = {}): ModuleLayer {
  const impl = options.attention ?? 'eager';
  const prefix = PREFIX[shape.family];
  const layers: Layer[] = Array.from({ length: shape.layers }, (_, i) =>
    module(
      `layers.${i}`,
      `${prefix}DecoderLayer`,
      graph((g, [h, cos, sin, mask]) => {
        const normed = g.apply(rmsNorm({ size: shape.hidden, name: 'input_layernorm', className: `${prefix}RMSNorm` }), h!);
        const [attn, weights] = g.applyAll(
          attention({
            name: 'self_attn',
            className: `${prefix}Attention`,
            hidden: shape.hidden,
            heads: shape.heads,
            kvHeads: shape.kvHeads,
            headDim: shape.headDim,
            qkvBias: shape.qkvBias,
            outBias: shape.outBias,
            impl,
            dropout: shape.attentionDropout,
          }),
          ...[normed, cos!, sin!, ...(mask ? [mask] : [])],
        );
        // `hidden_states, _ = self.self_attn(...)`: the eager attention weights live until the layer returns.
        if (weights !== undefined) g.hold(weights);
        const mid = g.call(addRule, [h!, attn!], {})[0]!;
        const normed2 = g.apply(rmsNorm({ size: shape.hidden, name: 'post_attention_layernorm', className: `${prefix}RMSNorm` }), mid);
        const out = g.apply(gatedMlp({ name: 'mlp', className: `${prefix}MLP`, hidden: shape.hidden, intermediate: shape.intermediate, bias: shape.mlpBias }), normed2);
        return g.call(addRule, [mid, out], {})[0]!;
      }),
    ),
  );
  const model = module(
    'model',
    `${prefix}Model`,
    graph((g, [ids]) => {
      const embeds = g.apply(embedding({ num: shape.vocab, dim: shape.hidden, name: 'embed_tokens' }), ids!);
      g.hold(embeds);
      // Eager attention adds a float [B,1,S,S] mask; sdpa and flash take is_causal instead.
      const mask = impl === 'eager' ? g.call(causalMaskRule, [embeds], {})[0] : undefined;
      if (mask !== undefined) g.hold(mask);
      const [cos, sin] = applyRotary(g, embeds, shape.headDim, prefix);
      g.hold(cos);
      g.hold(sin);
      let h = embeds;
      for (const layer of layers) h = g.apply(layer, h, cos, sin, ...(mask ? [mask] : []));
      return g.apply(rmsNorm({ size: shape.hidden, name: 'norm', className: `${prefix}RMSNorm` }), h);
    }),
  );
  const meta: ModelMeta = {
    kind: 'decoder',
    family: shape.family,
    layers: shape.layers,
    heads: shape.heads,
    kvHeads: shape.kvHeads,
    headDim: shape.headDim,
    hidden: shape.hidden,
    vocab: shape.vocab,
    ...(shape.slidingWindow !== undefined ? { slidingWindow: shape.slidingWindow } : {}),
  };
  return Object.freeze({
    kind: 'module',
    className: `${prefix}ForCausalLM`,
    inputDtype: 'int64',
    ...(options.dtype !== undefined ? { dtype: options.dtype } : {}),
    meta,
    body: graph((g, [ids]) => {
      const h = g.apply(model, ids!);
      const logits = g.apply(linear({ out: shape.vocab, bias: false, name: 'lm_head', ...(shape.tied ? { tiedWeight: 'model.embed_tokens.weight' } : {}) }), h);
      return g.gradEnabled ? causalLmLoss(g, logits, ids!, shape.vocab, false, true) : logits;
    }),
  });
}

/** `model.rotary_emb(embeds, position_ids)`: the cos and sin tables, once per forward. */
function applyRotary(g: GraphBuilder, embeds: TensorRef, headDim: number, prefix: string): [TensorRef, TensorRef] {
  const rotary = module('rotary_emb', `${prefix}RotaryEmbedding`, graph((inner, [x]) => inner.call(rotaryRule, [x!], { headDim })));
  const [cos, sin] = g.applyAll(rotary, embeds);
  return [cos!, sin!];
}

/** The shape of a GPT-2 model. */
export interface Gpt2Shape {
  readonly hidden: number;
  readonly layers: number;
  readonly heads: number;
  readonly inner: number;
  readonly vocab: number;
  readonly positions: number;
  readonly attnDropout: number;
  readonly residDropout: number;
  readonly embdDropout: number;
}

/**
 * GPT-2 as Hugging Face's GPT2LMHeadModel (4.45) runs it: token and learned position
 * embeddings, pre-LayerNorm blocks with fused Conv1D attention (bool mask buffer, torch.where)
 * and a NewGELU MLP, final LayerNorm, the LM head tied to the token embedding, and in
 * training the loss on a shifted copy of the logits.
 *
 * @example
 * ```ts
 * import { estimate, gpt2Model } from 'vram-ts';
 * const tiny = gpt2Model({ hidden: 64, layers: 1, heads: 4, inner: 256, vocab: 256, positions: 64, attnDropout: 0, residDropout: 0, embdDropout: 0 });
 * console.log(estimate(tiny, { input: [1, 16] }).params.total); // 70592
 * ```
 */
export function gpt2Model(shape: Gpt2Shape, options: DecoderOptions = {}): ModuleLayer {
  const impl = options.attention ?? 'eager';
  const blocks: Layer[] = Array.from({ length: shape.layers }, (_, i) =>
    module(
      `h.${i}`,
      'GPT2Block',
      graph((g, [h]) => {
        const a = g.apply(layerNorm({ name: 'ln_1' }), h!);
        const attn = g.apply(
          attention({ name: 'attn', style: 'gpt2', hidden: shape.hidden, heads: shape.heads, impl, dropout: shape.attnDropout, residDropout: shape.residDropout, positions: shape.positions, qkvBias: true, outBias: true }),
          a,
        );
        const mid = g.call(addRule, [attn, h!], {})[0]!;
        const b = g.apply(layerNorm({ name: 'ln_2' }), mid);
        const out = g.apply(mlp({ name: 'mlp', hidden: shape.hidden, inner: shape.inner, activation: 'gelu_new', conv1d: true, dropout: shape.residDropout }), b);
        return g.call(addRule, [mid, out], {})[0]!;
      }),
    ),
  );
  const transformer = module(
    'transformer',
    'GPT2Model',
    graph((g, [ids]) => {
      const [, seq] = ids!.shape as [Dim, Dim];
      const tokens = g.apply(embedding({ num: shape.vocab, dim: shape.hidden, name: 'wte' }), ids!);
      // position_ids = arange(0, S).unsqueeze(0): a new int64 [1, S] (made here from the ids' shape).
      const positionIds = g.call(copyRule, [g.call(sliceRule, [ids!], { dim: 0, start: 0, end: 1 })[0]!], { shape: [1, seq] })[0]!;
      const positions = g.apply(embedding({ num: shape.positions, dim: shape.hidden, name: 'wpe' }), positionIds);
      g.hold(tokens);
      g.hold(positions);
      let h = g.call(addRule, [tokens, positions], {})[0]!;
      h = g.apply(dropout({ p: shape.embdDropout, name: 'drop' }), h);
      for (const block of blocks) h = g.apply(block, h);
      return g.apply(layerNorm({ name: 'ln_f' }), h);
    }),
  );
  const meta: ModelMeta = { kind: 'decoder', family: 'gpt2', layers: shape.layers, heads: shape.heads, kvHeads: shape.heads, headDim: shape.hidden / shape.heads, hidden: shape.hidden, vocab: shape.vocab };
  return Object.freeze({
    kind: 'module',
    className: 'GPT2LMHeadModel',
    inputDtype: 'int64',
    ...(options.dtype !== undefined ? { dtype: options.dtype } : {}),
    meta,
    body: graph((g, [ids]) => {
      const h = g.apply(transformer, ids!);
      const logits = g.apply(linear({ out: shape.vocab, bias: false, name: 'lm_head', tiedWeight: 'transformer.wte.weight' }), h);
      return g.gradEnabled ? causalLmLoss(g, logits, ids!, shape.vocab, true, false) : logits;
    }),
  });
}
