/** The KV cache of a decoder (its ModelMeta): bytes for a batch and a length, no trace needed. */
import { kvCacheOptions } from '../estimate-options.js';
import { validate } from '../validate.js';
import { fail } from '../errors.js';
import type { Layer, ModelMeta } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import { add, max, mul, sub, sum } from '../sym/ops.js';
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
