/**
 * SGLang's KV pool at start-up (python/sglang/srt/model_executor/model_runner.py
 * `profile_max_num_token`, model_runner_kv_cache_mixin.py `_profile_available_bytes`): unlike vLLM,
 * the budget is a fraction of the memory FREE before the weights load, and what the weights took
 * is charged against it: `rest = free_after_load − free_before_load × (1 − mem_fraction_static)`
 * (both in GiB, `get_available_gpu_memory`), `max_total_num_tokens = int(rest × 2^30) // cell_size`,
 * with `cell_size = kv_heads_per_rank × (head_dim + v_head_dim) × layers × kv_size` (MLA:
 * `(kv_lora_rank + qk_rope_head_dim) × layers × kv_size`). Weights + pool ≈ mem_fraction_static ×
 * free memory; the remaining fraction is left for activations and CUDA graphs.
 */
import { fail } from '../errors.js';
import { decoderModel, exactBytes, optionsObject } from '../catalog/decoder-check.js';
import { gpu } from '../gpus/catalog.js';
import type { ModuleLayer } from '../nn/types.js';
import { integer, number, object, oneOf, show, string, validate } from '../validate.js';
import { vllmModelWeights } from './vllm-weights.js';

/** Options of {@link sglangEngine}: SGLang's server arguments in camelCase. */
export interface SglangOptions {
  /** A catalog GPU whose torch-reported total is recorded; or `totalBytes`. */
  readonly gpu?: string;
  readonly totalBytes?: number;
  /** Free memory before the weights load (default: the total, an empty GPU; a colocated trainer's memory is not free). */
  readonly freeBytes?: number;
  /** `--mem-fraction-static`: its default depends on the release, the GPU and TP (server_args.py), so it is asked for. */
  readonly memFractionStatic: number;
  /** `--tp-size` (default 1). */
  readonly tensorParallelSize?: number;
  /** `--kv-cache-dtype` (default `auto`: the model's dtype). */
  readonly kvCacheDtype?: 'auto' | 'bfloat16' | 'float16' | 'fp8_e4m3' | 'fp8_e5m2';
  /** "Load weight end … mem usage=X GB": the weights on this rank (default: the parallel-layer rule vLLM's layers share). */
  readonly weightsBytes?: number;
}

/** SGLang's engine at start-up. */
export interface SglangEngine {
  readonly freeBefore: number;
  readonly weights: number;
  /** The pool's bytes: `free_after_load − free_before_load × (1 − mem_fraction_static)`. */
  readonly restBytes: number;
  /** Bytes of one token over every layer on this rank. */
  readonly cellSize: number;
  /** `max_total_num_tokens`. */
  readonly tokens: number;
  /** What SGLang holds once started, before activations and graphs: weights and the pool. */
  readonly footprint: number;
  readonly starts: boolean;
  readonly error?: string;
}

const shape = object({
  fields: {
    gpu: string,
    totalBytes: number(1),
    freeBytes: number(0),
    memFractionStatic: number(Number.MIN_VALUE, 1),
    tensorParallelSize: integer(1),
    kvCacheDtype: oneOf(['auto', 'bfloat16', 'float16', 'fp8_e4m3', 'fp8_e5m2'], 'kv cache dtype'),
    weightsBytes: number(0),
  },
  required: ['memFractionStatic'],
});

const GiB = 2 ** 30;

/**
 * SGLang's KV pool for one rank: the tokens `profile_max_num_token` gives and whether the server
 * starts ("Not enough memory. Please try to increase --mem-fraction-static." when the pool is empty).
 *
 * @example
 * ```ts
 * import { llm, sglangEngine } from 'vram-ts';
 * const s = sglangEngine(llm('qwen2.5-0.5b'), { totalBytes: 80 * 2 ** 30, memFractionStatic: 0.5 });
 * console.log(s.cellSize); // 12288
 * ```
 */
export function sglangEngine(model: ModuleLayer, options: SglangOptions): SglangEngine {
  validate(optionsObject(options, ['options']), shape);
  const meta = decoderModel(model, ['model'], 'sglangEngine').meta;
  const tp = options.tensorParallelSize ?? 1;
  if (meta.heads % tp !== 0)
    fail('bad-option', `the attention heads (${meta.heads}) must be divisible by the tensor parallel size`, {
      path: ['tensorParallelSize'],
      received: show(tp),
    });
  if (options.gpu !== undefined && options.totalBytes !== undefined)
    fail('bad-option', 'give the GPU or its total bytes, not both', { path: ['totalBytes'], received: show(options.totalBytes) });
  const total =
    options.totalBytes ??
    (options.gpu !== undefined
      ? (gpu(options.gpu).torchTotal?.bytes ?? fail('not-modelled', "this GPU's torch-reported total is not recorded: give totalBytes", { path: ['gpu'] }))
      : fail('missing-option', 'give gpu or totalBytes', { path: ['totalBytes'] }));
  const freeBefore = options.freeBytes ?? total;
  const weights = options.weightsBytes ?? vllmModelWeights(model, meta, tp).bytes;
  const dtype = options.kvCacheDtype ?? 'auto';
  const kvSize = dtype === 'auto' ? (model.dtype === 'float32' ? 4 : 2) : dtype.startsWith('fp8') ? 1 : 2;
  const cellSize = exactBytes(
    meta.mla !== undefined
      ? meta.mla.latentPerToken * meta.layers * kvSize
      : Math.max(1, Math.floor(meta.kvHeads / tp)) * 2 * meta.headDim * meta.layers * kvSize,
    ['model', 'meta'],
    "a token's KV cell",
  );
  // get_available_gpu_memory reports GiB as a float; the product goes back to bytes before the division.
  const restGiB = (freeBefore - weights) / GiB - (freeBefore / GiB) * (1 - options.memFractionStatic);
  const tokens = Math.max(0, Math.floor(Math.trunc(restGiB * GiB) / cellSize));
  const restBytes = restGiB * GiB;
  const error = tokens <= 0 ? 'Not enough memory. Please try to increase --mem-fraction-static.' : undefined;
  return {
    freeBefore,
    weights,
    restBytes,
    cellSize,
    tokens,
    footprint: weights + Math.max(0, restBytes),
    starts: error === undefined,
    ...(error !== undefined ? { error } : {}),
  };
}
