/** The KV cache of a decoder (its ModelMeta): bytes for a batch and a length, no trace needed. */
import { checkModel } from '../estimate.js';
import { kvCacheOptions } from '../estimate-options.js';
import { show, validate } from '../validate.js';
import { fail } from '../errors.js';
import { LIMITS } from '../limits.js';
import type { Layer, ModelMeta } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import { add, max, mul, sub, sum } from '../sym/ops.js';
import { bytesOf, checkDType, type DType } from '../tensor/dtype.js';
import { sizeArg } from '../tensor/size.js';

/** Options of {@link kvCache}. */
export interface KvCacheOptions {
  readonly batch: Dim;
  readonly seq: Dim;
  /** Element type of the cache (default bfloat16; fp8/int8 caches take 1 byte per element). */
  readonly dtype?: DType;
}

const count = (value: unknown): boolean => typeof value === 'number' && Number.isSafeInteger(value) && value >= 1;

/** Per-layer windows: a list without holes of window sizes and nulls (every always skips holes, so a loop). */
function windowsOk(windows: unknown): boolean {
  if (!Array.isArray(windows) || windows.length > LIMITS.layers) return false;
  for (let i = 0; i < windows.length; i += 1) if (!Object.hasOwn(windows, i) || !(windows[i] === null || count(windows[i]))) return false;
  return true;
}

/** The first field of a decoder's facts the KV cache reads that is not as the builders record it, or undefined. */
function metaProblem(meta: ModelMeta): string | undefined {
  const fields = meta as unknown as Record<string, unknown>;
  const bad = ['layers', 'kvHeads', 'headDim'].find((key) => !count(fields[key]));
  if (bad !== undefined) return bad;
  if (meta.slidingWindow !== undefined && !count(meta.slidingWindow)) return 'slidingWindow';
  const windows: unknown = meta.layerWindows;
  if (windows !== undefined && !windowsOk(windows)) return 'layerWindows';
  const tp: unknown = meta.tensorParallel;
  if (tp !== undefined && !(typeof tp === 'object' && tp !== null && count((tp as { size?: unknown }).size))) return 'tensorParallel';
  const mla: unknown = meta.mla;
  if (mla !== undefined && !(typeof mla === 'object' && mla !== null && count((mla as { hfCachePerToken?: unknown }).hfCachePerToken))) return 'mla';
  return undefined;
}

/**
 * The decoder facts a catalog model or fromHFConfig records; a VramError for anything else
 * (a value that is no model, a model that is no decoder, facts that are not as builders record them).
 *
 * @example
 * ```ts
 * import { decoderMeta, llm } from 'vram-ts';
 * console.log(decoderMeta(llm('llama-3-8b')).kvHeads); // 8
 * ```
 */
export function decoderMeta(model: Layer): ModelMeta {
  checkModel(model);
  const meta: unknown = model.kind === 'module' ? model.meta : undefined;
  if (typeof meta !== 'object' || meta === null || (meta as { kind?: unknown }).kind !== 'decoder')
    fail('not-a-decoder', 'this needs a decoder LLM (fromHFConfig or the LLM catalog)', {
      path: ['model'],
      expected: 'a decoder model',
      received: show(model),
    });
  const problem = metaProblem(meta as ModelMeta);
  if (problem !== undefined)
    fail('bad-model', `the decoder's ${problem} is not as its builder records it`, {
      path: ['model', 'meta', problem],
      received: show((meta as Record<string, unknown>)[problem]),
    });
  return meta as ModelMeta;
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
  // An expression must be one all the way down (the schema's dim looks at its kind only).
  sizeArg(options.batch, ['batch']);
  sizeArg(options.seq, ['seq']);
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
