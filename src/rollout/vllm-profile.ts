/**
 * vLLM V1's profiling run (`GPUModelRunner.profile_run`, vllm/v1/worker/gpu_model_runner.py) as a
 * program of its own, not Hugging Face's forward: `_dummy_run(max_num_batched_tokens)` spread over
 * `min(max_num_seqs, tokens)` requests with attention skipped (the backend returns its
 * pre-allocated output), then `_dummy_sampler_run` on the last position of each request. What
 * `torch_peak_increase` measures is the largest live total of that program above the weights.
 *
 * The model's layers as vLLM writes them (vllm/model_executor/models/llama.py, qwen2.py, qwen3.py):
 * a fused `qkv_proj` (QKVParallelLinear), rotary applied in place, the attention's output buffer
 * (`torch.empty` in `Attention.forward`), `o_proj`, the residual add fused into the next RMSNorm
 * (in place), a fused `gate_up_proj` and `SiluAndMul`, `down_proj`. Under torch.compile (the default;
 * not with `enforce_eager`) Inductor frees each intermediate after its last use, so the MLP's input is
 * gone before the activation runs; eager mode keeps it (the caller's `hidden_states`). With tensor
 * parallelism a row-parallel output is all-reduced out of place (`tensor_model_parallel_all_reduce`).
 *
 * The sampler (vllm/v1/sample/sampler.py, ops/topk_topp_sampler.py) on `[R, V]`: the logits in the
 * model's dtype (`compute_logits`, vocabulary padded to 64), their float32 copy, and the dummy run's
 * top-k (V − 1) and top-p (0.9) through `apply_top_k_top_p`: the sorted values (float32) and indices
 * (int64), the top-k mask (bool), the softmax of the sorted values (float32, cumsum in place), the
 * top-p mask (bool), and the scattered result (float32) — 28 bytes per element with bf16 logits.
 */
import { fail } from '../errors.js';
import type { ModelMeta } from '../nn/types.js';

/** What the profiling run is given: vLLM's scheduler limits and the rank's shape. */
export interface VllmProfileInput {
  /** `max_num_batched_tokens`: the dummy forward's tokens. */
  readonly tokens: number;
  /** `max_num_seqs`: the dummy requests are `min(max_num_seqs, tokens)`. */
  readonly seqs: number;
  readonly tensorParallelSize: number;
  /** Bytes of one activation element (the model's dtype). */
  readonly dtypeBytes: number;
  /** `enforce_eager`: no torch.compile, the MLP input lives through the MLP. */
  readonly eager: boolean;
}

/** The profiling run's peak above the weights, and where it falls. */
export interface VllmProfile {
  readonly bytes: number;
  /** `forward` (the largest decoder-layer step) or `sampler` (top-k/top-p on the logits). */
  readonly at: 'forward' | 'sampler';
  readonly forward: number;
  readonly sampler: number;
  readonly requests: number;
}

/** The families whose vLLM model file has the layer structure above. */
const LLAMA_LIKE = new Set(['llama', 'qwen2', 'qwen3', 'mistral']);

const VOCAB_PADDING = 64;

/** The largest live total inside one decoder layer of T tokens (bytes). */
function forwardPeak(meta: ModelMeta, p: VllmProfileInput): number {
  const T = p.tokens;
  const tp = p.tensorParallelSize;
  const H = meta.hidden;
  const q = (meta.heads * meta.headDim) / tp;
  const kv = Math.max(1, Math.floor(meta.kvHeads / tp)) * meta.headDim;
  const I = meta.intermediate / tp;
  const reduce = tp > 1 ? H : 0;
  // Qwen3's q_norm/k_norm make new per-head tensors of q and k before attention.
  const qkNorm = meta.family === 'qwen3' ? q + kv : 0;
  const input = p.eager ? H : 0;
  // Attention: residual, the normed input (eager), qkv, the q/k norms, the output buffer, o_proj's
  // output and its all-reduce copy.
  const attention = H + input + (q + 2 * kv) + qkNorm + q + H + reduce;
  // MLP: residual, the normed input (eager), gate_up and SiluAndMul's output; then down_proj's
  // output (and its all-reduce copy) beside the activation.
  const mlpAct = H + input + 2 * I + I;
  const mlpDown = H + input + I + H + reduce;
  return T * Math.max(attention, mlpAct, mlpDown) * p.dtypeBytes;
}

/** `_dummy_sampler_run`: the live total while `apply_top_k_top_p` scatters its result (bytes). */
function samplerPeak(meta: ModelMeta, p: VllmProfileInput, requests: number): number {
  const V = meta.vocab;
  const padded = Math.ceil(V / VOCAB_PADDING) * VOCAB_PADDING;
  // The forward's hidden states stay referenced (profile_run's local), with the sampled rows and
  // torch.rand_like of them.
  const hidden = p.tokens * meta.hidden * p.dtypeBytes + 2 * requests * meta.hidden * p.dtypeBytes;
  const logits = requests * padded * p.dtypeBytes;
  // float32 copy 4 + sorted 4 + indices 8 + top-k mask 1 + sorted softmax 4 + top-p mask 1 + scatter 4.
  const sort = requests * V * (4 + 4 + 8 + 1 + 4 + 1 + 4);
  const gather = p.tensorParallelSize > 1 ? (requests * padded * p.dtypeBytes) / p.tensorParallelSize : 0;
  return hidden + Math.max(logits + sort, logits + gather);
}

/**
 * The peak of vLLM V1's profiling run above the weights ("PyTorch activation peak memory"), for
 * the decoders whose vLLM model file has Llama's structure (Llama, Mistral, Qwen2, Qwen3); other
 * families, mixtures of experts and MLA are an error (their measured figure can be given instead).
 *
 * @example
 * ```ts
 * import { llm } from 'vram-ts';
 * import { vllmProfilePeak } from 'vram-ts/internals';
 * const p = vllmProfilePeak(llm('qwen2.5-0.5b').meta!, { tokens: 8192, seqs: 256, tensorParallelSize: 1, dtypeBytes: 2, eager: false });
 * console.log(p.at); // sampler
 * ```
 */
export function vllmProfilePeak(meta: ModelMeta, p: VllmProfileInput): VllmProfile {
  if (!LLAMA_LIKE.has(meta.family) || meta.moe !== undefined || meta.mla !== undefined || !meta.gatedMlp)
    fail('not-modelled', `vLLM's profiling run is modelled for ${[...LLAMA_LIKE].join(', ')} decoders: give measured.activationPeakBytes`, {
      path: ['model'],
      received: meta.family,
    });
  const requests = Math.min(p.seqs, p.tokens);
  const forward = forwardPeak(meta, p);
  const sampler = samplerPeak(meta, p, requests);
  return { bytes: Math.max(forward, sampler), at: sampler > forward ? 'sampler' : 'forward', forward, sampler, requests };
}
