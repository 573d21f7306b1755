/** Tiny configs the catalog and property tests share (sizes small enough to trace in milliseconds). */
import type { LlamaShape } from '../../src/index.js';

/** A one-layer Mixtral config.json (4 experts). */
export const TINY_MIXTRAL = {
  model_type: 'mixtral',
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 128,
  num_local_experts: 4,
};

/** A one-layer Qwen3-MoE config.json (4 experts, 2 per token). */
export const TINY_QWEN3_MOE = {
  model_type: 'qwen3_moe',
  hidden_size: 64,
  intermediate_size: 128,
  moe_intermediate_size: 32,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  vocab_size: 128,
  num_experts: 4,
  num_experts_per_tok: 2,
};

/** A two-layer DeepSeek-V3 config.json (a dense layer, then MoE with MLA). */
export const TINY_DEEPSEEK = {
  model_type: 'deepseek_v3',
  hidden_size: 64,
  intermediate_size: 128,
  moe_intermediate_size: 32,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 4,
  n_routed_experts: 8,
  num_experts_per_tok: 2,
  n_group: 2,
  topk_group: 1,
  first_k_dense_replace: 1,
  q_lora_rank: 32,
  kv_lora_rank: 16,
  qk_rope_head_dim: 8,
  qk_nope_head_dim: 16,
  v_head_dim: 16,
  vocab_size: 128,
};

/** A one-layer Llama shape for llamaFamily. */
export const LLAMA_SHAPE: LlamaShape = {
  family: 'llama',
  hidden: 64,
  intermediate: 172,
  layers: 1,
  heads: 4,
  kvHeads: 4,
  headDim: 16,
  vocab: 256,
  tied: false,
  qkvBias: false,
  outBias: false,
  mlpBias: false,
  attentionDropout: 0,
};
