import { VramError, type VramIssue } from '../errors.js';
import { LIMITS } from '../limits.js';
import type { AttentionImpl } from '../nn/attention.js';
import { activationName, fieldsOf, probability } from '../nn/block-schema.js';
import { arrayOf, boolean, func, integer, number, object, oneOf, show, string, validate, type Check } from '../validate.js';
import type { LmHead, ModelMeta, ModuleLayer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import type { ContextParallelOptions } from './context-parallel.js';
import type { MoeOptions } from './experts.js';
import type { TensorParallelOptions } from './tensor-parallel.js';
import type { FamilyRules, HFRules, VariantFamilyName } from './transformers.js';

// The shape and the options of a Llama-family decoder (llama.ts builds it, llama-layer.ts its layers), and the shape's schema.

const size = integer(1);

/** A plain object (the facts a model's meta records: decoder-check.ts reads them where they are used). */
const record: Check = (value, path, issues) => {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    issues.push({ path, code: 'bad-option', message: 'must be an object', expected: 'object', received: show(value) });
};

/** A local layer's window (an integer >= 1), or null for a global one. */
const window: Check = (value, path, issues) => {
  if (value !== null) size(value, path, issues);
};

/** {@link LlamaShape} field by field: the families, sizes >= 1, up to `LIMITS.layers` layers, flags, probabilities, positive soft-caps. */
const LLAMA_SHAPE = object({
  fields: {
    family: oneOf(['llama', 'qwen2', 'mistral', 'qwen3', 'gemma', 'gemma2', 'gemma3_text', 'phi3'], 'family'),
    ...fieldsOf(['hidden', 'intermediate', 'heads', 'kvHeads', 'headDim', 'vocab', 'slidingWindow', 'maxPositions', 'rotaryDim'], size),
    layers: integer(1, LIMITS.layers),
    ...fieldsOf(['tied', 'qkvBias', 'outBias', 'mlpBias', 'maskWindow', 'normOffset', 'embedScale', 'sandwichNorms', 'localRotary', 'fused'], boolean),
    ...fieldsOf(['attentionDropout', 'residDropout'], probability),
    ...fieldsOf(['attnSoftcap', 'finalSoftcap'], number(Number.MIN_VALUE)),
    activation: activationName,
    qkNorm: oneOf(['projection', 'transpose'], 'qkNorm placement'),
    layerWindows: arrayOf(window, { max: LIMITS.layers }),
    ...fieldsOf(['layerMlp', 'layerAttention'], func),
    classPrefix: string,
    extraMeta: record,
  },
  required: ['family', 'hidden', 'intermediate', 'layers', 'heads', 'kvHeads', 'headDim', 'vocab', 'tied', 'qkvBias', 'outBias', 'mlpBias', 'attentionDropout'],
});

/**
 * A VramError (every problem, at `['llamaFamily', field]`) unless the shape passes its schema and
 * what transformers' attention needs: kv heads dividing heads (`num_key_value_groups`), a rotary
 * dim even and within a head (rotate_half), one window per layer.
 */
export function checkLlamaShape(shape: LlamaShape): void {
  validate(shape, LLAMA_SHAPE, ['llamaFamily']);
  const issues: VramIssue[] = [];
  if (shape.heads % shape.kvHeads !== 0)
    issues.push({
      path: ['llamaFamily', 'kvHeads'],
      code: 'bad-option',
      message: 'kvHeads must divide heads',
      expected: `a divisor of ${shape.heads}`,
      received: String(shape.kvHeads),
    });
  const rotary = shape.rotaryDim;
  if (rotary !== undefined && (rotary % 2 !== 0 || rotary > shape.headDim))
    issues.push({
      path: ['llamaFamily', 'rotaryDim'],
      code: 'bad-option',
      message: 'the rotary dim is even and at most headDim',
      expected: `an even integer <= ${shape.headDim}`,
      received: String(rotary),
    });
  const windows = shape.layerWindows;
  if (windows !== undefined && windows.length !== shape.layers)
    issues.push({
      path: ['llamaFamily', 'layerWindows'],
      code: 'bad-config',
      message: 'layerWindows needs one entry per layer',
      expected: `${shape.layers} entries`,
      received: String(windows.length),
    });
  if (issues.length > 0) throw new VramError(issues);
}

/**
 * The shape of a Llama-family decoder (Llama, Qwen2, Mistral) or of a variation of it (Qwen3,
 * Gemma 1-3, Phi-3: the optional fields from `qkNorm` on).
 */
export interface LlamaShape {
  readonly family: 'llama' | 'qwen2' | 'mistral' | VariantFamilyName;
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
  /** Qwen3 (`projection`: on each projection's [B, S, heads, head_dim] view) and Gemma 3 (`transpose`: after the transposes): RMSNorm `q_norm`/`k_norm` over head_dim. */
  readonly qkNorm?: 'projection' | 'transpose';
  /** Gemma: every RMSNorm computes `x * (1 + weight)` in float32 before the cast back. */
  readonly normOffset?: boolean;
  /** Gemma: the embeddings are multiplied by sqrt(hidden) (where, the release's {@link FamilyRules.embedScale}). */
  readonly embedScale?: boolean;
  /** Gemma 2/3: the attention output is normed (`post_attention_layernorm`) before the residual, the MLP sits between `pre_feedforward_layernorm` and `post_feedforward_layernorm`. */
  readonly sandwichNorms?: boolean;
  /** Gemma 2: attention-logit soft-capping `tanh(scores / cap) * cap` (eager). */
  readonly attnSoftcap?: number;
  /** Gemma 2: final-logit soft-capping `tanh(logits / cap) * cap`. */
  readonly finalSoftcap?: number;
  /**
   * Per layer: the sliding window of a local layer, null for a global one (Gemma 2/3, Qwen3's
   * `layer_types`). The model builds a causal and a sliding-window mask; the KV cache of a
   * local layer keeps at most its window.
   */
  readonly layerWindows?: readonly (number | null)[];
  /** Gemma 3: local layers use their own rotary tables (`rope_local_base_freq`), computed beside the global ones. */
  readonly localRotary?: boolean;
  /** Phi-3: fused `qkv_proj` and `gate_up_proj`. */
  readonly fused?: boolean;
  /** Phi-3: rotary on the first `rotaryDim` dims of each head (head_dim × partial_rotary_factor), the rest concatenated back. */
  readonly rotaryDim?: number;
  /** Phi-3's `resid_pdrop`: dropout of the attention and MLP outputs before each residual add. */
  readonly residDropout?: number;
  /**
   * Mixture-of-experts decoders (catalog/moe.ts): layer i's MLP module when it is not the gated
   * MLP (a MoE block, named as the checkpoint names it), or undefined for the gated MLP. With
   * this hook the layers may differ, so the model declares no repeated blocks.
   */
  readonly layerMlp?: (layer: number) => ModuleLayer | undefined;
  /**
   * DeepSeek's multi-head latent attention (catalog/deepseek.ts): layer i's `self_attn` module
   * when it is not {@link attention}'s; it takes the normed hidden states and the model's
   * shared tensors (cos, sin, the mask) and returns the output and, eager, the weights.
   */
  readonly layerAttention?: (layer: number) => ModuleLayer | undefined;
  /** Class-name prefix when it is not the family's (`Mixtral`, `Qwen2Moe`, `DeepseekV3`). */
  readonly classPrefix?: string;
  /** Extra facts the model's meta records (MoE: {@link ModelMeta.moe}). */
  readonly extraMeta?: Partial<ModelMeta>;
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
   * the newest release read ({@link DEFAULT_TRANSFORMERS}). See {@link vram-ts/internals!TRANSFORMERS_RULES}.
   */
  readonly transformers?: string;
  /**
   * `use_cache` of the forward (default true, as `config.use_cache`): every layer's keys and
   * values go into the cache that the output holds until the forward returns.
   */
  readonly useCache?: boolean;
  /**
   * Build one rank of a tensor-parallel job (PyTorch DTensor's ColwiseParallel /
   * RowwiseParallel plan, vocab-parallel embedding and LM head, optional sequence and loss
   * parallelism; see {@link TensorParallelOptions}). Llama, Qwen2 and Mistral only; estimate
   * such a model with `parallel.tp` equal to the size, or without `parallel.tp`.
   */
  readonly tensorParallel?: TensorParallelOptions;
  /**
   * Build one rank of a context-parallel job (PyTorch's `context_parallel`, ring attention with
   * the all-gather rotation; see {@link ContextParallelOptions}): the input is the whole
   * sequence, cut to the rank's s/c positions before the forward. Llama, Qwen2 and Mistral
   * with sdpa attention, with or without `tensorParallel` (torchtitan's cp × tp mesh); estimate
   * with `parallel.cp` equal to the size, or without it.
   */
  readonly contextParallel?: ContextParallelOptions;
  /**
   * Mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE) with transformers 5.x rules: one
   * rank of Hugging Face's expert parallelism (`DistributedConfig(enable_expert_parallel=True)`,
   * the `ep_plan`): each rank holds E/size of every MoE layer's routed experts (rank `rank`'s
   * block of them) and everything else whole, every rank runs every token, and the experts'
   * output is all-reduced in place. `size` must divide the experts. Estimate with `parallel.ep`
   * equal to the size, or without it.
   */
  readonly expertParallel?: { readonly size: number; readonly rank?: number };
  /**
   * Build one pipeline stage, cut as torchtitan cuts a Hugging Face decoder: layers
   * [start, end) only (keeping their names); `embed_tokens` on the first stage alone (later
   * stages take the received hidden states as `inputs_embeds`); the final norm and `lm_head`
   * on the last stage alone (Identity before it). The stage returns `.logits` (no labels: the
   * pipeline's loss function runs outside the model).
   */
  readonly pipelineStage?: { readonly layers: readonly [number, number] };
  /** Mixture-of-experts decoders only: see {@link MoeOptions} (catalog/moe.ts). */
  readonly moe?: MoeOptions;
  /** What the forward computes after the decoder (default `{ kind: 'loss' }`): see {@link LmHead}. */
  readonly head?: LmHead;
}
