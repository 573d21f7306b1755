import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { ModuleLayer } from '../nn/types.js';
import type { DecoderOptions } from './llama.js';
import { fromHFConfig, type HFConfig } from './hf.js';

/** A catalog LLM: the Hugging Face config (the fields that shape memory) and its published size. */
export interface LlmEntry {
  readonly id: string;
  readonly repo: string;
  readonly config: HFConfig;
  /** Parameter total of the released checkpoint (tied weights once). */
  readonly params: number;
}

/**
 * Catalog LLMs with their configs as data (the memory-relevant fields of each repository's
 * config.json, `torch_dtype` included) and their published parameter totals.
 */
export const LLMS: readonly LlmEntry[] = deepFreeze([
  {
    id: 'qwen2.5-0.5b',
    repo: 'Qwen/Qwen2.5-0.5B',
    config: { model_type: 'qwen2', torch_dtype: 'bfloat16', hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, vocab_size: 151936, tie_word_embeddings: true, max_position_embeddings: 32768, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
    params: 494_032_768,
  },
  {
    id: 'qwen2.5-1.5b',
    repo: 'Qwen/Qwen2.5-1.5B',
    config: { model_type: 'qwen2', torch_dtype: 'bfloat16', hidden_size: 1536, intermediate_size: 8960, num_hidden_layers: 28, num_attention_heads: 12, num_key_value_heads: 2, vocab_size: 151936, tie_word_embeddings: true, max_position_embeddings: 131072, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
    params: 1_543_714_304,
  },
  {
    id: 'qwen2.5-3b',
    repo: 'Qwen/Qwen2.5-3B',
    config: { model_type: 'qwen2', torch_dtype: 'bfloat16', hidden_size: 2048, intermediate_size: 11008, num_hidden_layers: 36, num_attention_heads: 16, num_key_value_heads: 2, vocab_size: 151936, tie_word_embeddings: true, max_position_embeddings: 32768, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
    params: 3_085_938_688,
  },
  {
    id: 'qwen2.5-7b',
    repo: 'Qwen/Qwen2.5-7B',
    config: { model_type: 'qwen2', torch_dtype: 'bfloat16', hidden_size: 3584, intermediate_size: 18944, num_hidden_layers: 28, num_attention_heads: 28, num_key_value_heads: 4, vocab_size: 152064, tie_word_embeddings: false, max_position_embeddings: 131072, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
    params: 7_615_616_512,
  },
  {
    id: 'llama-2-7b',
    repo: 'meta-llama/Llama-2-7b-hf',
    config: { model_type: 'llama', torch_dtype: 'float16', hidden_size: 4096, intermediate_size: 11008, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 32, vocab_size: 32000, tie_word_embeddings: false, max_position_embeddings: 4096, rms_norm_eps: 1e-5 },
    params: 6_738_415_616,
  },
  {
    id: 'llama-3-8b',
    repo: 'meta-llama/Meta-Llama-3-8B',
    config: { model_type: 'llama', torch_dtype: 'bfloat16', hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 128256, tie_word_embeddings: false, max_position_embeddings: 8192, rope_theta: 500000.0, rms_norm_eps: 1e-5 },
    params: 8_030_261_248,
  },
  {
    id: 'mistral-7b',
    repo: 'mistralai/Mistral-7B-v0.1',
    config: { model_type: 'mistral', torch_dtype: 'bfloat16', hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 32000, tie_word_embeddings: false, max_position_embeddings: 32768, sliding_window: 4096, rope_theta: 10000.0, rms_norm_eps: 1e-5 },
    params: 7_241_732_096,
  },
  {
    id: 'gpt2',
    repo: 'openai-community/gpt2',
    config: { model_type: 'gpt2', n_embd: 768, n_layer: 12, n_head: 12, n_positions: 1024, vocab_size: 50257, activation_function: 'gelu_new', attn_pdrop: 0.1, resid_pdrop: 0.1, embd_pdrop: 0.1 },
    params: 124_439_808,
  },
]);

function normalise(name: string): string {
  return name.trim().toLowerCase().replace(/_/g, '-');
}

/**
 * A catalog LLM by id (`qwen2.5-0.5b`, `llama-3-8b`, `gpt2`, …) or repository name.
 *
 * @example
 * ```ts
 * import { estimate, llm } from 'vram-ts';
 * console.log(estimate(llm('qwen2.5-0.5b'), { input: [1, 8], mode: 'inference' }).params.total); // 494032768
 * ```
 */
export function llm(name: string, options: DecoderOptions = {}): ModuleLayer {
  if (typeof name !== 'string') fail('unknown-model', 'a catalog LLM is named by a string', { path: ['model'], expected: LLMS.map((e) => e.id).join(' | '), received: String(name) });
  const key = normalise(name);
  const entry = LLMS.find((e) => e.id === key || normalise(e.repo) === key);
  if (entry === undefined) fail('unknown-model', 'unknown catalog LLM', { path: ['model'], expected: LLMS.map((e) => e.id).join(' | '), received: name });
  return fromHFConfig(entry.config, options);
}
