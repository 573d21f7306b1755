/** Generation with a KV cache: the prefill and decode phases, each forward simulated by estimate(). */
import { estimate } from '../estimate.js';
import type { EstimateOptions } from '../estimate-types.js';
import { generationOptions } from '../estimate-options.js';
import { validate } from '../validate.js';
import { sum } from '../sym/ops.js';
import type { Layer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import { decoderMeta, kvCache } from './kv-cache.js';

/** Options of {@link generation}. */
export interface GenerationOptions extends Omit<EstimateOptions, 'input' | 'mode'> {
  readonly batch: number;
  /** Prompt tokens (prefill length). */
  readonly prompt: number;
  /** Tokens generated after the prompt. */
  readonly generate: number;
  /** KV cache element type (default: the model's dtype). */
  readonly kvDtype?: DType;
}

/** One phase of generation. */
export interface GenerationPhase {
  /** Peak bytes (allocated, as estimate counts them). */
  readonly peak: number;
  readonly kvCache: number;
  /** The forward's own peak above its baseline (weights, buffers, input). */
  readonly forwardActivations: number;
}

/** What generating with a KV cache needs at its two phases. */
export interface GenerationEstimate {
  readonly weights: number;
  readonly prefill: GenerationPhase;
  readonly decode: GenerationPhase;
}

/**
 * Generation with a KV cache (Hugging Face `generate` with DynamicCache), phase by phase:
 * - prefill: the no-grad forward over the prompt (simulated), with the cache of the prompt
 *   held on top;
 * - decode: at the last step the cache holds prompt + generated − 1 positions; `torch.cat`
 *   makes the grown key and value of one layer while the old ones still exist, and the
 *   one-token forward (simulated) runs beside it.
 *
 * @example
 * ```ts
 * import { generation, llm } from 'vram-ts';
 * const g = generation(llm('qwen2.5-0.5b'), { batch: 8, prompt: 512, generate: 1024, dtype: 'bfloat16' });
 * console.log(g.decode.kvCache > g.prefill.kvCache); // true
 * ```
 */
export function generation(model: Layer, options: GenerationOptions): GenerationEstimate {
  validate(options, generationOptions);
  const meta = decoderMeta(model);
  const { batch, prompt, generate, kvDtype, ...rest } = options;
  const base = { ...rest, mode: 'inference' as const, timeline: false };
  const prefillRun = estimate(model, { ...base, input: [batch, prompt] });
  const decodeRun = estimate(model, { ...base, input: [batch, 1] });
  const dtype = kvDtype ?? prefillRun.ir.settings.paramDtype;
  const weights = sum([prefillRun.bytes.parameters, prefillRun.bytes.buffers]) as number;
  const forward = (r: typeof prefillRun) => (r.bytes.peak as number) - (r.steps.inference!.baseline as number);
  const prefillCache = kvCache(model, { batch, seq: prompt, dtype }) as number;
  const total = prompt + generate;
  const decodeCache = kvCache(model, { batch, seq: total, dtype }) as number;
  // One layer's keys and values exist twice while torch.cat grows them (nothing to grow for one token).
  const growing = total > 1 ? (kvCache(model, { batch, seq: total - 1, dtype }) as number) / meta.layers : 0;
  const decodeInput = decodeRun.bytes.input as number;
  return {
    weights,
    prefill: { peak: (prefillRun.bytes.peak as number) + prefillCache, kvCache: prefillCache, forwardActivations: forward(prefillRun) },
    decode: {
      peak: weights + decodeInput + decodeCache + Math.max(growing, forward(decodeRun)),
      kvCache: decodeCache,
      forwardActivations: forward(decodeRun),
    },
  };
}
