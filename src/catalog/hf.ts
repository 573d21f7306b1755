import { fail, VramError, type VramIssue } from '../errors.js';
import type { ModuleLayer } from '../nn/types.js';
import { gpt2Model, llamaFamily, type DecoderOptions } from './decoders.js';

/** A Hugging Face `config.json` object (the fields vram-ts reads; others are ignored). */
export type HFConfig = Readonly<Record<string, unknown>>;

const LLAMA_TYPES = ['llama', 'qwen2', 'mistral'] as const;

function integer(config: HFConfig, field: string, issues: VramIssue[], fallback?: number): number {
  const value = config[field] ?? fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    issues.push({ path: [field], code: 'bad-config', message: `${field} must be an integer >= 1`, expected: 'integer >= 1', received: value === undefined ? 'missing' : JSON.stringify(value) });
    return 1;
  }
  return value;
}

function optionalNumber(config: HFConfig, field: string, issues: VramIssue[], fallback: number): number {
  const value = config[field] ?? fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    issues.push({ path: [field], code: 'bad-config', message: `${field} must be a number >= 0`, received: JSON.stringify(value) });
    return fallback;
  }
  return value;
}

function flag(config: HFConfig, field: string, issues: VramIssue[], fallback: boolean): boolean {
  const value = config[field] ?? fallback;
  if (typeof value !== 'boolean') {
    issues.push({ path: [field], code: 'bad-config', message: `${field} must be true or false`, received: JSON.stringify(value) });
    return fallback;
  }
  return value;
}

/**
 * A model from a Hugging Face `config.json` object: model_type `llama`, `qwen2`, `mistral`
 * (sliding window) or `gpt2`. Unknown model types, missing or inconsistent fields give a
 * VramError naming the field.
 *
 * @example
 * ```ts
 * import { estimate, fromHFConfig } from 'vram-ts';
 * const gpt2 = fromHFConfig({ model_type: 'gpt2', n_embd: 768, n_layer: 12, n_head: 12, n_positions: 1024, vocab_size: 50257 });
 * console.log(estimate(gpt2, { input: [1, 8], mode: 'inference' }).params.total); // 124439808
 * ```
 */
export function fromHFConfig(config: HFConfig, options: DecoderOptions = {}): ModuleLayer {
  if (typeof config !== 'object' || config === null) fail('bad-config', 'a config must be an object', { received: typeof config });
  const type = config.model_type;
  const issues: VramIssue[] = [];
  let model: ModuleLayer | null = null;
  if (type === 'gpt2') {
    const hidden = integer(config, 'n_embd', issues, 768);
    const heads = integer(config, 'n_head', issues, 12);
    if (hidden % heads !== 0) issues.push({ path: ['n_head'], code: 'bad-config', message: 'n_head must divide n_embd', expected: `a divisor of ${hidden}`, received: String(heads) });
    const act = config.activation_function ?? 'gelu_new';
    if (act !== 'gelu_new') issues.push({ path: ['activation_function'], code: 'bad-config', message: 'only gelu_new is modelled for gpt2', expected: 'gelu_new', received: JSON.stringify(act) });
    const inner = config.n_inner === null || config.n_inner === undefined ? 4 * hidden : integer(config, 'n_inner', issues);
    if (issues.length === 0) {
      model = gpt2Model(
        {
          hidden,
          layers: integer(config, 'n_layer', issues, 12),
          heads,
          inner,
          vocab: integer(config, 'vocab_size', issues, 50257),
          positions: integer(config, 'n_positions', issues, 1024),
          attnDropout: optionalNumber(config, 'attn_pdrop', issues, 0.1),
          residDropout: optionalNumber(config, 'resid_pdrop', issues, 0.1),
          embdDropout: optionalNumber(config, 'embd_pdrop', issues, 0.1),
        },
        options,
      );
    }
  } else if (typeof type === 'string' && (LLAMA_TYPES as readonly string[]).includes(type)) {
    const family = type as (typeof LLAMA_TYPES)[number];
    const hidden = integer(config, 'hidden_size', issues);
    const heads = integer(config, 'num_attention_heads', issues);
    const kvHeads = integer(config, 'num_key_value_heads', issues, heads);
    const headDim = config.head_dim === null || config.head_dim === undefined ? hidden / heads : integer(config, 'head_dim', issues);
    if (!Number.isInteger(headDim)) issues.push({ path: ['num_attention_heads'], code: 'bad-config', message: 'num_attention_heads must divide hidden_size (or give head_dim)', received: String(heads) });
    if (heads % kvHeads !== 0) issues.push({ path: ['num_key_value_heads'], code: 'bad-config', message: 'num_key_value_heads must divide num_attention_heads', expected: `a divisor of ${heads}`, received: String(kvHeads) });
    const act = config.hidden_act ?? 'silu';
    if (act !== 'silu') issues.push({ path: ['hidden_act'], code: 'bad-config', message: 'only silu (SwiGLU) is modelled', expected: 'silu', received: JSON.stringify(act) });
    const attentionBias = flag(config, 'attention_bias', issues, false);
    const window = config.sliding_window;
    const useWindow = family === 'mistral' && window !== null && window !== undefined;
    if (useWindow && (typeof window !== 'number' || !Number.isSafeInteger(window) || window < 1)) issues.push({ path: ['sliding_window'], code: 'bad-config', message: 'sliding_window must be an integer >= 1 or null', received: JSON.stringify(window) });
    const shape = {
      family,
      hidden,
      intermediate: integer(config, 'intermediate_size', issues),
      layers: integer(config, 'num_hidden_layers', issues),
      heads,
      kvHeads,
      headDim,
      vocab: integer(config, 'vocab_size', issues),
      tied: flag(config, 'tie_word_embeddings', issues, false),
      qkvBias: family === 'qwen2' ? true : attentionBias,
      outBias: family === 'qwen2' ? false : attentionBias,
      mlpBias: family === 'llama' ? flag(config, 'mlp_bias', issues, false) : false,
      attentionDropout: optionalNumber(config, 'attention_dropout', issues, 0),
      ...(useWindow && typeof window === 'number' ? { slidingWindow: window } : {}),
    };
    if (issues.length === 0) model = llamaFamily(shape, options);
  } else {
    issues.push({ path: ['model_type'], code: 'unsupported-model', message: 'unsupported model_type', expected: 'llama | qwen2 | mistral | gpt2', received: JSON.stringify(type) });
  }
  if (issues.length > 0 || model === null) throw new VramError(issues);
  return model;
}
