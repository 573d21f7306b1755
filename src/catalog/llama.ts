import { castRule } from '../ops/cast.js';
import { causalMaskRule, positionsRule } from '../ops/causal-mask.js';
import { addRule } from '../ops/merge.js';
import { rotaryBuffersRule, rotaryCacheRule, rotaryRule } from '../ops/rotary.js';
import { expandRule } from '../ops/view.js';
import { attention, type AttentionImpl } from '../nn/attention.js';
import { embedding } from '../nn/embedding.js';
import { graph } from '../nn/graph.js';
import { linear } from '../nn/linear.js';
import { gatedMlp } from '../nn/mlp.js';
import { module } from '../nn/module.js';
import { opLayer } from '../nn/op.js';
import { repeatedBlocks } from '../nn/repeated.js';
import { rmsNorm } from '../nn/rmsNorm.js';
import type { GraphBuilder, Layer, ModuleLayer, ModelMeta, TensorRef } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import type { DType } from '../tensor/dtype.js';
import { causalLmLoss } from './lm-loss.js';
import { transformersRules, type HFRules } from './transformers.js';
import { checkKeys } from '../nn/op.js';
import { decoderOptions } from '../options.js';
import { validate } from '../validate.js';

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
  /** max_position_embeddings: the length of the rotary tables releases up to 4.44 cache (default 2048). */
  readonly maxPositions?: number;
  /** The MLP gate's activation, a Hugging Face `hidden_act` (default `silu`). */
  readonly activation?: string;
  /** Qwen2 up to 4.41: the mask applies `sliding_window` whatever `use_sliding_window` says (its temporaries). */
  readonly maskWindow?: boolean;
}

/** Options shared by the decoder builders. */
export interface DecoderOptions {
  /**
   * `eager` (materialised S×S scores), `sdpa` or `flash`. Default: what the release picks
   * ({@link HFRules.defaultAttention}: sdpa, except GPT-2 before 4.42), as transformers does on
   * PyTorch ≥ 2.1.1; on PyTorch 1.13 transformers runs `eager`, so ask for it.
   */
  readonly attention?: AttentionImpl;
  /** Default parameter dtype (e.g. `bfloat16`, as checkpoints ship); estimate's dtype/precision override it. */
  readonly dtype?: DType;
  /**
   * The Hugging Face transformers release whose modeling code to follow (`'4.40.2'`); default
   * the newest release read ({@link DEFAULT_TRANSFORMERS}). See {@link TRANSFORMERS_RULES}.
   */
  readonly transformers?: string;
  /**
   * `use_cache` of the forward (default true, as `config.use_cache`): every layer's keys and
   * values go into the cache that the output holds until the forward returns.
   */
  readonly useCache?: boolean;
}

const PREFIX: Readonly<Record<LlamaShape['family'], string>> = { llama: 'Llama', qwen2: 'Qwen2', mistral: 'Mistral' };

/** The rotary module a layer's attention owns, or undefined when the model computes cos/sin once (with or without a leftover module). */
function layerRotary(shape: LlamaShape, rules: HFRules, prefix: string): Layer | undefined {
  const rotary = rules.rotary[shape.family];
  const positions = shape.maxPositions ?? 2048;
  const className = `${prefix}RotaryEmbedding`;
  if (rotary.placement === 'attention') {
    return module('rotary_emb', className, graph((g, [v]) => g.call(rotaryRule, [v!], { headDim: shape.headDim, seqDim: 2, ...(rotary.unusedTables ? { cachedPositions: positions } : {}) })));
  }
  if (rotary.placement === 'attention-cached') {
    return module('rotary_emb', className, graph((g, [v]) => g.call(rotaryCacheRule, [v!], { headDim: shape.headDim, positions })));
  }
  return undefined;
}

/** The float mask eager attention adds (expanded over the batch where it is built once), or undefined for sdpa/flash. */
function causalMask(g: GraphBuilder, embeds: TensorRef, shape: LlamaShape, rules: HFRules, impl: AttentionImpl): TensorRef | undefined {
  const style = rules.mask[shape.family];
  if (impl !== 'eager' || style === 'none') return undefined;
  // Mistral always, Qwen2 up to 4.41 too: `_make_causal_mask` applies config.sliding_window.
  const window = shape.slidingWindow !== undefined || (shape.family === 'qwen2' && shape.maskWindow === true);
  const built = g.call(causalMaskRule, [embeds], { style, slidingWindow: window })[0]!;
  if (style === 'masking-utils') return built;
  const [batch] = embeds.shape as [Dim];
  return g.call(expandRule, [built], { shape: [batch, 1, built.shape[2]!, built.shape[3]!] })[0]!;
}

/**
 * A Llama-family causal LM as a Hugging Face release's `*ForCausalLM` runs it with `labels`:
 * embed tokens, the positions, the eager causal mask and (from 4.45) the rotary tables once,
 * N pre-norm decoder layers (RMSNorm, attention, residual, RMSNorm, gated MLP, residual),
 * final RMSNorm, LM head, and in training the loss. Module names and parameters follow the
 * checkpoints; where releases differ (rotary placement and buffers, the mask, how long
 * attention weights live, the logits' upcast, the loss) `options.transformers` picks the
 * release's rules ({@link TRANSFORMERS_RULES}).
 *
 * @example
 * ```ts
 * import { estimate, llamaFamily } from 'vram-ts';
 * const tiny = llamaFamily({ family: 'llama', hidden: 64, intermediate: 172, layers: 1, heads: 4, kvHeads: 4, headDim: 16, vocab: 256, tied: false, qkvBias: false, outBias: false, mlpBias: false, attentionDropout: 0 });
 * console.log(estimate(tiny, { input: [1, 16] }).params.total); // 82368
 * ```
 */
export function llamaFamily(shape: LlamaShape, options: DecoderOptions = {}): ModuleLayer {
  checkKeys(shape, ['family', 'hidden', 'intermediate', 'layers', 'heads', 'kvHeads', 'headDim', 'vocab', 'tied', 'qkvBias', 'outBias', 'mlpBias', 'attentionDropout', 'slidingWindow', 'maxPositions', 'activation', 'maskWindow'], 'llamaFamily');
  validate(options, decoderOptions, ['options']);
  const rules = transformersRules(options.transformers, ['transformers']);
  const impl = options.attention ?? rules.defaultAttention[shape.family];
  const cache = (options.useCache ?? true) ? rules.cache : false;
  const prefix = PREFIX[shape.family];
  const rotaryRules = rules.rotary[shape.family];
  const gqaAllowed = rules.sdpaGqa === 'enable-gqa' && (rules.gqaHeadDimMax === undefined || shape.headDim <= rules.gqaHeadDimMax);
  const layers: Layer[] = Array.from({ length: shape.layers }, (_, i) => {
    const rotary = layerRotary(shape, rules, prefix);
    // 4.43 – 4.47: a rotary module in every attention that the model's tables leave unused.
    const buffersOp = opLayer(rotaryBuffersRule, null, { headDim: shape.headDim });
    const leftover = rotaryRules.layerModule ? module('rotary_emb', `${prefix}RotaryEmbedding`, graph((g, [x]) => g.applyAll(buffersOp, x!))) : undefined;
    const attn = attention({
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
      returnWeights: rules.attentionCode === 'function',
      locals: rules.attentionCode,
      cache,
      sdpaGqa: gqaAllowed ? 'enable-gqa' : 'repeat',
      sdpaContiguous: rules.sdpaContiguous === 'always',
      ...(rotary !== undefined ? { rotary, rotaryGathered: rotaryRules.placement === 'attention-cached' } : {}),
      ...(leftover !== undefined ? { unusedModule: leftover } : {}),
    });
    const mlp = gatedMlp({ name: 'mlp', className: `${prefix}MLP`, hidden: shape.hidden, intermediate: shape.intermediate, bias: shape.mlpBias, activation: shape.activation ?? 'silu' });
    const inputNorm = rmsNorm({ size: shape.hidden, name: 'input_layernorm', className: `${prefix}RMSNorm` });
    const postNorm = rmsNorm({ size: shape.hidden, name: 'post_attention_layernorm', className: `${prefix}RMSNorm` });
    const layer: ModuleLayer = Object.freeze({
      kind: 'module',
      name: `layers.${i}`,
      className: `${prefix}DecoderLayer`,
      // __init__ registers self_attn, mlp, then the norms: model.parameters() follows that order.
      childOrder: ['self_attn', 'mlp', 'input_layernorm', 'post_attention_layernorm'],
      body: graph((g, [h, ...rest]) => {
        const normed = g.apply(inputNorm, h!);
        const [out, weights] = g.applyAll(attn, normed, ...rest);
        // `hidden_states, _ = self.self_attn(...)`: the eager attention weights live until the layer returns.
        if (weights !== undefined) g.hold(weights);
        const mid = g.call(addRule, [h!, out!], {})[0]!;
        const normed2 = g.apply(postNorm, mid);
        return g.call(addRule, [mid, g.apply(mlp, normed2)], {})[0]!;
      }),
    });
    return layer;
  });
  const embedTokens = embedding({ num: shape.vocab, dim: shape.hidden, name: 'embed_tokens' });
  const finalNorm = rmsNorm({ size: shape.hidden, name: 'norm', className: `${prefix}RMSNorm` });
  const rotaryModule =
    rotaryRules.placement === 'model' ? module('rotary_emb', `${prefix}RotaryEmbedding`, graph((inner, [x]) => inner.call(rotaryRule, [x!], { headDim: shape.headDim, ...(rotaryRules.originalInvFreq ? { originalInvFreq: true } : {}) }))) : undefined;
  const lmHead = linear({ out: shape.vocab, bias: false, name: 'lm_head', ...(shape.tied ? { tiedWeight: 'model.embed_tokens.weight' } : {}) });
  const model = module(
    'model',
    `${prefix}Model`,
    graph((g, [ids]) => {
      const embeds = g.apply(embedTokens, ids!);
      g.hold(embeds);
      // cache_position = arange(S) (position_ids is a view of it): alive for the whole forward.
      g.hold(g.call(positionsRule, [ids!], {})[0]!);
      const mask = causalMask(g, embeds, shape, rules, impl);
      if (mask !== undefined) g.hold(mask);
      const shared: TensorRef[] = [];
      if (rotaryModule !== undefined) {
        const [cos, sin] = g.applyAll(rotaryModule, embeds) as [TensorRef, TensorRef];
        g.hold(cos);
        g.hold(sin);
        shared.push(cos, sin);
      }
      if (mask !== undefined) shared.push(mask);
      let h = embeds;
      for (const layer of layers) h = g.apply(layer, h, ...shared);
      return g.apply(finalNorm, h);
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
    intermediate: shape.intermediate,
    gatedMlp: true,
    tied: shape.tied,
    ...(shape.slidingWindow !== undefined ? { slidingWindow: shape.slidingWindow } : {}),
  };
  const body = graph((g, [ids]) => {
    const h = g.apply(model, ids!);
    // `outputs = self.model(...)` keeps the last hidden state until forward returns.
    g.hold(h);
    let logits = g.apply(lmHead, h);
    const upcast = rules.logitsUpcast[shape.family];
    if (upcast === 'always' || (upcast === 'labels' && g.gradEnabled)) logits = g.call(castRule, [logits], { dtype: 'float32' })[0]!;
    // The output returns the logits: they live through the loss.
    g.hold(logits);
    return g.gradEnabled ? causalLmLoss(g, logits, ids!, shape.vocab, rules.loss[shape.family], upcast === 'loss') : logits;
  });
  return Object.freeze({
    kind: 'module',
    className: `${prefix}ForCausalLM`,
    inputDtype: 'int64',
    ...(options.dtype !== undefined ? { dtype: options.dtype } : {}),
    meta,
    body,
    repeated: repeatedBlocks(shape.layers, 'model.layers.', body, (count) => llamaFamily({ ...shape, layers: count }, options)),
  });
}
