import { VramError, fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { LIMITS } from '../limits.js';
import { integer, show, validate } from '../validate.js';
import { layerProblem } from '../nn/layer-check.js';
import { metaCheck } from './decoder-check.js';
import { moeBlock } from '../nn/moe.js';
import type { Layer, ModelMeta, ModuleLayer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import { attentionHeads, ConfigReader, type HFConfig } from './config-reader.js';
import { checkMoeArguments, expertsImpl, layerRouting, moeMeta } from './experts.js';
import { llamaFamily, type DecoderOptions, type LlamaShape } from './llama.js';
import { transformersRules } from './transformers.js';

/** The mixture-of-experts families read (transformers 4.40.2 and 5.17 – 5.18). */
export const MOE_FAMILIES = ['mixtral', 'qwen2_moe', 'qwen3_moe', 'deepseek_v2', 'deepseek_v3'] as const;
export type MoeFamily = (typeof MOE_FAMILIES)[number];

const DEFAULTS: Readonly<Record<'mixtral' | 'qwen2_moe' | 'qwen3_moe', Readonly<Record<string, unknown>>>> = {
  // configuration_mixtral.py
  mixtral: {
    vocab_size: 32000,
    hidden_size: 4096,
    intermediate_size: 14336,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: 8,
    head_dim: null,
    hidden_act: 'silu',
    max_position_embeddings: 4096 * 32,
    use_cache: true,
    tie_word_embeddings: false,
    sliding_window: null,
    attention_dropout: 0,
    num_experts_per_tok: 2,
    num_local_experts: 8,
  },
  // configuration_qwen2_moe.py
  qwen2_moe: {
    vocab_size: 151936,
    hidden_size: 2048,
    intermediate_size: 5632,
    num_hidden_layers: 24,
    num_attention_heads: 16,
    num_key_value_heads: 16,
    hidden_act: 'silu',
    max_position_embeddings: 32768,
    use_cache: true,
    tie_word_embeddings: false,
    attention_dropout: 0,
    decoder_sparse_step: 1,
    moe_intermediate_size: 1408,
    shared_expert_intermediate_size: 5632,
    num_experts_per_tok: 4,
    num_experts: 60,
    norm_topk_prob: false,
    mlp_only_layers: [],
  },
  // configuration_qwen3_moe.py
  qwen3_moe: {
    vocab_size: 151936,
    hidden_size: 2048,
    intermediate_size: 6144,
    num_hidden_layers: 24,
    num_attention_heads: 32,
    num_key_value_heads: 4,
    head_dim: null,
    hidden_act: 'silu',
    max_position_embeddings: 32768,
    use_cache: true,
    tie_word_embeddings: false,
    attention_bias: false,
    attention_dropout: 0,
    decoder_sparse_step: 1,
    moe_intermediate_size: 768,
    num_experts_per_tok: 8,
    num_experts: 128,
    norm_topk_prob: false,
    mlp_only_layers: [],
  },
};

/**
 * Active parameters per token of a model: its total less the routed experts a token does not
 * use (`ModelMeta.moe.inactiveParams`); the total for a dense model. Counts the input embedding,
 * as the total does.
 *
 * @example
 * ```ts
 * import { activeParams, estimate, llm } from 'vram-ts';
 * const model = llm('mixtral-8x7b');
 * console.log(activeParams(model, estimate(model, { input: [1, 8], mode: 'inference' }).params.total)); // 12879925248
 * ```
 */
export function activeParams(model: { readonly meta?: ModelMeta }, total: number): number {
  const meta = paramsArguments(model, total, 'activeParams');
  return countOf(whole(meta, total, 'activeParams') - (meta?.moe?.inactiveParams ?? 0), 'activeParams');
}

/**
 * A model and a parameter count as activeParams and wholeParams read them: a layer (its meta, a
 * decoder's, checked where it has one) and `total` a count no smaller than the routed experts
 * the model's meta says it holds. The meta is returned.
 */
function paramsArguments(model: unknown, total: unknown, who: string): ModelMeta | undefined {
  const problem = layerProblem(model);
  if (problem !== undefined) fail('bad-layer', `${who} needs a model (built with this package): ${problem}`, { path: [who, 'model'], received: show(model) });
  validate(total, integer(0), [who, 'total']);
  const meta = (model as Layer).kind === 'module' ? (model as ModuleLayer).meta : undefined;
  if (meta === undefined) return undefined;
  validate(meta, metaCheck, [who, 'model', 'meta']);
  const { moe, expertParallel: ep } = meta;
  if (moe === undefined) return meta;
  const size = ep?.size ?? 1;
  if (moe.k > moe.experts || moe.experts % size !== 0)
    fail('bad-meta', 'experts per token at most the experts, and the experts split evenly over the expert-parallel ranks', {
      path: [who, 'model', 'meta', 'moe'],
      received: `${moe.experts} experts, k ${moe.k}, expert parallel ${size}`,
    });
  const held = moe.moeLayers * (moe.experts / size) * moe.expertParams;
  if ((total as number) < held)
    fail('bad-option', "the model's routed experts alone hold more parameters than this total: give the model's own estimate's params.total", {
      path: [who, 'total'],
      expected: `≥ ${held}`,
      received: show(total),
    });
  return meta;
}

/** A parameter count that must stay an exact non-negative integer. */
function countOf(value: number, who: string): number {
  if (!Number.isSafeInteger(value) || value < 0)
    fail('too-large', 'the parameters do not count to an exact integer: check the model meta and the total', { path: [who, 'total'], received: String(value) });
  return value;
}

/**
 * The whole model's parameters from one rank's `total`: an expert-parallel rank holds E/e of
 * each MoE layer's routed experts, the whole model all E; any other model is whole already.
 *
 * @example
 * ```ts
 * import { estimate, fromHFConfig, wholeParams } from 'vram-ts';
 * const config = { model_type: 'qwen3_moe', hidden_size: 64, intermediate_size: 128, moe_intermediate_size: 32, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, vocab_size: 512, num_experts: 8, num_experts_per_tok: 2 };
 * const rank = fromHFConfig(config, { expertParallel: { size: 4 } });
 * console.log(wholeParams(rank, estimate(rank, { input: [1, 8] }).params.total)); // 189824
 * ```
 */
export function wholeParams(model: { readonly meta?: ModelMeta }, total: number): number {
  return whole(paramsArguments(model, total, 'wholeParams'), total, 'wholeParams');
}

/** The whole model's parameters from one rank's checked total. */
function whole(meta: ModelMeta | undefined, total: number, who: string): number {
  const moe = meta?.moe;
  const ep = meta?.expertParallel;
  if (moe === undefined || ep === undefined) return total;
  return countOf(total + moe.moeLayers * (moe.experts - moe.experts / ep.size) * moe.expertParams, who);
}

/**
 * The expert-parallel size a model was built for (1 when it was not).
 *
 * @example
 * ```ts
 * import { fromHFConfig } from 'vram-ts';
 * import { builtExpertParallel } from 'vram-ts/internals';
 * const config = { model_type: 'qwen3_moe', hidden_size: 64, intermediate_size: 128, moe_intermediate_size: 32, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, vocab_size: 512, num_experts: 8, num_experts_per_tok: 2 };
 * console.log(builtExpertParallel(fromHFConfig(config, { expertParallel: { size: 4 } }))); // 4
 * ```
 */
export function builtExpertParallel(model: Layer): number {
  return model.kind === 'module' ? (model.meta?.expertParallel?.size ?? 1) : 1;
}

/**
 * Where a Qwen3-MoE config keeps its expert count: 5.x's Qwen3MoeConfig stores `num_local_experts`
 * (what its save_pretrained writes) with `num_experts` an alias (attribute_map); 4.57 reads only
 * `num_experts` and would build its default 128 beside a 5.x file's `num_local_experts`, which is
 * refused here rather than followed.
 */
function qwen3Experts(r: ConfigReader, v5: boolean): 'num_experts' | 'num_local_experts' {
  const local = r.config.num_local_experts;
  const alias = r.config.num_experts;
  if (v5) {
    if (local !== undefined && alias !== undefined && local !== alias)
      r.issues.push({
        path: ['num_experts'],
        code: 'bad-config',
        message: 'num_experts is an alias of num_local_experts in 5.x: they differ',
        expected: String(local),
        received: JSON.stringify(alias),
      });
    return local !== undefined ? 'num_local_experts' : 'num_experts';
  }
  if (local !== undefined && alias === undefined)
    r.issues.push({
      path: ['num_local_experts'],
      code: 'bad-config',
      message: "transformers 4.x reads num_experts (this is 5.x's spelling): 4.x would build its default 128 experts",
      expected: 'num_experts',
      received: JSON.stringify(local),
    });
  return 'num_experts';
}

/** The sizes and switches of a Mixtral / Qwen-MoE config as `release` reads them, checked: a VramError naming every bad field. */
function moeFields(r: ConfigReader, type: 'mixtral' | 'qwen2_moe' | 'qwen3_moe', release: string) {
  const v5 = Number(release.split('.')[0]) >= 5;
  const config = r.config;
  const { hidden, heads, kvHeads, headDim } = attentionHeads(r, v5 || type === 'qwen3_moe');
  const layers = r.integer('num_hidden_layers', 1, LIMITS.layers);
  const mixtral = type === 'mixtral';
  const experts = r.integer(mixtral ? 'num_local_experts' : type === 'qwen3_moe' ? qwen3Experts(r, v5) : 'num_experts');
  const k = r.integer('num_experts_per_tok');
  const inner = mixtral ? r.integer('intermediate_size') : r.integer('moe_intermediate_size');
  const sparseStep = mixtral ? 1 : r.integer('decoder_sparse_step');
  // 4.40 has no mlp_only_layers (modeling_qwen2_moe.py:869); 4.57.6 and 5.x read it.
  const mlpOnly = mixtral || release.startsWith('4.40.') ? [] : r.integers('mlp_only_layers');
  const renorm = mixtral ? true : r.flag('norm_topk_prob');
  const sharedInner = type === 'qwen2_moe' ? r.integer('shared_expert_intermediate_size', 0) : 0;
  if (k > experts)
    r.issues.push({
      path: ['num_experts_per_tok'],
      code: 'bad-config',
      message: 'more experts per token than experts',
      expected: `<= ${experts}`,
      received: String(k),
    });
  if (type === 'qwen3_moe' && !v5 && !release.startsWith('4.5'))
    fail('unsupported-release', 'qwen3_moe is in transformers from 4.51', { path: ['transformers'], expected: '>= 4.51', received: release });
  // Qwen2-MoE 5.x reads qkv_bias (default true); Qwen3-MoE attention_bias on q/k/v/o.
  const qwen3 = type === 'qwen3_moe';
  const attentionBias = qwen3 ? r.flag('attention_bias') : false;
  const qkvBias = type === 'qwen2_moe' ? (v5 && Object.hasOwn(config, 'qkv_bias') ? r.flag('qkv_bias') : true) : attentionBias;
  // Read before the check, so that a bad one is an issue too.
  const intermediate = mixtral ? inner : r.integer('intermediate_size');
  const vocab = r.integer('vocab_size');
  const tied = r.flag('tie_word_embeddings');
  const maxPositions = r.integer('max_position_embeddings');
  const window = mixtral ? r.optionalInteger('sliding_window') : null;
  if (r.issues.length > 0) throw new VramError(r.issues);
  return {
    hidden,
    heads,
    kvHeads,
    headDim,
    layers,
    mixtral,
    experts,
    k,
    inner,
    sparseStep,
    mlpOnly,
    renorm,
    sharedInner,
    qwen3,
    attentionBias,
    qkvBias,
    intermediate,
    vocab,
    tied,
    maxPositions,
    window,
  };
}

/**
 * Mixtral, Qwen2-MoE and Qwen3-MoE from their config.json (model_type `mixtral`, `qwen2_moe`,
 * `qwen3_moe`) as a transformers release builds them: Llama-style attention (Qwen3-MoE: with
 * q/k RMSNorm), and in each sparse layer the MoE block of {@link moeBlock} — Mixtral's
 * `block_sparse_moe` (5.x: `mlp`) with renormalised top-k, Qwen2-MoE's with its sigmoid-gated
 * shared expert, dense MLP layers where `mlp_only_layers` or `decoder_sparse_step` say.
 *
 * @example
 * ```ts
 * import { estimate, moeFromHFConfig } from 'vram-ts';
 * const m = moeFromHFConfig({ model_type: 'mixtral', hidden_size: 64, intermediate_size: 96, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 512, num_local_experts: 4 }, { transformers: '4.40.2' });
 * console.log(estimate(m, { input: [2, 16] }).params.total); // 238400
 * ```
 */
export function moeFromHFConfig(config: HFConfig, options: DecoderOptions & { readonly dtype?: DType } = {}): ModuleLayer {
  checkMoeArguments(config, options);
  const type = config.model_type as 'mixtral' | 'qwen2_moe' | 'qwen3_moe';
  if (typeof type !== 'string' || !Object.hasOwn(DEFAULTS, type))
    fail('unsupported-model', 'not a Mixtral / Qwen-MoE config', {
      path: ['model_type'],
      expected: Object.keys(DEFAULTS).join(' | '),
      received: show(type),
    });
  const rules = transformersRules(options.transformers, ['transformers']);
  const release = rules.release;
  const v5 = Number(release.split('.')[0]) >= 5;
  const f = moeFields(new ConfigReader(config, DEFAULTS[type]), type, release);
  const isMoe = (i: number): boolean => f.mixtral || (!f.mlpOnly.includes(i) && f.experts > 0 && (i + 1) % f.sparseStep === 0);
  const moeIndex: number[] = [];
  let count = 0;
  for (let i = 0; i < f.layers; i += 1) moeIndex.push(isMoe(i) ? count++ : -1);
  const impl = expertsImpl(release, options.moe);
  const epOptions = options.expertParallel;
  if (epOptions !== undefined && !v5)
    fail('not-modelled', "expert parallelism is transformers 5.x's (DistributedConfig(enable_expert_parallel=True)); 4.x has none", {
      path: ['options', 'expertParallel'],
      expected: 'a 5.x release',
      received: release,
    });
  const ep = epOptions === undefined ? {} : { expertParallel: { size: epOptions.size, rank: epOptions.rank ?? 0 } };
  const prefix = f.mixtral ? 'Mixtral' : type === 'qwen2_moe' ? 'Qwen2Moe' : 'Qwen3Moe';
  const activation = typeof config.hidden_act === 'string' ? config.hidden_act : 'silu';
  const shape: LlamaShape = {
    family: f.mixtral ? 'mistral' : f.qwen3 ? 'qwen3' : 'qwen2',
    ...(f.qwen3 ? { qkNorm: 'projection' as const } : {}),
    classPrefix: prefix,
    hidden: f.hidden,
    intermediate: f.intermediate,
    layers: f.layers,
    heads: f.heads,
    kvHeads: f.kvHeads,
    headDim: f.headDim,
    vocab: f.vocab,
    tied: f.tied,
    qkvBias: f.qkvBias,
    outBias: f.attentionBias,
    mlpBias: false,
    attentionDropout: typeof config.attention_dropout === 'number' ? config.attention_dropout : 0,
    maxPositions: f.maxPositions,
    activation,
    ...(f.window !== null ? { slidingWindow: f.window } : {}),
    layerMlp: (i) => {
      if (moeIndex[i] === -1) return undefined;
      const name = f.mixtral && !v5 ? 'block_sparse_moe' : 'mlp';
      return moeBlock({
        name,
        // 4.x: `router_logits = self.gate(h)`; 5.x: `_, w, idx = self.gate(h)`: alive until the block returns.
        holdLogits: true,
        className: `${prefix}SparseMoeBlock`,
        expertsClassName: `${prefix}Experts`,
        expertClassName: f.mixtral ? 'MixtralBlockSparseTop2MLP' : `${prefix}MLP`,
        hitOnly: !release.startsWith('4.40.'),
        hidden: f.hidden,
        experts: f.experts,
        k: f.k,
        intermediate: f.inner,
        impl,
        renorm: f.renorm,
        activation,
        ...(f.mixtral ? { expertNames: ['w1', 'w3', 'w2'] as const } : {}),
        ...(f.sharedInner > 0 ? { shared: { intermediate: f.sharedInner, name: 'shared_expert', className: `${prefix}MLP`, gated: true } } : {}),
        ...layerRouting(options.moe, moeIndex[i]!, f.experts, count),
        ...ep,
      });
    },
    extraMeta: { family: type, moe: moeMeta(f.hidden, f.experts, f.k, f.inner, count, f.sharedInner > 0 ? 1 : 0) },
  };
  const { moe: _moe, ...decoder } = options;
  void _moe;
  const model = llamaFamily(shape, decoder);
  deepFreeze(model.meta);
  return model;
}
