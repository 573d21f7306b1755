/**
 * vLLM's KV-cache pool as vLLM computes it at start-up (V1 engine: vllm/v1/worker/gpu_worker.py
 * `determine_available_memory`, vllm/utils/mem_utils.py `memory_profiling`, vllm/v1/core/
 * kv_cache_utils.py `get_num_blocks`, vllm/v1/kv_cache_interface.py page sizes): a fraction of the
 * GPU's TOTAL memory, less the weights, the profiling forward's activation peak and the memory
 * outside PyTorch (and, from v0.21, the CUDA graphs' estimate), cut into blocks of `blockSize`
 * tokens of every attention layer. What vLLM measures at start-up (the weights as loaded, the
 * profiled peak, non-torch memory, the graphs) is given by the caller here — the figures vLLM logs —
 * so every number this returns follows from a rule with its source; nothing is guessed.
 */
import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { ModelMeta, ModuleLayer } from '../nn/types.js';
import { show } from '../validate.js';

/** The vLLM releases whose start-up rule was read (V1 engine); the rule's variants by release. */
export const VLLM_RELEASES = deepFreeze(['0.8.0', '0.21.0'] as const);

/** The release followed when none is asked for: the newest read. */
export const DEFAULT_VLLM = '0.21.0';

/** KV cache element types (`--kv-cache-dtype`): `auto` is the model's dtype. */
export type KvCacheDtype = 'auto' | 'bfloat16' | 'float16' | 'float32' | 'fp8' | 'fp8_e4m3' | 'fp8_e5m2';

/** What vLLM measures at start-up and logs, in bytes (the "Memory profiling" / "Model loading took" lines). */
export interface VllmMeasured {
  /** "Model loading took X GiB": the weights as loaded on this rank. */
  readonly weightsBytes: number;
  /** "PyTorch activation peak memory takes X GiB": the profiling forward's peak above the weights. */
  readonly activationPeakBytes: number;
  /** "non_torch_memory takes X GiB": NCCL, cuBLAS workspaces, the attention backend's buffers. */
  readonly nonTorchBytes: number;
  /** The CUDA graphs' estimate subtracted from v0.21 unless `enforceEager` (default 0). */
  readonly cudaGraphBytes?: number;
}

/** Options of {@link vllmEngine}: vLLM's engine arguments in camelCase. */
export interface VllmOptions {
  /** Total device memory in bytes as vLLM reads it (`torch.cuda.mem_get_info()[1]`; a log's GiB figure is rounded, so any number is taken). */
  readonly totalBytes: number;
  /** `--gpu-memory-utilization` (default 0.9; 0.92 from v0.21.0). */
  readonly gpuMemoryUtilization?: number;
  /** `--max-model-len` (default: the model's positions). */
  readonly maxModelLen?: number;
  /** `--tensor-parallel-size` (default 1): KV heads per rank `max(1, kv_heads // tp)`. */
  readonly tensorParallelSize?: number;
  /** `--kv-cache-dtype` (default `auto`: the model's dtype). */
  readonly kvCacheDtype?: KvCacheDtype;
  /** `--block-size` (default 16). */
  readonly blockSize?: number;
  /** `--kv-cache-memory`: the pool's bytes, overriding the utilization rule. */
  readonly kvCacheMemoryBytes?: number;
  /** `--enforce-eager`: no CUDA graphs (and from v0.21 no graph estimate). */
  readonly enforceEager?: boolean;
  /** Free memory at start-up (default: the total, an empty GPU). */
  readonly freeBytes?: number;
  /** The vLLM release whose rule to follow (default {@link DEFAULT_VLLM}). */
  readonly release?: string;
  /** What vLLM measured at start-up (its log lines). */
  readonly measured: VllmMeasured;
}

/** vLLM's engine at start-up: its budget, its KV pool, whether it starts, and its log lines. */
export interface VllmEngine {
  readonly release: string;
  /** `ceil(total × gpu_memory_utilization)`. */
  readonly requested: number;
  readonly weights: number;
  readonly activationPeak: number;
  readonly nonTorch: number;
  readonly cudaGraphs: number;
  readonly kvCache: {
    /** "Available KV cache memory". */
    readonly bytes: number;
    /** Blocks of every attention layer (`available // page // layers`). */
    readonly blocks: number;
    /** "GPU KV cache size: N tokens". */
    readonly tokens: number;
    /** Bytes of one token over every layer on this rank. */
    readonly bytesPerToken: number;
    /** Bytes of one block of one layer (`2 × block_size × kv_heads × head_size × dtype`; MLA: one latent). */
    readonly pageBytes: number;
  };
  /** "Maximum concurrency for `maxModelLen` tokens per request". */
  readonly maxConcurrency: number;
  readonly maxModelLen: number;
  /** Whether the engine starts; vLLM's own error when it does not. */
  readonly starts: boolean;
  readonly error?: string;
  /** The start-up lines vLLM would print (V1's format). */
  readonly log: readonly string[];
}

const KV_BYTES: Readonly<Record<Exclude<KvCacheDtype, 'auto'>, number>> = { bfloat16: 2, float16: 2, float32: 4, fp8: 1, fp8_e4m3: 1, fp8_e5m2: 1 };

function before(release: string, than: string): boolean {
  const a = release.split('.').map(Number);
  const b = than.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) < (b[i] ?? 0);
  return false;
}

function positive(value: unknown, path: readonly string[], integer = true): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (integer && !Number.isSafeInteger(value)))
    fail('bad-option', `must be ${integer ? 'an integer' : 'a number'} ≥ 0`, { path, received: show(value) });
}

/** The model's attention facts vLLM's page size reads. */
function attentionOf(model: ModuleLayer): ModelMeta {
  return (
    model.meta ??
    fail('not-modelled', 'vllmEngine needs a decoder from the catalog (its meta gives the layers and KV heads)', { path: ['model'], received: model.className })
  );
}

/**
 * One layer's page: `2 × block_size × kv_heads_per_rank × head_size × dtype_size` (FullAttentionSpec), or
 * MLA's single latent `block_size × (kv_lora_rank + qk_rope_head_dim) × dtype_size` (vllm/v1/kv_cache_interface.py).
 * Every layer is counted as full attention: a sliding-window layer's own pool rule is not modelled yet.
 *
 * @example
 * ```ts
 * import { llm, vllmPageBytes } from 'vram-ts';
 * // Qwen2.5-0.5B: 2 KV heads of 64 in bf16, 16-token blocks.
 * console.log(vllmPageBytes(llm('qwen2.5-0.5b').meta!, { blockSize: 16, tensorParallelSize: 1, dtypeBytes: 2 })); // 8192
 * ```
 */
export function vllmPageBytes(
  meta: ModelMeta,
  options: { readonly blockSize: number; readonly tensorParallelSize: number; readonly dtypeBytes: number },
): number {
  if (meta.mla !== undefined) return options.blockSize * meta.mla.latentPerToken * options.dtypeBytes;
  const kvHeads = Math.max(1, Math.floor(meta.kvHeads / options.tensorParallelSize));
  return 2 * options.blockSize * kvHeads * meta.headDim * options.dtypeBytes;
}

function checkOptions(meta: ModelMeta, o: VllmOptions): void {
  positive(o.totalBytes, ['totalBytes'], false);
  const util = o.gpuMemoryUtilization;
  if (util !== undefined && !(typeof util === 'number' && util > 0 && util <= 1))
    fail('bad-option', 'gpu_memory_utilization is a fraction of the GPU', { path: ['gpuMemoryUtilization'], expected: 'in (0, 1]', received: show(util) });
  const tp = o.tensorParallelSize ?? 1;
  positive(tp, ['tensorParallelSize']);
  if (tp < 1 || meta.heads % tp !== 0)
    fail('bad-option', `the attention heads (${meta.heads}) must be divisible by the tensor parallel size`, {
      path: ['tensorParallelSize'],
      received: show(tp),
    });
  if ((meta.layerWindows ?? []).some((w) => w !== null) || meta.slidingWindow !== undefined)
    fail('not-modelled', "sliding-window layers' own KV pool (SlidingWindowSpec) is not modelled yet", { path: ['model'] });
  for (const key of ['weightsBytes', 'activationPeakBytes', 'nonTorchBytes'] as const) positive(o.measured?.[key], ['measured', key], false);
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}

/**
 * vLLM's start-up arithmetic for one rank (V1): the requested budget, the KV pool, its blocks and
 * tokens, the maximum concurrency for `maxModelLen`, whether the engine starts (vLLM's error texts),
 * and the log lines. The measured figures (weights as loaded, the profiled activation peak,
 * non-torch memory) are inputs: vLLM reads them off the GPU.
 *
 * @example
 * ```ts
 * import { llm, vllmEngine } from 'vram-ts';
 * const e = vllmEngine(llm('qwen2.5-0.5b'), {
 *   totalBytes: 80 * 2 ** 30,
 *   gpuMemoryUtilization: 0.3,
 *   measured: { weightsBytes: 0.93 * 2 ** 30, activationPeakBytes: 1.4 * 2 ** 30, nonTorchBytes: 0.1 * 2 ** 30 },
 * });
 * console.log(e.kvCache.bytesPerToken); // 12288
 * ```
 */
export function vllmEngine(model: ModuleLayer, options: VllmOptions): VllmEngine {
  const meta = attentionOf(model);
  checkOptions(meta, options);
  const release = options.release ?? DEFAULT_VLLM;
  if (before(release, VLLM_RELEASES[0]))
    fail('unsupported-release', "vLLM's V0 engine rule is not modelled", { path: ['release'], expected: `≥ ${VLLM_RELEASES[0]}`, received: show(release) });
  const graphsCounted = !before(release, '0.21.0') && options.enforceEager !== true;
  const util = options.gpuMemoryUtilization ?? (before(release, '0.21.0') ? 0.9 : 0.92);
  const tp = options.tensorParallelSize ?? 1;
  const blockSize = options.blockSize ?? 16;
  const dtype = options.kvCacheDtype ?? 'auto';
  const dtypeBytes = dtype === 'auto' ? (model.dtype === 'float32' ? 4 : 2) : KV_BYTES[dtype];
  const maxModelLen =
    options.maxModelLen ?? meta.maxPositions ?? fail('bad-option', 'the model records no max positions: give maxModelLen', { path: ['maxModelLen'] });
  if (meta.maxPositions !== undefined && maxModelLen > meta.maxPositions)
    fail('bad-option', `max_model_len ${maxModelLen} is beyond the model's max_position_embeddings (${meta.maxPositions}) and no rope scaling is modelled`, {
      path: ['maxModelLen'],
      expected: `≤ ${meta.maxPositions}`,
      received: String(maxModelLen),
    });
  const { weightsBytes, activationPeakBytes, nonTorchBytes } = options.measured;
  const cudaGraphs = graphsCounted ? (options.measured.cudaGraphBytes ?? 0) : 0;
  const requested = Math.ceil(options.totalBytes * util);
  const available = options.kvCacheMemoryBytes ?? requested - weightsBytes - activationPeakBytes - nonTorchBytes - cudaGraphs;
  const pageBytes = vllmPageBytes(meta, { blockSize, tensorParallelSize: tp, dtypeBytes });
  const layers = meta.layers;
  const blocks = available > 0 ? Math.floor(Math.floor(available / pageBytes) / layers) : 0;
  const tokens = blocks * blockSize;
  const bytesPerToken = (pageBytes / blockSize) * layers;
  const needed = Math.ceil(maxModelLen / blockSize) * pageBytes * layers;
  const free = options.freeBytes ?? options.totalBytes;
  let error: string | undefined;
  if (free < requested)
    error = `Free memory on device (${gib(free)}/${gib(options.totalBytes)}) on startup is less than desired GPU memory utilization (${util}, ${gib(requested)}). Decrease GPU memory utilization or reduce GPU memory used by other processes.`;
  else if (available <= 0) error = 'No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.';
  else if (needed > available)
    error = `To serve at least one request with the models's max seq len (${maxModelLen}), (${gib(needed)} KV cache is needed, which is larger than the available KV cache memory (${gib(available)}). Based on the available memory, the estimated maximum model length is ${tokens}. Try increasing \`gpu_memory_utilization\` or decreasing \`max_model_len\` when initializing the engine.`;
  // get_max_concurrency_for_kv_cache_config: the pool's blocks over one request's (cdiv(max_model_len, block_size)).
  const maxConcurrency = blocks / Math.ceil(maxModelLen / blockSize);
  const log = [
    `Model loading took ${gib(weightsBytes)}`,
    `Available KV cache memory: ${gib(Math.max(0, available))}`,
    `GPU KV cache size: ${tokens.toLocaleString('en-US')} tokens`,
    `Maximum concurrency for ${maxModelLen.toLocaleString('en-US')} tokens per request: ${maxConcurrency.toFixed(2)}x`,
  ];
  return {
    release,
    requested,
    weights: weightsBytes,
    activationPeak: activationPeakBytes,
    nonTorch: nonTorchBytes,
    cudaGraphs,
    kvCache: { bytes: available, blocks, tokens, bytesPerToken, pageBytes },
    maxConcurrency,
    maxModelLen,
    starts: error === undefined,
    ...(error !== undefined ? { error } : {}),
    log,
  };
}
