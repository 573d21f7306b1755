import { estimate, type EstimateOptions } from '../estimate.js';
import { generationOptions, grpoOptions, korthikantiOptions, kvCacheOptions } from '../options.js';
import { validate } from '../validate.js';
import { fail } from '../errors.js';
import type { Layer, ModelMeta } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import { add, floorDiv, max, mul, sub, sum } from '../sym/ops.js';
import { bytesOf, checkDType, type DType } from '../tensor/dtype.js';

/** Options of {@link kvCache}. */
export interface KvCacheOptions {
  readonly batch: Dim;
  readonly seq: Dim;
  /** Element type of the cache (default bfloat16; fp8/int8 caches take 1 byte per element). */
  readonly dtype?: DType;
}

/**
 * The decoder facts a catalog model or fromHFConfig records; a VramError for anything else.
 *
 * @example
 * ```ts
 * import { decoderMeta, llm } from 'vram-ts';
 * console.log(decoderMeta(llm('llama-3-8b')).kvHeads); // 8
 * ```
 */
export function decoderMeta(model: Layer): ModelMeta {
  const meta = model.kind === 'module' ? model.meta : undefined;
  if (meta === undefined || meta.kind !== 'decoder') fail('not-a-decoder', 'this needs a decoder LLM (fromHFConfig or the LLM catalog)', { path: ['model'] });
  return meta;
}

/** min(a, b) = a + b - max(a, b), exact for numbers and expressions. */
function min(a: Dim, b: Dim): Dim {
  return sub(add(a, b), max(a, b));
}

/**
 * Bytes of the KV cache: 2 (keys and values) × layers × kv heads × head dim × positions ×
 * batch × bytes per element, positions capped by the sliding window where the model has one
 * (Mistral, Phi-3), layer by layer where only some layers slide (Gemma 2/3: `layerWindows`). GQA/MQA models cache only their kv heads; a tensor-parallel rank's model
 * (`tensorParallel`) its share of them. Multi-head latent attention (DeepSeek-V2/V3) caches its
 * latent, `kv_lora_rank + qk_rope_head_dim` per token and layer (ModelMeta.mla), as transformers
 * 5.x and MLA-aware engines (vLLM, SGLang) do.
 *
 * @example
 * ```ts
 * import { kvCache, llm } from 'vram-ts';
 * console.log(kvCache(llm('llama-3-8b'), { batch: 1, seq: 1, dtype: 'bfloat16' })); // 131072
 * ```
 */
export function kvCache(model: Layer, options: KvCacheOptions & { readonly batch: number; readonly seq: number }): number;
export function kvCache(model: Layer, options: KvCacheOptions): Dim;
export function kvCache(model: Layer, options: KvCacheOptions): Dim {
  validate(options, kvCacheOptions);
  const meta = decoderMeta(model);
  const dtype = checkDType(options.dtype ?? 'bfloat16', ['dtype']);
  // A tensor-parallel rank caches its own kv heads (kvHeads / t).
  const kvHeads = meta.kvHeads / (meta.tensorParallel?.size ?? 1);
  // DeepSeek's multi-head latent attention: the latent (kv_lora_rank + qk_rope_head_dim) per token and layer, whatever the head count.
  if (meta.mla !== undefined) return bytesOf(mul(mul(meta.layers * meta.mla.hfCachePerToken, options.seq), options.batch), dtype);
  if (meta.layerWindows !== undefined) {
    // Gemma 2/3, Qwen3 layer_types: each sliding layer keeps at most its window, the global ones every position.
    const counts = new Map<number | null, number>();
    for (const w of meta.layerWindows) counts.set(w, (counts.get(w) ?? 0) + 1);
    const positions = sum([...counts].map(([w, n]) => mul(n, w === null ? options.seq : min(options.seq, w))));
    return bytesOf(mul(mul(2 * kvHeads * meta.headDim, positions), options.batch), dtype);
  }
  const positions = meta.slidingWindow === undefined ? options.seq : min(options.seq, meta.slidingWindow);
  return bytesOf(mul(mul(2 * meta.layers * kvHeads * meta.headDim, positions), options.batch), dtype);
}

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
  // One layer's keys and values exist twice while torch.cat grows them.
  const growing = (kvCache(model, { batch, seq: total - 1, dtype }) as number) / meta.layers;
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

/** Options of {@link korthikanti}. */
export interface KorthikantiOptions {
  readonly seq: Dim;
  readonly batch: Dim;
  readonly hidden: number;
  readonly heads: number;
  /** Tensor-parallel size t (default 1). */
  readonly tensorParallel?: number;
  readonly sequenceParallel?: boolean;
  readonly recompute?: 'none' | 'selective' | 'full';
}

/**
 * Activation bytes per transformer layer from Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models", Table 2), 16-bit activations: sbh(34 + 5as/h)
 * without parallelism; sbh(10 + 24/t + 5as/(ht)) with tensor parallelism; sbh(34/t +
 * 5as/(ht)) with sequence parallelism too; selective recomputation drops the 5as/h terms;
 * full recomputation keeps 2sbh (2sbh/t with sequence parallelism).
 *
 * @example
 * ```ts
 * import { korthikanti } from 'vram-ts';
 * console.log(korthikanti({ seq: 2048, batch: 1, hidden: 4096, heads: 32 })); // 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)
 * ```
 */
export function korthikanti(options: KorthikantiOptions): Dim {
  validate(options, korthikantiOptions);
  const t = options.tensorParallel ?? 1;
  const sp = options.sequenceParallel ?? false;
  const { hidden: h, heads: a } = options;
  const sbh = mul(mul(options.seq, options.batch), h);
  // 5as/h · sbh = 5·a·s²·b.
  const attention = mul(mul(mul(options.seq, options.seq), options.batch), 5 * a);
  const divide = (d: Dim, k: number): Dim => (typeof d === 'number' ? d / k : floorDiv(d, k));
  switch (options.recompute ?? 'none') {
    case 'full':
      return divide(mul(sbh, 2), sp ? t : 1);
    case 'selective':
      return sp ? divide(mul(sbh, 34), t) : t === 1 ? mul(sbh, 34) : add(mul(sbh, 10), divide(mul(sbh, 24), t));
    default:
      if (t === 1) return add(mul(sbh, 34), attention);
      return sp ? add(divide(mul(sbh, 34), t), divide(attention, t)) : add(add(mul(sbh, 10), divide(mul(sbh, 24), t)), divide(attention, t));
  }
}

/** Options of {@link grpoStep}. */
export interface GrpoOptions extends Omit<EstimateOptions, 'input' | 'mode'> {
  /** Prompts per step. */
  readonly prompts: number;
  /** Completions sampled per prompt (the group G). */
  readonly group: number;
  /** Prompt tokens. */
  readonly prompt: number;
  /** Completion tokens (L). */
  readonly completion: number;
  /** Keep a frozen reference model for the KL term (default true). */
  readonly reference?: boolean;
  /** KV cache element type (default: the model's dtype). */
  readonly kvDtype?: DType;
  /** Sequences per training (and reference) forward; the rest is gradient accumulation (default: all). */
  readonly microBatch?: number;
}

/** One phase of a GRPO step and what is resident beside it. */
export interface GrpoPhase {
  readonly peak: number;
  readonly detail: string;
}

/** A GRPO step, phase by phase. */
export interface GrpoEstimate {
  /** Sequences in the step: prompts × group. */
  readonly sequences: number;
  readonly generation: GrpoPhase;
  readonly reference: GrpoPhase;
  readonly training: GrpoPhase;
  /** The largest of the three. */
  readonly peak: number;
}

/**
 * A GRPO-style RL step on one GPU (TRL's GRPOTrainer without vLLM): generate `group`
 * completions per prompt with a KV cache, score them with a frozen reference model, then a
 * training step over the prompt + completion sequences. The policy's training state
 * (weights, gradients from the last step, optimizer state) stays resident throughout, and so
 * do the reference weights.
 *
 * @example
 * ```ts
 * import { grpoStep, llm } from 'vram-ts';
 * const g = grpoStep(llm('qwen2.5-0.5b'), { prompts: 1, group: 8, prompt: 256, completion: 1024, precision: 'bf16' });
 * console.log(g.peak === Math.max(g.generation.peak, g.reference.peak, g.training.peak)); // true
 * ```
 */
export function grpoStep(model: Layer, options: GrpoOptions): GrpoEstimate {
  validate(options, grpoOptions);
  const { prompts, group, prompt, completion, reference = true, kvDtype, microBatch, ...rest } = options;
  const sequences = prompts * group;
  const length = prompt + completion;
  const micro = Math.min(sequences, microBatch ?? sequences);
  const train = estimate(model, { ...rest, input: [micro, length], mode: 'train', timeline: false });
  const steady = train.steps.steady!;
  const resident = steady.baseline as number;
  const weights = sum([train.bytes.parameters, train.bytes.buffers]) as number;
  const referenceWeights = reference ? weights : 0;
  const gen = generation(model, { ...rest, batch: sequences, prompt, generate: completion, ...(kvDtype !== undefined ? { kvDtype } : {}) });
  const refRun = estimate(model, { ...rest, input: [micro, length], mode: 'inference', timeline: false });
  const refActivations = (refRun.bytes.peak as number) - (refRun.steps.inference!.baseline as number);
  const generationPeak = resident + referenceWeights + (gen.decode.peak - gen.weights);
  const referencePeak = resident + referenceWeights + refActivations;
  const trainingPeak = (train.bytes.peak as number) + referenceWeights;
  return {
    sequences,
    generation: { peak: generationPeak, detail: `policy state ${formatBytesInline(resident)} + reference weights ${formatBytesInline(referenceWeights)} + KV cache ${formatBytesInline(gen.decode.kvCache)} for ${sequences} × ${length} tokens + decode step` },
    reference: { peak: referencePeak, detail: `policy state + reference weights + the reference model's no-grad forward over ${micro} × ${length} tokens (${formatBytesInline(refActivations)})` },
    training: { peak: trainingPeak, detail: `the policy's training step over ${micro} × ${length} tokens at a time, reference weights resident` },
    peak: Math.max(generationPeak, referencePeak, trainingPeak),
  };
}

function formatBytesInline(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}
