import { fail, VramError, type VramIssue } from '../errors.js';
import { LIMITS } from '../limits.js';
import { decoderOptions } from '../options.js';
import { validate } from '../validate.js';
import type { ModuleLayer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import { attentionHeads, ConfigReader, type HFConfig } from './config-reader.js';
import { deepseekFromHFConfig } from './deepseek.js';
import { gpt2Model, type Gpt2Shape } from './gpt2.js';
import { llamaFamily, type DecoderOptions, type LlamaShape } from './llama.js';
import { MOE_FAMILIES, moeFromHFConfig } from './moe.js';
import { quantizationConfig } from './quantization-config.js';
import { CAUSAL_LM, DEFAULTS, FAMILIES } from './hf-families.js';
import { transformersRules, type HFRules } from './transformers.js';
import type { TensorParallelOptions } from './tensor-parallel.js';

export type { HFConfig } from './config-reader.js';

/** Options of {@link fromHFConfig}. */
export interface HFConfigOptions extends DecoderOptions {
  /**
   * Parameter dtype. Default: the config's `torch_dtype` (as `from_pretrained(torch_dtype="auto")`
   * loads it), float32 when the config has none. Pass `'float32'` for transformers 4.x's own
   * `from_pretrained` default.
   */
  readonly dtype?: DType;
}

/** The Llama variations (catalog/llama.ts builds them from the options of {@link LlamaShape}). */
type Variant = 'qwen3' | 'gemma' | 'gemma2' | 'gemma3_text' | 'phi3';

/**
 * Every `model_type` {@link fromHFConfig} reads (and `gemma3`, whose `text_config` it reads).
 *
 * @example
 * ```ts
 * import { HF_MODEL_TYPES } from 'vram-ts';
 * console.log(HF_MODEL_TYPES.includes('mixtral')); // true
 * ```
 */
export const HF_MODEL_TYPES: readonly string[] = Object.freeze([...FAMILIES, ...MOE_FAMILIES, 'gemma3']);

/** The text decoder's model_type a multimodal config's `text_config` has when it names none. */
const TEXT_CONFIG_TYPE: Readonly<Record<string, string>> = { gemma3: 'gemma3_text' };

/**
 * Fields that would change the architecture vram-ts builds are honoured or refused, never
 * ignored: a mixture of experts, a vision tower, another head class.
 */
function architecture(config: HFConfig, family: (typeof FAMILIES)[number], issues: VramIssue[]): void {
  for (const field of ['num_local_experts', 'num_experts', 'n_routed_experts']) {
    if (config[field] !== undefined && config[field] !== null)
      issues.push({
        path: [field],
        code: 'unsupported-model',
        message: `experts in a dense ${family} config: a mixture of experts is read from its own model_type (${MOE_FAMILIES.join(', ')})`,
        expected: `a dense ${family} config`,
        received: JSON.stringify(config[field]),
      });
  }
  for (const field of ['vision_config', 'text_config', 'audio_config']) {
    if (config[field] !== undefined && config[field] !== null)
      issues.push({
        path: [field],
        code: 'unsupported-model',
        message: 'a multimodal config: only its text decoder is read, from a model_type whose text_config is one (gemma3)',
        expected: `a text-only ${family} config`,
        received: 'an object',
      });
  }
  const classes = config.architectures;
  if (classes === undefined || classes === null) return;
  if (!Array.isArray(classes) || !classes.every((c) => typeof c === 'string')) {
    issues.push({
      path: ['architectures'],
      code: 'bad-config',
      message: 'architectures must be a list of class names',
      expected: `[${JSON.stringify(CAUSAL_LM[family])}]`,
      received: JSON.stringify(classes),
    });
  } else if (classes.length > 0 && !classes.includes(CAUSAL_LM[family])) {
    issues.push({
      path: ['architectures'],
      code: 'unsupported-model',
      message: `model_type ${family} is modelled as ${CAUSAL_LM[family]}`,
      expected: `[${JSON.stringify(CAUSAL_LM[family])}]`,
      received: JSON.stringify(classes),
    });
  }
}

/** A soft-capping value: a positive number, or null (none). */
function softcap(r: ConfigReader, field: string): number | undefined {
  const value = r.value(field);
  if (value === null || value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0)
    r.issues.push({
      path: [field],
      code: 'bad-config',
      message: `${field} must be a positive number or null`,
      expected: 'number > 0 | null',
      received: JSON.stringify(value),
    });
  return typeof value === 'number' ? value : undefined;
}

/**
 * Per layer, the window of a sliding layer or null: `layer_types` when given, else the config
 * class's pattern (Gemma 2: every other layer from the first; Gemma 3: all but every
 * `sliding_window_pattern`-th; Qwen3: layers from `max_window_layers` on with
 * `use_sliding_window`).
 */
function layerWindows(family: Variant, r: ConfigReader, layers: number, window: number | null): (number | null)[] | undefined {
  const types = r.value('layer_types');
  if (types !== null && types !== undefined) {
    if (!Array.isArray(types) || types.length !== layers || !types.every((t) => t === 'sliding_attention' || t === 'full_attention')) {
      r.issues.push({
        path: ['layer_types'],
        code: 'bad-config',
        message: 'layer_types must list sliding_attention or full_attention for every layer',
        expected: `${layers} of sliding_attention | full_attention`,
        received: JSON.stringify(types),
      });
      return undefined;
    }
    if (types.includes('sliding_attention') && window === null)
      r.issues.push({
        path: ['sliding_window'],
        code: 'bad-config',
        message: 'sliding_attention layers need a sliding_window',
        expected: 'integer >= 1',
        received: 'null',
      });
    return types.map((t) => (t === 'sliding_attention' ? window : null));
  }
  if (family === 'gemma2') return Array.from({ length: layers }, (_, i) => ((i + 1) % 2 !== 0 ? window : null));
  if (family === 'gemma3_text') {
    const pattern = r.integer('sliding_window_pattern');
    return Array.from({ length: layers }, (_, i) => ((i + 1) % pattern !== 0 ? window : null));
  }
  if (family === 'qwen3' && window !== null) {
    const from = r.integer('max_window_layers', 0);
    return Array.from({ length: layers }, (_, i) => (i >= from ? window : null));
  }
  return undefined;
}

/** Qwen3, Gemma 1-3 and Phi-3 as variations of Llama (modeling_<family>.py of the releases read; see FamilyRules). */
function variantShape(family: Variant, r: ConfigReader, rules: HFRules): LlamaShape {
  // Every one reads head_dim (Phi-3 with getattr(config, "head_dim", hidden // heads)).
  const { hidden, heads, kvHeads, headDim } = attentionHeads(r, true);
  const layers = r.integer('num_hidden_layers', 1, LIMITS.layers);
  const gemma = family === 'gemma' || family === 'gemma2' || family === 'gemma3_text';
  const bias = family === 'phi3' ? false : r.flag('attention_bias');
  // Gemma 4.x: ACT2FN[hidden_activation or gelu_pytorch_tanh]; 5.x: hidden_act. Gemma 2/3: hidden_activation.
  const activation =
    family === 'gemma'
      ? rules.release.startsWith('4.')
        ? r.value('hidden_activation') === null
          ? 'gelu_pytorch_tanh'
          : r.activation('hidden_activation')
        : r.activation('hidden_act')
      : gemma
        ? r.activation('hidden_activation')
        : r.activation('hidden_act');
  // Qwen3: sliding_window only with use_sliding_window; Gemma 3 with bidirectional attention halves it.
  let window = family === 'qwen3' && !r.flag('use_sliding_window') ? null : family === 'gemma' ? null : r.optionalInteger('sliding_window');
  if (family === 'gemma3_text' && window !== null && r.flag('use_bidirectional_attention')) window = Math.floor(window / 2) + 1;
  const windows = family === 'phi3' || family === 'gemma' ? undefined : layerWindows(family, r, layers, window);
  const factor = family === 'phi3' ? partialRotary(r) : 1;
  const rotaryDim = Math.floor(headDim * factor);
  if (family === 'phi3' && (rotaryDim < 2 || rotaryDim % 2 !== 0))
    r.issues.push({
      path: ['partial_rotary_factor'],
      code: 'bad-config',
      message: 'head_dim × partial_rotary_factor must be an even number of at least 2',
      expected: 'a factor giving an even rotary width',
      received: String(factor),
    });
  const attnSoftcap = family === 'gemma2' || family === 'gemma3_text' ? softcap(r, 'attn_logit_softcapping') : undefined;
  const finalSoftcap = family === 'gemma2' || family === 'gemma3_text' ? softcap(r, 'final_logit_softcapping') : undefined;
  if (family === 'gemma2' || family === 'gemma3_text') r.integer('query_pre_attn_scalar');
  return {
    family,
    hidden,
    intermediate: r.integer('intermediate_size'),
    layers,
    heads,
    kvHeads,
    headDim,
    vocab: r.integer('vocab_size'),
    tied: r.flag('tie_word_embeddings'),
    qkvBias: bias,
    outBias: bias,
    mlpBias: false,
    attentionDropout: r.probability('attention_dropout'),
    maxPositions: r.integer('max_position_embeddings'),
    activation,
    ...(family === 'qwen3' ? { qkNorm: 'projection' as const } : {}),
    ...(family === 'gemma3_text' ? { qkNorm: 'transpose' as const, localRotary: true } : {}),
    ...(gemma ? { normOffset: true, embedScale: true } : {}),
    ...(family === 'gemma2' || family === 'gemma3_text' ? { sandwichNorms: true } : {}),
    ...(attnSoftcap !== undefined ? { attnSoftcap } : {}),
    ...(finalSoftcap !== undefined ? { finalSoftcap } : {}),
    ...(windows?.some((w) => w !== null) ? { layerWindows: windows } : {}),
    ...(family === 'phi3' ? { fused: true, rotaryDim, residDropout: r.probability('resid_pdrop'), ...(window !== null ? { slidingWindow: window } : {}) } : {}),
  };
}

/** Phi-3's partial_rotary_factor: in rope_parameters / rope_scaling (5.x) or at the top level, default 1. */
function partialRotary(r: ConfigReader): number {
  for (const field of ['rope_parameters', 'rope_scaling']) {
    const nested = r.value(field);
    if (typeof nested === 'object' && nested !== null && typeof (nested as Record<string, unknown>).partial_rotary_factor === 'number')
      return (nested as Record<string, number>).partial_rotary_factor!;
  }
  const value = r.value('partial_rotary_factor');
  if (typeof value !== 'number' || !(value > 0 && value <= 1)) {
    r.issues.push({
      path: ['partial_rotary_factor'],
      code: 'bad-config',
      message: 'partial_rotary_factor must be a number in (0, 1]',
      expected: '0 < factor <= 1',
      received: JSON.stringify(value),
    });
    return 1;
  }
  return value;
}

function llamaShape(family: 'llama' | 'qwen2' | 'mistral', r: ConfigReader, rules: HFRules): LlamaShape {
  const { hidden, heads, kvHeads, headDim } = attentionHeads(r, rules.readsHeadDim.includes(family));
  // Only Llama reads attention_bias (q/k/v/o); Qwen2 always biases q/k/v; Mistral never.
  const attentionBias = family === 'llama' ? r.flag('attention_bias') : false;
  const window = family === 'mistral' ? r.optionalInteger('sliding_window') : null;
  const layers = r.integer('num_hidden_layers', 1, LIMITS.layers);
  const windows = family === 'qwen2' ? qwen2Windows(r, rules, layers) : undefined;
  return {
    family,
    hidden,
    intermediate: r.integer('intermediate_size'),
    layers,
    heads,
    kvHeads,
    headDim,
    vocab: r.integer('vocab_size'),
    tied: r.flag('tie_word_embeddings'),
    qkvBias: family === 'qwen2' ? true : attentionBias,
    outBias: attentionBias,
    mlpBias: rules.readsMlpBias.includes(family) ? r.flag('mlp_bias') : false,
    attentionDropout: r.probability('attention_dropout'),
    maxPositions: r.integer('max_position_embeddings'),
    activation: r.activation('hidden_act'),
    ...(window !== null ? { slidingWindow: window } : {}),
    ...(windows !== undefined ? { layerWindows: windows } : {}),
  };
}

/**
 * Qwen2 from masking_utils on (4.53): `sliding_window` only with `use_sliding_window`, and the layers
 * from `max_window_layers` on are sliding (Qwen2Config's `layer_types`, or the config's own), each
 * type its own mask (modeling_qwen2.py `causal_mask_mapping`).
 */
function qwen2Windows(r: ConfigReader, rules: HFRules, layers: number): (number | null)[] | undefined {
  if (rules.mask.qwen2 !== 'masking-utils' || !r.flag('use_sliding_window')) return undefined;
  const window = r.optionalInteger('sliding_window');
  if (window === null) return undefined;
  const types = r.value('layer_types');
  if (types !== null && types !== undefined) return layerWindows('qwen3', r, layers, window);
  const from = r.integer('max_window_layers', 0);
  const windows = Array.from({ length: layers }, (_, i) => (i >= from ? window : null));
  return windows.some((w) => w !== null) ? windows : undefined;
}

/**
 * A model from a Hugging Face `config.json` object (model_type `llama`, `qwen2`, `mistral`,
 * `gpt2`, `qwen3`, `gemma`, `gemma2`, `gemma3_text`, `phi3`, or a multimodal config whose
 * `text_config` is one of them, e.g. `gemma3`: its text decoder), as a transformers release builds it (`options.transformers`, default the newest
 * release read): fields the config leaves out take the config class's defaults, fields that
 * release does not read are ignored as it ignores them (`head_dim` before 4.45, `mlp_bias`
 * before 4.41), `use_cache` and `torch_dtype` are honoured, and a `quantization_config`
 * (bitsandbytes 4/8-bit, GPTQ, AWQ, FP8, FBGEMM FP8) stores the Linear layers its quantizer
 * converts in that format. `options.tensorParallel` builds one rank of a tensor-parallel job
 * (llama, qwen2, mistral; see {@link TensorParallelOptions}). Unknown model types and bad fields
 * give a VramError naming each field.
 *
 * @example
 * ```ts
 * import { estimate, fromHFConfig } from 'vram-ts';
 * const gpt2 = fromHFConfig({ model_type: 'gpt2', n_embd: 768, n_layer: 12, n_head: 12, n_positions: 1024, vocab_size: 50257 });
 * console.log(estimate(gpt2, { input: [1, 8], mode: 'inference' }).params.total); // 124439808
 * const gemma3 = fromHFConfig({ model_type: 'gemma3', text_config: { hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 1, head_dim: 16, vocab_size: 512 } });
 * console.log(gemma3.className); // "Gemma3ForCausalLM"
 * ```
 */
export function fromHFConfig(config: HFConfig, options: HFConfigOptions = {}): ModuleLayer {
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    fail('bad-config', 'a config must be an object', { received: config === null ? 'null' : typeof config });
  validate(options, decoderOptions, ['options']);
  // A multimodal config (Gemma 3, …) whose text_config is a decoder vram-ts builds: its text model alone.
  const nested = config.text_config;
  if (
    typeof nested === 'object' &&
    nested !== null &&
    !Array.isArray(nested) &&
    !(typeof config.model_type === 'string' && (FAMILIES as readonly string[]).includes(config.model_type))
  )
    return textDecoder(config, nested as HFConfig, options);
  const type = config.model_type;
  // Mixture-of-experts families (catalog/moe.ts, catalog/deepseek.ts).
  if (typeof type === 'string' && (MOE_FAMILIES as readonly string[]).includes(type)) return moeConfigModel(config, options);
  if (typeof type !== 'string' || !(FAMILIES as readonly string[]).includes(type)) {
    fail('unsupported-model', 'unsupported model_type', {
      path: ['model_type'],
      expected: [...FAMILIES, ...MOE_FAMILIES].join(' | '),
      received: JSON.stringify(type),
    });
  }
  const family = type as (typeof FAMILIES)[number];
  const rules = transformersRules(options.transformers, ['transformers']);
  const r = new ConfigReader(config, DEFAULTS[family]);
  architecture(config, family, r.issues);
  const quantized = quantizationConfig(config, family === 'gpt2' ? 'transformer.h' : 'model.layers', r.issues);
  // The quantizers' default dtype for what stays unquantized applies when the config names none.
  const dtype = options.dtype ?? r.dtype() ?? quantized?.dtype;
  const useCache = options.useCache ?? r.flag('use_cache');
  const decoder: DecoderOptions = { ...options, transformers: rules.release, useCache, ...(dtype !== undefined ? { dtype } : {}) };
  let build: () => ModuleLayer;
  if (family === 'gpt2' && options.tensorParallel !== undefined) {
    // GPT-2's fused Conv1D c_attn ([h, 3h], q/k/v interleaved by column blocks) is not the
    // Llama plan: ColwiseParallel on it would split across q/k/v, not across heads.
    r.issues.push({
      path: ['options', 'tensorParallel'],
      code: 'not-modelled',
      message: 'tensor parallelism of GPT-2 (fused Conv1D c_attn) is not modelled: llama, qwen2 and mistral are',
      expected: 'absent',
      received: JSON.stringify(options.tensorParallel),
    });
  }
  if (family === 'gpt2') {
    const shape = gpt2Shape(r);
    build = () => gpt2Model(shape, decoder);
  } else {
    const shape = family === 'llama' || family === 'qwen2' || family === 'mistral' ? llamaShape(family, r, rules) : variantShape(family, r, rules);
    build = () => llamaFamily(shape, decoder);
  }
  if (r.issues.length > 0) throw new VramError(r.issues);
  const model = build();
  return quantized === undefined ? model : Object.freeze({ ...model, quantization: quantized.plan });
}

/** A multimodal config's text decoder, its dtype inherited from the outer config when it names none; issues under `text_config`. */
function textDecoder(config: HFConfig, text: HFConfig, options: HFConfigOptions): ModuleLayer {
  // One level only: a text_config inside the text_config (or the config itself, a cycle) is no decoder.
  if (text === config || (text.text_config !== undefined && text.text_config !== null))
    fail('bad-config', 'a text_config holds a decoder, not another text_config', {
      path: ['text_config', 'text_config'],
      expected: 'a text-only config',
      received: text === config ? 'the config itself' : 'a nested text_config',
    });
  const textType = text.model_type ?? (typeof config.model_type === 'string' ? TEXT_CONFIG_TYPE[config.model_type] : undefined);
  const dtype = text.torch_dtype ?? text.dtype ?? config.torch_dtype ?? config.dtype;
  // transformers quantizes the whole model from the top-level quantization_config: the decoder included.
  const quantization = config.quantization_config;
  if (quantization !== undefined && quantization !== null && text.quantization_config !== undefined && text.quantization_config !== null)
    fail('bad-config', 'two quantization_configs: the top level one quantizes the whole model', {
      path: ['text_config', 'quantization_config'],
      expected: 'one quantization_config, at the top level',
      received: 'one at each level',
    });
  const quantized = quantization !== undefined && quantization !== null ? { quantization_config: quantization } : {};
  try {
    return fromHFConfig({ ...text, ...quantized, model_type: textType, ...(dtype !== undefined ? { torch_dtype: dtype } : {}) }, options);
  } catch (e) {
    if (e instanceof VramError) throw new VramError(e.issues.map((issue) => ({ ...issue, path: ['text_config', ...(issue.path ?? [])] })));
    throw e;
  }
}

/** GPT-2's config fields (configuration_gpt2.py's names). */
function gpt2Shape(r: ConfigReader): Gpt2Shape {
  const hidden = r.integer('n_embd');
  const heads = r.integer('n_head');
  if (hidden % heads !== 0)
    r.issues.push({ path: ['n_head'], code: 'bad-config', message: 'n_head must divide n_embd', expected: `a divisor of ${hidden}`, received: String(heads) });
  return {
    hidden,
    layers: r.integer('n_layer', 1, LIMITS.layers),
    heads,
    inner: r.optionalInteger('n_inner') ?? 4 * hidden,
    vocab: r.integer('vocab_size'),
    positions: r.integer('n_positions'),
    attnDropout: r.probability('attn_pdrop'),
    residDropout: r.probability('resid_pdrop'),
    embdDropout: r.probability('embd_pdrop'),
    tied: r.flag('tie_word_embeddings'),
    activation: r.activation('activation_function'),
  };
}

/**
 * `fromHFConfig`'s route for the mixture-of-experts families: the config's `torch_dtype` and
 * `use_cache` unless the options say otherwise, then {@link moeFromHFConfig} or
 * {@link deepseekFromHFConfig}.
 *
 * @example
 * ```ts
 * import { fromHFConfig } from 'vram-ts';
 * const m = fromHFConfig({ model_type: 'qwen2_moe', hidden_size: 64, intermediate_size: 128, moe_intermediate_size: 32, shared_expert_intermediate_size: 96, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 4, vocab_size: 512, num_experts: 4, num_experts_per_tok: 2 });
 * console.log(m.meta?.moe?.experts); // 4
 * ```
 */
function moeConfigModel(config: HFConfig, options: HFConfigOptions): ModuleLayer {
  const r = new ConfigReader(config, { use_cache: true });
  const configDtype = r.dtype();
  const cfgCache = r.flag('use_cache');
  if (r.issues.length > 0) throw new VramError(r.issues);
  const dtype = options.dtype ?? configDtype;
  if (config.quantization_config !== undefined && config.quantization_config !== null)
    fail('not-modelled', 'quantized mixture-of-experts checkpoints are not modelled', { path: ['quantization_config'] });
  if (options.tensorParallel !== undefined || options.pipelineStage !== undefined)
    fail('not-modelled', 'tensor or pipeline parallelism of a mixture-of-experts decoder is not modelled (expert parallelism is: expertParallel)', {
      path: ['options', options.tensorParallel !== undefined ? 'tensorParallel' : 'pipelineStage'],
    });
  if (options.contextParallel !== undefined)
    fail('not-modelled', 'context parallelism of a mixture-of-experts decoder is not modelled', { path: ['options', 'contextParallel'] });
  const deepseek = config.model_type === 'deepseek_v2' || config.model_type === 'deepseek_v3';
  if (options.expertParallel !== undefined && deepseek)
    fail('not-modelled', 'expert parallelism of DeepSeek (its group-limited router) is not modelled: Mixtral, Qwen2-MoE and Qwen3-MoE are', {
      path: ['options', 'expertParallel'],
    });
  const full: DecoderOptions = { ...options, useCache: options.useCache ?? cfgCache, ...(dtype !== undefined ? { dtype } : {}) };
  return deepseek ? deepseekFromHFConfig(config, full) : moeFromHFConfig(config, full);
}
