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
    id: 'qwen3-0.6b',
    repo: 'Qwen/Qwen3-0.6B',
    config: {architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, head_dim: 128, hidden_act: 'silu', hidden_size: 1024, intermediate_size: 3072, max_position_embeddings: 40960, max_window_layers: 28, model_type: 'qwen3', num_attention_heads: 16, num_hidden_layers: 28, num_key_value_heads: 8, rms_norm_eps: 1e-06, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936},
    params: 596_049_920,
  },
  {
    id: 'qwen3-1.7b',
    repo: 'Qwen/Qwen3-1.7B',
    config: {architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, head_dim: 128, hidden_act: 'silu', hidden_size: 2048, intermediate_size: 6144, max_position_embeddings: 40960, max_window_layers: 28, model_type: 'qwen3', num_attention_heads: 16, num_hidden_layers: 28, num_key_value_heads: 8, rms_norm_eps: 1e-06, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936},
    params: 1_720_574_976,
  },
  {
    id: 'qwen3-4b',
    repo: 'Qwen/Qwen3-4B',
    config: {architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, head_dim: 128, hidden_act: 'silu', hidden_size: 2560, intermediate_size: 9728, max_position_embeddings: 40960, max_window_layers: 36, model_type: 'qwen3', num_attention_heads: 32, num_hidden_layers: 36, num_key_value_heads: 8, rms_norm_eps: 1e-06, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936},
    params: 4_022_468_096,
  },
  {
    id: 'qwen3-8b',
    repo: 'Qwen/Qwen3-8B',
    config: {architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, head_dim: 128, hidden_act: 'silu', hidden_size: 4096, intermediate_size: 12288, max_position_embeddings: 40960, max_window_layers: 36, model_type: 'qwen3', num_attention_heads: 32, num_hidden_layers: 36, num_key_value_heads: 8, rms_norm_eps: 1e-06, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936},
    params: 8_190_735_360,
  },
  {
    id: 'qwen3-14b',
    repo: 'Qwen/Qwen3-14B',
    config: {architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, head_dim: 128, hidden_act: 'silu', hidden_size: 5120, intermediate_size: 17408, max_position_embeddings: 40960, max_window_layers: 40, model_type: 'qwen3', num_attention_heads: 40, num_hidden_layers: 40, num_key_value_heads: 8, rms_norm_eps: 1e-06, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936},
    params: 14_768_307_200,
  },
  {
    id: 'qwen3-32b',
    repo: 'Qwen/Qwen3-32B',
    config: {architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, head_dim: 128, hidden_act: 'silu', hidden_size: 5120, intermediate_size: 25600, max_position_embeddings: 40960, max_window_layers: 64, model_type: 'qwen3', num_attention_heads: 64, num_hidden_layers: 64, num_key_value_heads: 8, rms_norm_eps: 1e-06, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936},
    params: 32_762_123_264,
  },
  {
    id: 'gemma-2-2b',
    repo: 'google/gemma-2-2b',
    config: {architectures: ['Gemma2ForCausalLM'], attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0, head_dim: 256, hidden_act: 'gelu_pytorch_tanh', hidden_activation: 'gelu_pytorch_tanh', hidden_size: 2304, intermediate_size: 9216, max_position_embeddings: 8192, model_type: 'gemma2', num_attention_heads: 8, num_hidden_layers: 26, num_key_value_heads: 4, query_pre_attn_scalar: 256, rms_norm_eps: 1e-06, rope_theta: 10000.0, sliding_window: 4096, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 256000},
    params: 2_614_341_888,
  },
  {
    id: 'gemma-2-9b',
    repo: 'google/gemma-2-9b',
    config: {architectures: ['Gemma2ForCausalLM'], attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0, head_dim: 256, hidden_act: 'gelu_pytorch_tanh', hidden_activation: 'gelu_pytorch_tanh', hidden_size: 3584, intermediate_size: 14336, max_position_embeddings: 8192, model_type: 'gemma2', num_attention_heads: 16, num_hidden_layers: 42, num_key_value_heads: 8, query_pre_attn_scalar: 256, rms_norm_eps: 1e-06, rope_theta: 10000.0, sliding_window: 4096, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 256000},
    params: 9_241_705_984,
  },
  {
    id: 'gemma-2-27b',
    repo: 'google/gemma-2-27b',
    config: {architectures: ['Gemma2ForCausalLM'], attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0, head_dim: 128, hidden_act: 'gelu_pytorch_tanh', hidden_activation: 'gelu_pytorch_tanh', hidden_size: 4608, intermediate_size: 36864, max_position_embeddings: 8192, model_type: 'gemma2', num_attention_heads: 32, num_hidden_layers: 46, num_key_value_heads: 16, query_pre_attn_scalar: 144, rms_norm_eps: 1e-06, rope_theta: 10000.0, sliding_window: 4096, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 256000},
    params: 27_227_128_320,
  },
  {
    id: 'gemma-3-1b',
    repo: 'google/gemma-3-1b-it',
    config: {architectures: ['Gemma3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: null, final_logit_softcapping: null, head_dim: 256, hidden_activation: 'gelu_pytorch_tanh', hidden_size: 1152, intermediate_size: 6912, max_position_embeddings: 32768, model_type: 'gemma3_text', num_attention_heads: 4, num_hidden_layers: 26, num_key_value_heads: 1, query_pre_attn_scalar: 256, rms_norm_eps: 1e-06, rope_local_base_freq: 10000, rope_scaling: null, rope_theta: 1000000, sliding_window: 512, sliding_window_pattern: 6, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 262144},
    params: 999_885_952,
  },
  {
    id: 'gemma-3-4b',
    repo: 'google/gemma-3-4b-pt',
    config: {model_type: 'gemma3', torch_dtype: 'bfloat16', text_config: {attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: null, final_logit_softcapping: null, head_dim: 256, hidden_activation: 'gelu_pytorch_tanh', hidden_size: 2560, intermediate_size: 10240, max_position_embeddings: 131072, model_type: 'gemma3_text', num_attention_heads: 8, num_hidden_layers: 34, num_key_value_heads: 4, query_pre_attn_scalar: 256, rms_norm_eps: 1e-06, rope_local_base_freq: 10000.0, rope_scaling: {factor: 8.0, rope_type: 'linear'}, rope_theta: 1000000.0, sliding_window: 1024, sliding_window_pattern: 6, use_cache: true, vocab_size: 262144}},
    params: 3_880_099_328,
  },
  {
    id: 'gemma-3-12b',
    repo: 'google/gemma-3-12b-pt',
    config: {model_type: 'gemma3', torch_dtype: 'bfloat16', text_config: {attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: null, final_logit_softcapping: null, head_dim: 256, hidden_activation: 'gelu_pytorch_tanh', hidden_size: 3840, intermediate_size: 15360, max_position_embeddings: 131072, model_type: 'gemma3_text', num_attention_heads: 16, num_hidden_layers: 48, num_key_value_heads: 8, query_pre_attn_scalar: 256, rms_norm_eps: 1e-06, rope_local_base_freq: 10000.0, rope_scaling: {factor: 8.0, rope_type: 'linear'}, rope_theta: 1000000.0, sliding_window: 1024, sliding_window_pattern: 6, use_cache: true, vocab_size: 262144}},
    params: 11_765_788_416,
  },
  {
    id: 'gemma-3-27b',
    repo: 'google/gemma-3-27b-pt',
    config: {model_type: 'gemma3', torch_dtype: 'bfloat16', text_config: {attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: null, final_logit_softcapping: null, head_dim: 128, hidden_activation: 'gelu_pytorch_tanh', hidden_size: 5376, intermediate_size: 21504, max_position_embeddings: 131072, model_type: 'gemma3_text', num_attention_heads: 32, num_hidden_layers: 62, num_key_value_heads: 16, query_pre_attn_scalar: 168, rms_norm_eps: 1e-06, rope_local_base_freq: 10000.0, rope_scaling: {factor: 8.0, rope_type: 'linear'}, rope_theta: 1000000.0, sliding_window: 1024, sliding_window_pattern: 6, use_cache: true, vocab_size: 262144}},
    params: 27_009_002_240,
  },
  {
    id: 'phi-3-mini',
    repo: 'microsoft/Phi-3-mini-4k-instruct',
    config: {architectures: ['Phi3ForCausalLM'], attention_dropout: 0.0, embd_pdrop: 0.0, hidden_act: 'silu', hidden_size: 3072, intermediate_size: 8192, max_position_embeddings: 4096, model_type: 'phi3', num_attention_heads: 32, num_hidden_layers: 32, num_key_value_heads: 32, original_max_position_embeddings: 4096, resid_pdrop: 0.0, rms_norm_eps: 1e-05, rope_scaling: null, rope_theta: 10000.0, sliding_window: 2047, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 32064},
    params: 3_821_079_552,
  },
  {
    id: 'gpt2',
    repo: 'openai-community/gpt2',
    config: { model_type: 'gpt2', n_embd: 768, n_layer: 12, n_head: 12, n_positions: 1024, vocab_size: 50257, activation_function: 'gelu_new', attn_pdrop: 0.1, resid_pdrop: 0.1, embd_pdrop: 0.1 },
    params: 124_439_808,
  },
  // Mixture of experts: 30,532,122,624 parameters, 3,353,032,704 active per token (input embedding counted); test/fixtures/hf-configs/qwen3-30b-a3b.json.
  {
    id: 'qwen3-30b-a3b',
    repo: 'Qwen/Qwen3-30B-A3B',
    config: {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936},
    params: 30_532_122_624,
  },
  // Mixture of experts: 46,702,792,704 parameters, 12,879,925,248 active per token (input embedding counted); test/fixtures/hf-configs/mixtral-8x7b-v0.1.json.
  {
    id: 'mixtral-8x7b',
    repo: 'mistralai/Mixtral-8x7B-v0.1',
    config: {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000},
    params: 46_702_792_704,
  },
  // Mixture of experts: 671,026,404,352 parameters, 37,552,282,624 active per token (input embedding counted); test/fixtures/hf-configs/deepseek-v3.json.
  {
    id: 'deepseek-v3',
    repo: 'deepseek-ai/DeepSeek-V3',
    config: {"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn", "rope_theta": 10000, "rope_type": "yarn"}, "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280},
    params: 671_026_404_352,
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
