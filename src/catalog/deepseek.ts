import { VramError, fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { LIMITS } from '../limits.js';
import { mlaAttention } from '../nn/mla.js';
import { moeBlock } from '../nn/moe.js';
import type { ModelMeta, ModuleLayer } from '../nn/types.js';
import { llamaFamily, type DecoderOptions, type LlamaShape } from './llama.js';
import { ConfigReader, type HFConfig } from './config-reader.js';
import { checkMoeArguments, expertsImpl, layerRouting, moeMeta } from './experts.js';
import { transformersRules } from './transformers.js';
import { show } from '../validate.js';

// configuration_deepseek_v2.py / configuration_deepseek_v3.py (transformers 5.18.0).
const DEFAULTS: Readonly<Record<'deepseek_v2' | 'deepseek_v3', Readonly<Record<string, unknown>>>> = {
  deepseek_v2: {
    vocab_size: 102400,
    hidden_size: 4096,
    intermediate_size: 11008,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: null,
    hidden_act: 'silu',
    max_position_embeddings: 2048,
    use_cache: true,
    tie_word_embeddings: false,
    attention_bias: false,
    attention_dropout: 0,
    first_k_dense_replace: 0,
    kv_lora_rank: 512,
    q_lora_rank: 1536,
    n_routed_experts: 64,
    n_shared_experts: 2,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    topk_method: 'greedy',
    norm_topk_prob: false,
    num_experts_per_tok: null,
    moe_intermediate_size: 1407,
  },
  deepseek_v3: {
    vocab_size: 129280,
    hidden_size: 7168,
    intermediate_size: 18432,
    moe_intermediate_size: 2048,
    num_hidden_layers: 61,
    num_attention_heads: 128,
    num_key_value_heads: 128,
    n_shared_experts: 1,
    n_routed_experts: 256,
    kv_lora_rank: 512,
    q_lora_rank: 1536,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    qk_nope_head_dim: 128,
    n_group: 8,
    topk_group: 4,
    num_experts_per_tok: 8,
    first_k_dense_replace: 3,
    norm_topk_prob: true,
    hidden_act: 'silu',
    max_position_embeddings: 4096,
    use_cache: true,
    tie_word_embeddings: false,
    rope_interleave: true,
    attention_bias: false,
    attention_dropout: 0,
  },
};

/**
 * The multi-head latent attention's cache per token and layer, in elements: what Hugging Face
 * transformers 5.x's cache holds (`past_key_values.update(kv_nope, k_rot)`: the normed latent
 * and the rotated shared key, `kv_lora_rank + qk_rope_head_dim`) — the same latent an MLA-aware
 * engine (vLLM, SGLang) caches — next to what caching decompressed keys and values per head would
 * take (`heads · (qk_nope + qk_rope + v_head_dim)`, transformers 4.x's DeepseekV3 before the
 * latent cache).
 *
 * @example
 * ```ts
 * import { mlaCachePerToken } from 'vram-ts/internals';
 * console.log(mlaCachePerToken({ kvLoraRank: 512, qkRopeHeadDim: 64, qkNopeHeadDim: 128, vHeadDim: 128, heads: 128 })); // { latent: 576, decompressed: 40960 }
 * ```
 */
export function mlaCachePerToken(shape: {
  readonly kvLoraRank: number;
  readonly qkRopeHeadDim: number;
  readonly qkNopeHeadDim: number;
  readonly vHeadDim: number;
  readonly heads: number;
}): { readonly latent: number; readonly decompressed: number } {
  return { latent: shape.kvLoraRank + shape.qkRopeHeadDim, decompressed: shape.heads * (shape.qkNopeHeadDim + shape.qkRopeHeadDim + shape.vHeadDim) };
}

/** The sizes and switches of a DeepSeek config, checked: a VramError naming every bad field. */
function deepseekFields(r: ConfigReader, v3: boolean) {
  const hidden = r.integer('hidden_size');
  const heads = r.integer('num_attention_heads');
  const layers = r.integer('num_hidden_layers', 1, LIMITS.layers);
  const experts = r.integer('n_routed_experts');
  const k = r.integer('num_experts_per_tok');
  const inner = r.integer('moe_intermediate_size');
  const shared = r.integer('n_shared_experts', 0);
  const firstDense = r.integer('first_k_dense_replace', 0);
  const qLoraRank = r.optionalInteger('q_lora_rank');
  const kvLoraRank = r.integer('kv_lora_rank');
  const qkNope = r.integer('qk_nope_head_dim');
  const qkRope = r.integer('qk_rope_head_dim');
  const vHead = r.integer('v_head_dim');
  const bias = r.flag('attention_bias');
  const renorm = r.flag('norm_topk_prob');
  const topkMethod = v3 ? 'noaux_tc' : r.string('topk_method');
  if (!v3 && topkMethod !== 'greedy' && topkMethod !== 'group_limited_greedy')
    r.issues.push({
      path: ['topk_method'],
      code: 'bad-config',
      message: 'unknown topk_method',
      expected: 'greedy | group_limited_greedy',
      received: JSON.stringify(topkMethod),
    });
  if (k > experts)
    r.issues.push({
      path: ['num_experts_per_tok'],
      code: 'bad-config',
      message: 'more experts per token than experts',
      expected: `<= ${experts}`,
      received: String(k),
    });
  if (qkRope % 2 !== 0)
    r.issues.push({
      path: ['qk_rope_head_dim'],
      code: 'bad-config',
      message: 'qk_rope_head_dim must be even',
      expected: 'an even integer',
      received: String(qkRope),
    });
  const intermediate = r.integer('intermediate_size');
  const vocab = r.integer('vocab_size');
  const tied = r.flag('tie_word_embeddings');
  const maxPositions = r.integer('max_position_embeddings');
  if (r.issues.length > 0) throw new VramError(r.issues);
  return {
    hidden,
    heads,
    layers,
    experts,
    k,
    inner,
    shared,
    firstDense,
    qLoraRank,
    kvLoraRank,
    qkNope,
    qkRope,
    vHead,
    bias,
    renorm,
    intermediate,
    vocab,
    tied,
    maxPositions,
  };
}

/**
 * DeepSeek-V2 and DeepSeek-V3 from their config.json (model_type `deepseek_v2`, `deepseek_v3`)
 * as transformers 5.17 – 5.18 builds them: multi-head latent attention ({@link mlaAttention}),
 * dense MLP layers before `first_k_dense_replace`, then MoE layers with `n_routed_experts`
 * routed experts of `moe_intermediate_size` (V3: sigmoid scores, group-limited top-k on the
 * bias-corrected scores, renormalised when `norm_topk_prob`, scaled by `routed_scaling_factor`;
 * V2: softmax top-k) and `n_shared_experts` shared experts as one MLP on every token. The KV cache
 * holds the latent (see {@link mlaCachePerToken}). The checkpoint's multi-token-prediction
 * layer (`num_nextn_predict_layers`) is not built, as transformers does not build it.
 *
 * @example
 * ```ts
 * import { deepseekFromHFConfig, estimate } from 'vram-ts';
 * const m = deepseekFromHFConfig({ model_type: 'deepseek_v3', hidden_size: 64, intermediate_size: 128, moe_intermediate_size: 32, num_hidden_layers: 3, num_attention_heads: 4, num_key_value_heads: 4, n_routed_experts: 8, num_experts_per_tok: 2, n_group: 2, topk_group: 1, first_k_dense_replace: 1, q_lora_rank: 32, kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 16, v_head_dim: 16, vocab_size: 512 }, { transformers: '5.18.0' });
 * console.log(estimate(m, { input: [2, 16] }).params.total); // 240720
 * ```
 */
export function deepseekFromHFConfig(config: HFConfig, options: DecoderOptions = {}): ModuleLayer {
  checkMoeArguments(config, options);
  const type = config.model_type as 'deepseek_v2' | 'deepseek_v3';
  if (type !== 'deepseek_v2' && type !== 'deepseek_v3')
    fail('unsupported-model', 'not a DeepSeek-V2/V3 config', { path: ['model_type'], expected: 'deepseek_v2 | deepseek_v3', received: show(type) });
  const rules = transformersRules(options.transformers, ['transformers']);
  const release = rules.release;
  // 4.57: the same attention and router, the experts a loop of DeepseekV*MLP over the experts that got tokens (read in 4.57.6).
  if (Number(release.split('.')[0]) < 5 && !release.startsWith('4.57.'))
    fail('unsupported-release', 'DeepSeek-V2/V3 are modelled as transformers 4.57 and 5.x run them (the other 4.x releases were not read)', {
      path: ['transformers'],
      expected: '4.57.0 – 4.57.6 or 5.17.0 – 5.18.0',
      received: release,
    });
  const v3 = type === 'deepseek_v3';
  const r = new ConfigReader(config, DEFAULTS[type]);
  const f = deepseekFields(r, v3);
  const impl = expertsImpl(release, options.moe);
  const prefix = v3 ? 'DeepseekV3' : 'DeepseekV2';
  const activation = typeof config.hidden_act === 'string' ? config.hidden_act : 'silu';
  // 4.57 caches the per-head keys and values; 5.x the latent and the rotary key.
  const cache = (options.useCache ?? true) ? (release.startsWith('4.') ? ('heads' as const) : ('latent' as const)) : false;
  // transformers 5.x picks sdpa by default (the eager path is the one measured on real code).
  const attentionImpl = options.attention ?? rules.defaultAttention.llama;
  if (attentionImpl === 'flash')
    fail('not-modelled', 'flash attention for multi-head latent attention is not modelled (its q/k and v head dims differ)', {
      path: ['options', 'attention'],
      expected: 'eager | sdpa',
      received: attentionImpl,
    });
  const build: DeepseekBuild = { f, v3, prefix, activation, moeLayers: Math.max(0, f.layers - f.firstDense), v5: !release.startsWith('4.') };
  const interleave = v3 ? r.value('rope_interleave') !== false : false;
  const shape: LlamaShape = {
    family: 'llama',
    classPrefix: prefix,
    hidden: f.hidden,
    intermediate: f.intermediate,
    layers: f.layers,
    heads: f.heads,
    // The cache holds one latent "head" per layer; the rotary tables are qk_rope_head_dim wide.
    kvHeads: 1,
    headDim: f.qkRope,
    vocab: f.vocab,
    tied: f.tied,
    qkvBias: false,
    outBias: false,
    mlpBias: false,
    attentionDropout: 0,
    maxPositions: f.maxPositions,
    activation,
    layerAttention: () => deepseekAttention(build, { interleave, cache, impl: attentionImpl }),
    layerMlp: (i) => deepseekMoe(build, i, impl, options.moe),
    extraMeta: { family: type, moe: moeMeta(f.hidden, f.experts, f.k, f.inner, build.moeLayers, f.shared), mla: mlaMeta(f) },
  };
  const { moe: _moe, ...decoder } = options;
  void _moe;
  // The eager mask is built once by the model, as for Llama.
  const model = llamaFamily(shape, { ...decoder, attention: attentionImpl });
  deepFreeze(model.meta);
  return model;
}

/** What every layer of one DeepSeek model is built from: its checked fields and the names of its classes. */
interface DeepseekBuild {
  readonly f: ReturnType<typeof deepseekFields>;
  readonly v3: boolean;
  /** `DeepseekV2` or `DeepseekV3`, the prefix of the modeling file's class names. */
  readonly prefix: string;
  readonly activation: string;
  /** The layers from `first_k_dense_replace` on, whose MLP is a mixture of experts. */
  readonly moeLayers: number;
  /**
   * transformers 5.x: V3's `e_score_correction_bias` stays float32 (`_keep_in_fp32_modules_strict`;
   * 4.57 casts it), and the MoE block keeps the router logits (`_, w, idx = self.gate(h)`).
   */
  readonly v5: boolean;
}

/** The latent attention's sizes, as the model's meta reports them. */
function mlaMeta(f: ReturnType<typeof deepseekFields>): NonNullable<ModelMeta['mla']> {
  const latent = mlaCachePerToken({ kvLoraRank: f.kvLoraRank, qkRopeHeadDim: f.qkRope, qkNopeHeadDim: f.qkNope, vHeadDim: f.vHead, heads: f.heads });
  return {
    kvLoraRank: f.kvLoraRank,
    qkRopeHeadDim: f.qkRope,
    qkNopeHeadDim: f.qkNope,
    vHeadDim: f.vHead,
    qLoraRank: f.qLoraRank,
    latentPerToken: latent.latent,
    hfCachePerToken: latent.latent,
  };
}

/** One layer's multi-head latent attention (V3 rotates interleaved pairs unless `rope_interleave` is false; V2 rotates as complex numbers). */
function deepseekAttention(
  b: DeepseekBuild,
  run: { readonly interleave: boolean; readonly cache: 'latent' | 'heads' | false; readonly impl: 'eager' | 'sdpa' },
): ModuleLayer {
  const { f } = b;
  return mlaAttention({
    name: 'self_attn',
    className: `${b.prefix}Attention`,
    hidden: f.hidden,
    heads: f.heads,
    qLoraRank: f.qLoraRank,
    kvLoraRank: f.kvLoraRank,
    qkNopeHeadDim: f.qkNope,
    qkRopeHeadDim: f.qkRope,
    vHeadDim: f.vHead,
    bias: f.bias,
    interleave: run.interleave,
    complexRotary: !b.v3,
    cache: run.cache,
    impl: run.impl,
  });
}

/** Layer `i`'s mixture of experts, or undefined for the dense layers before `first_k_dense_replace`. */
function deepseekMoe(b: DeepseekBuild, i: number, impl: ReturnType<typeof expertsImpl>, moe: DecoderOptions['moe']): ModuleLayer | undefined {
  const { f, prefix } = b;
  if (i < f.firstDense) return undefined;
  return moeBlock({
    name: 'mlp',
    className: b.v3 ? 'DeepseekV3MoE' : 'DeepseekV2Moe',
    expertsClassName: `${prefix}Experts`,
    expertClassName: `${prefix}MLP`,
    hitOnly: true,
    hidden: f.hidden,
    experts: f.experts,
    k: f.k,
    intermediate: f.inner,
    impl,
    score: b.v3 ? 'sigmoid' : 'softmax',
    renorm: b.v3 ? f.renorm : false,
    ...(b.v3 ? { correctionBias: { fp32: b.v5 } } : {}),
    // 4.57's gate returns only the indices and weights: its logits die inside it.
    ...(b.v5 ? { holdLogits: true } : {}),
    activation: b.activation,
    ...(f.shared > 0
      ? { shared: { intermediate: f.inner * f.shared, name: 'shared_experts', className: `${prefix}MLP`, gated: false }, sharedOn: 'input' as const }
      : {}),
    ...layerRouting(moe, i - f.firstDense, f.experts, b.moeLayers),
  });
}
