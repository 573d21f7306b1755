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
import { gpu } from '../gpus/catalog.js';
import { checkedMeta, decoderModel, exactBytes, optionsObject } from '../catalog/decoder-check.js';
import type { ModelMeta, ModuleLayer } from '../nn/types.js';
import { boolean, integer, number, object, oneOf, show, string, validate } from '../validate.js';
import { vllmProfilePeak } from './vllm-profile.js';
import { offloadedBytes, vllmModelWeights } from './vllm-weights.js';

/** The vLLM releases whose start-up rule was read (V1 engine); the rule's variants by release. */
export const VLLM_RELEASES = deepFreeze(['0.8.0', '0.21.0'] as const);

/** The release followed when none is asked for: the newest read. */
export const DEFAULT_VLLM = '0.21.0';

/** KV cache element types (`--kv-cache-dtype`): `auto` is the model's dtype. */
export type KvCacheDtype = 'auto' | 'bfloat16' | 'float16' | 'float32' | 'fp8' | 'fp8_e4m3' | 'fp8_e5m2';

/** What vLLM measures at start-up and logs, in bytes: each overrides the rule that would give it. */
export interface VllmMeasured {
  /** "Model loading took X GiB": the weights as loaded on this rank (default: vllmWeights' rule). */
  readonly weightsBytes?: number;
  /** "PyTorch activation peak memory takes X GiB" / "torch peak memory increase" (default: vllmProfilePeak's program). */
  readonly activationPeakBytes?: number;
  /** "non_torch_memory takes X GiB": NCCL, library handles, loaded kernels (default: not counted, and said so). */
  readonly nonTorchBytes?: number;
  /** "Estimated CUDA graph memory: X GiB", subtracted from v0.21 unless `enforceEager` (default: not counted, and said so). */
  readonly cudaGraphBytes?: number;
}

/** Options of {@link vllmEngine}: vLLM's engine arguments in camelCase. */
export interface VllmOptions {
  /** A catalog GPU whose torch-reported total is recorded (`gpus/catalog.ts` `torchTotal`). */
  readonly gpu?: string;
  /** Total device memory in bytes as vLLM reads it (`torch.cuda.mem_get_info()[1]`); instead of `gpu`. */
  readonly totalBytes?: number;
  /** `--gpu-memory-utilization` (default 0.9; 0.92 from v0.21.0). */
  readonly gpuMemoryUtilization?: number;
  /** `--max-model-len` (default: the model's positions). */
  readonly maxModelLen?: number;
  /** `--max-num-seqs` (default: vLLM's usage-context default, see `entrypoint`). */
  readonly maxNumSeqs?: number;
  /** `--max-num-batched-tokens`: the profiling forward's tokens (default: the usage-context default). */
  readonly maxNumBatchedTokens?: number;
  /** `vllm serve` (the OpenAI server, default) or the offline `LLM` class: their batch defaults differ. */
  readonly entrypoint?: 'serve' | 'llm';
  /** `--tensor-parallel-size` (default 1): KV heads per rank `max(1, kv_heads // tp)`. */
  readonly tensorParallelSize?: number;
  /** `--dtype` of weights and activations (default `auto`: the model's dtype as built). */
  readonly dtype?: 'auto' | 'bfloat16' | 'float16' | 'float32';
  /** `--kv-cache-dtype` (default `auto`: the model's dtype). */
  readonly kvCacheDtype?: KvCacheDtype;
  /** `--block-size` (default 16). */
  readonly blockSize?: number;
  /** `--kv-cache-memory`: the pool's bytes, overriding the utilization rule. */
  readonly kvCacheMemoryBytes?: number;
  /** `--enforce-eager`: no torch.compile and no CUDA graphs (and from v0.21 no graph estimate). */
  readonly enforceEager?: boolean;
  /** `--cpu-offload-gb`: GiB of weights per GPU kept in pinned CPU memory (whole layers). */
  readonly cpuOffloadGb?: number;
  /** Free memory at start-up (default: the total, an empty GPU). */
  readonly freeBytes?: number;
  /** The vLLM release whose rule to follow (default {@link DEFAULT_VLLM}). */
  readonly release?: string;
  /** What vLLM measured at start-up (its log lines), where known. */
  readonly measured?: VllmMeasured;
}

/** The engine arguments as resolved (the defaults the release applies). */
export interface VllmSettings {
  readonly gpuMemoryUtilization: number;
  readonly maxModelLen: number;
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  readonly tensorParallelSize: number;
  readonly blockSize: number;
  readonly kvCacheDtype: KvCacheDtype;
  readonly enforceEager: boolean;
  readonly entrypoint: 'serve' | 'llm';
}

/** vLLM's engine at start-up: its budget, its KV pool, whether it starts, and its log lines. */
export interface VllmEngine {
  readonly release: string;
  readonly settings: VllmSettings;
  /** The device total the budget is a fraction of. */
  readonly totalBytes: number;
  /** `ceil(total × gpu_memory_utilization)`. */
  readonly requested: number;
  readonly weights: number;
  readonly activationPeak: number;
  readonly nonTorch: number;
  readonly cudaGraphs: number;
  /** Weights kept in CPU memory by `cpuOffloadGb` (not on the GPU). */
  readonly cpuOffloaded: number;
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
  /** What the engine holds on the GPU while it generates: the budget, plus the CUDA graphs where they sit outside it (before v0.21). */
  readonly footprint: number;
  /**
   * What stays allocated between generations. `idle`: awake (no sleep mode) — weights, the KV tensors,
   * non-torch memory and the graphs' private pool; `asleep` (`sleep(level=1|2)`, vllm/device_allocator/
   * cumem.py: the `weights` and `kv_cache` pools released) — non-torch memory and graphs. The forward's
   * freed activations (`cachedActivations`, at most the profiled peak) stay reserved by the caching
   * allocator; a trainer in the same process reuses them, one in another process cannot.
   */
  readonly resident: { readonly idle: number; readonly asleep: number; readonly cachedActivations: number };
  /** Where each figure comes from: the rule with its source, or "measured". */
  readonly sources: Readonly<Record<'requested' | 'weights' | 'activationPeak' | 'nonTorch' | 'cudaGraphs' | 'kvCache' | 'batchDefaults', string>>;
  /** Figures not counted because nothing here can derive them; the pool is then an upper bound. */
  readonly assumed: readonly string[];
  /** Whether the engine starts; vLLM's own error when it does not. */
  readonly starts: boolean;
  readonly error?: string;
  /** The start-up lines vLLM would print (V1's format). */
  readonly log: readonly string[];
}

const KV_BYTES: Readonly<Record<Exclude<KvCacheDtype, 'auto'>, number>> = { bfloat16: 2, float16: 2, float32: 4, fp8: 1, fp8_e4m3: 1, fp8_e5m2: 1 };

/** A release as `major.minor.patch`, and at least the first one read (V1's rule): else a VramError at `release`. */
function checkRelease(release: unknown): string {
  if (typeof release !== 'string' || !/^\d+\.\d+\.\d+$/.test(release) || before(release, VLLM_RELEASES[0]))
    fail('unsupported-release', "vLLM's V0 engine rule is not modelled: a V1 release (major.minor.patch)", {
      path: ['release'],
      expected: `≥ ${VLLM_RELEASES[0]}`,
      received: show(release),
    });
  return release;
}

function before(release: string, than: string): boolean {
  const a = release.split('.').map(Number);
  const b = than.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) < (b[i] ?? 0);
  return false;
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
  const m = checkedMeta(meta, ['meta']);
  validate(optionsObject(options, ['options']), pageShape, ['options']);
  if (m.mla !== undefined) return exactBytes(options.blockSize * m.mla.latentPerToken * options.dtypeBytes, ['options', 'blockSize'], 'a page');
  const kvHeads = Math.max(1, Math.floor(m.kvHeads / options.tensorParallelSize));
  return exactBytes(2 * options.blockSize * kvHeads * m.headDim * options.dtypeBytes, ['options', 'blockSize'], 'a page');
}

/** vllmPageBytes' options: every one required. */
const pageShape = object({
  fields: { blockSize: integer(1, 1_000_000), tensorParallelSize: integer(1, 1_000_000), dtypeBytes: integer(1, 8) },
  required: ['blockSize', 'tensorParallelSize', 'dtypeBytes'],
});

const GiB = 2 ** 30;

const measuredShape = object({
  fields: { weightsBytes: number(0), activationPeakBytes: number(0), nonTorchBytes: number(0), cudaGraphBytes: number(0) },
});

/** vLLM's engine arguments' checks, shared with the RL job's `rollout` (jobs/rl.ts). */
export const VLLM_ENGINE_FIELDS = {
  gpuMemoryUtilization: number(Number.MIN_VALUE, 1),
  maxModelLen: integer(1),
  maxNumSeqs: integer(1),
  maxNumBatchedTokens: integer(1),
  entrypoint: oneOf(['serve', 'llm'], 'entrypoint'),
  tensorParallelSize: integer(1),
  dtype: oneOf(['auto', 'bfloat16', 'float16', 'float32'], 'dtype'),
  kvCacheDtype: oneOf(['auto', 'bfloat16', 'float16', 'float32', 'fp8', 'fp8_e4m3', 'fp8_e5m2'], 'kv cache dtype'),
  blockSize: integer(1),
  kvCacheMemoryBytes: number(0),
  enforceEager: boolean,
  cpuOffloadGb: number(0, 1_000_000),
  release: string,
  measured: measuredShape,
};

/** The options' schema: vLLM's engine arguments, strict keys and ranges. */
const optionsShape = object({
  fields: { gpu: string, totalBytes: number(1), freeBytes: number(0), ...VLLM_ENGINE_FIELDS },
  misplaced: { gpu_memory_utilization: 'vLLM arguments are camelCase here: gpuMemoryUtilization', max_model_len: 'camelCase here: maxModelLen' },
});

/** The device total: a named GPU's torch-reported figure, or the caller's bytes. */
function totalOf(o: VllmOptions): { readonly bytes: number; readonly name?: string } {
  if (o.gpu !== undefined && o.totalBytes !== undefined)
    fail('bad-option', 'give the GPU or its total bytes, not both', { path: ['totalBytes'], received: show(o.totalBytes) });
  if (o.gpu !== undefined) {
    const spec = gpu(o.gpu);
    const total =
      spec.torchTotal ??
      fail('not-modelled', `the total PyTorch reports for ${spec.name} is not recorded: give totalBytes (torch.cuda.mem_get_info()[1])`, {
        path: ['gpu'],
        received: show(o.gpu),
      });
    return { bytes: total.bytes, name: spec.name };
  }
  return { bytes: o.totalBytes ?? fail('missing-option', "vLLM's budget is a fraction of the GPU's total: give gpu or totalBytes", { path: ['totalBytes'] }) };
}

/**
 * The batch defaults (vllm/engine/arg_utils.py `get_batch_defaults`): 16384 tokens for the `LLM`
 * class and 8192 for the server, 1024 sequences, on GPUs of at least 70 GiB whose name is not an
 * A100 ("for A100 reduces throughput", PR #17885); otherwise 8192 / 2048 tokens and 256 sequences.
 */
function batchDefaults(totalBytes: number, name: string | undefined, entrypoint: 'serve' | 'llm'): { readonly tokens: number; readonly seqs: number } {
  const large = totalBytes >= 70 * GiB && !(name ?? '').toLowerCase().includes('a100');
  if (large) return { tokens: entrypoint === 'llm' ? 16384 : 8192, seqs: 1024 };
  return { tokens: entrypoint === 'llm' ? 8192 : 2048, seqs: 256 };
}

function checkModel(meta: ModelMeta, o: VllmOptions): void {
  const tp = o.tensorParallelSize ?? 1;
  if (meta.heads % tp !== 0)
    fail('bad-option', `the attention heads (${meta.heads}) must be divisible by the tensor parallel size`, {
      path: ['tensorParallelSize'],
      received: show(tp),
    });
  if ((meta.layerWindows ?? []).some((w) => w !== null) || meta.slidingWindow !== undefined)
    fail('not-modelled', "sliding-window layers' own KV pool (SlidingWindowSpec) is not modelled yet", { path: ['model'] });
}

/** The settings as the release resolves them. */
function settingsOf(meta: ModelMeta, o: VllmOptions, release: string, total: { readonly bytes: number; readonly name?: string }): VllmSettings {
  const entrypoint = o.entrypoint ?? 'serve';
  const defaults = batchDefaults(total.bytes, total.name, entrypoint);
  const maxModelLen =
    o.maxModelLen ?? meta.maxPositions ?? fail('bad-option', 'the model records no max positions: give maxModelLen', { path: ['maxModelLen'] });
  if (meta.maxPositions !== undefined && maxModelLen > meta.maxPositions)
    fail('bad-option', `max_model_len ${maxModelLen} is beyond the model's max_position_embeddings (${meta.maxPositions}) and no rope scaling is modelled`, {
      path: ['maxModelLen'],
      expected: `≤ ${meta.maxPositions}`,
      received: String(maxModelLen),
    });
  return {
    gpuMemoryUtilization: o.gpuMemoryUtilization ?? (before(release, '0.21.0') ? 0.9 : 0.92),
    maxModelLen,
    maxNumSeqs: o.maxNumSeqs ?? defaults.seqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens ?? defaults.tokens,
    tensorParallelSize: o.tensorParallelSize ?? 1,
    blockSize: o.blockSize ?? 16,
    kvCacheDtype: o.kvCacheDtype ?? 'auto',
    enforceEager: o.enforceEager ?? false,
    entrypoint,
  };
}

function gib(bytes: number): string {
  return `${(bytes / GiB).toFixed(2)} GiB`;
}

/** What vLLM measures at start-up: the caller's figures, else the rules here, else not counted (and said so). */
function measuredOf(model: ModuleLayer, meta: ModelMeta, o: VllmOptions, s: VllmSettings, release: string, dtypeBytes: number) {
  const m = o.measured ?? {};
  const assumed: string[] = [];
  const graphsInBudget = !before(release, '0.21.0') && !s.enforceEager;
  let weights = m.weightsBytes;
  let cpuOffloaded = 0;
  if (weights === undefined) {
    const w = vllmModelWeights(model, meta, s.tensorParallelSize, o.dtype === undefined || o.dtype === 'auto' ? undefined : dtypeBytes);
    cpuOffloaded = o.cpuOffloadGb !== undefined ? offloadedBytes(w.layers, o.cpuOffloadGb * GiB) : 0;
    weights = w.bytes - cpuOffloaded;
  } else if (o.cpuOffloadGb !== undefined) cpuOffloaded = o.cpuOffloadGb * GiB;
  const activationPeak =
    m.activationPeakBytes ??
    vllmProfilePeak(meta, {
      tokens: s.maxNumBatchedTokens,
      seqs: s.maxNumSeqs,
      tensorParallelSize: s.tensorParallelSize,
      dtypeBytes,
      eager: s.enforceEager,
    }).bytes;
  if (m.nonTorchBytes === undefined)
    assumed.push(
      'nonTorch: memory outside PyTorch (NCCL, library handles, loaded kernels; 0.03–0.44 GiB at TP 1 in the published logs) is not counted: give measured.nonTorchBytes (--non-torch-memory)',
    );
  if (graphsInBudget && m.cudaGraphBytes === undefined)
    assumed.push("cudaGraphs: v0.21's CUDA-graph estimate (subtracted from the budget) is not counted: give measured.cudaGraphBytes (--cuda-graph-memory)");
  if (!graphsInBudget && !s.enforceEager && m.cudaGraphBytes === undefined)
    assumed.push(
      'cudaGraphs: the CUDA graphs, captured after the pool outside the budget (before v0.21), are not counted in the footprint: give measured.cudaGraphBytes (--cuda-graph-memory)',
    );
  return { weights, activationPeak, nonTorch: m.nonTorchBytes ?? 0, cudaGraphs: m.cudaGraphBytes ?? 0, graphsInBudget, cpuOffloaded, assumed };
}

/** vLLM's start-up refusals, in its own words (gpu_worker.py, kv_cache_utils.py `check_enough_kv_cache_memory`). */
function startError(s: VllmSettings, total: number, free: number, requested: number, available: number, needed: number, tokens: number): string | undefined {
  if (free < requested)
    return `Free memory on device (${gib(free)}/${gib(total)}) on startup is less than desired GPU memory utilization (${s.gpuMemoryUtilization}, ${gib(requested)}). Decrease GPU memory utilization or reduce GPU memory used by other processes.`;
  if (available <= 0) return 'No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.';
  if (needed > available)
    return `To serve at least one request with the models's max seq len (${s.maxModelLen}), (${gib(needed)} KV cache is needed, which is larger than the available KV cache memory (${gib(available)}). Based on the available memory, the estimated maximum model length is ${tokens}. Try increasing \`gpu_memory_utilization\` or decreasing \`max_model_len\` when initializing the engine.`;
  return undefined;
}

const SOURCES = {
  requested: 'ceil(total × gpu_memory_utilization): vllm/v1/worker/utils.py request_memory',
  kvCache:
    'requested − weights − activation peak − non-torch (− CUDA graphs from v0.21): gpu_worker.py determine_available_memory; blocks = available // page // layers: kv_cache_utils.py get_num_blocks',
  batchDefaults: 'vllm/engine/arg_utils.py get_batch_defaults (≥ 70 GiB and not an A100: 16384/8192 tokens, 1024 seqs; else 8192/2048, 256)',
} as const;

/**
 * vLLM's start-up for one rank (V1): the requested budget, the weights as vLLM loads them, the
 * profiling run's activation peak, the KV pool, its blocks and tokens, the maximum concurrency
 * for `maxModelLen`, whether the engine starts (vLLM's error texts), and the log lines. Figures
 * vLLM reads off the GPU that no rule here derives (non-torch memory, the CUDA-graph estimate)
 * are taken from `measured` or left out and listed in `assumed`.
 *
 * @example
 * ```ts
 * import { llm, vllmEngine } from 'vram-ts';
 * const e = vllmEngine(llm('qwen2.5-0.5b'), { gpu: 'H100-80GB', gpuMemoryUtilization: 0.3 });
 * console.log(e.kvCache.bytesPerToken, e.settings.maxNumBatchedTokens); // 12288 8192
 * ```
 */
export function vllmEngine(model: ModuleLayer, options: VllmOptions): VllmEngine {
  validate(optionsObject(options, ['options']), optionsShape, []);
  const meta = decoderModel(model, ['model'], 'vllmEngine').meta;
  checkModel(meta, options);
  const release = checkRelease(options.release ?? DEFAULT_VLLM);
  const total = totalOf(options);
  const s = settingsOf(meta, options, release, total);
  const activationBytes = options.dtype === undefined || options.dtype === 'auto' ? (model.dtype === 'float32' ? 4 : 2) : KV_BYTES[options.dtype];
  const dtypeBytes = s.kvCacheDtype === 'auto' ? activationBytes : KV_BYTES[s.kvCacheDtype];
  const m = measuredOf(model, meta, options, s, release, activationBytes);
  const cudaGraphs = m.graphsInBudget ? m.cudaGraphs : 0;
  const requested = Math.ceil(total.bytes * s.gpuMemoryUtilization);
  const available = options.kvCacheMemoryBytes ?? requested - m.weights - m.activationPeak - m.nonTorch - cudaGraphs;
  const pageBytes = vllmPageBytes(meta, { blockSize: s.blockSize, tensorParallelSize: s.tensorParallelSize, dtypeBytes });
  const blocks = available > 0 ? Math.floor(Math.floor(available / pageBytes) / meta.layers) : 0;
  const tokens = blocks * s.blockSize;
  const needed = Math.ceil(s.maxModelLen / s.blockSize) * pageBytes * meta.layers;
  const error = startError(s, total.bytes, options.freeBytes ?? total.bytes, requested, available, needed, tokens);
  // get_max_concurrency_for_kv_cache_config: the pool's blocks over one request's (cdiv(max_model_len, block_size)).
  const maxConcurrency = blocks / Math.ceil(s.maxModelLen / s.blockSize);
  const budget = options.kvCacheMemoryBytes !== undefined ? m.weights + m.activationPeak + m.nonTorch + cudaGraphs + available : requested;
  const footprint = budget + (m.graphsInBudget ? 0 : m.cudaGraphs);
  const measured = options.measured ?? {};
  const from = (key: keyof VllmMeasured, rule: string) => (measured[key] !== undefined ? 'measured' : rule);
  return {
    release,
    settings: s,
    totalBytes: total.bytes,
    requested,
    weights: m.weights,
    activationPeak: m.activationPeak,
    nonTorch: m.nonTorch,
    cudaGraphs: m.cudaGraphs,
    cpuOffloaded: m.cpuOffloaded,
    kvCache: {
      bytes: available,
      blocks,
      tokens,
      bytesPerToken: exactBytes((pageBytes / s.blockSize) * meta.layers, ['model', 'meta'], 'a token of KV cache'),
      pageBytes,
    },
    maxConcurrency,
    maxModelLen: s.maxModelLen,
    footprint,
    resident: {
      idle: m.weights + blocks * pageBytes * meta.layers + m.nonTorch + m.cudaGraphs,
      asleep: m.nonTorch + m.cudaGraphs,
      cachedActivations: m.activationPeak,
    },
    sources: {
      ...SOURCES,
      weights: from('weightsBytes', "vllmWeights: parameters sharded as vLLM's parallel layers shard them, plus the rotary cos_sin_cache"),
      activationPeak: from(
        'activationPeakBytes',
        `vllmProfilePeak: profile_run's dummy forward of ${s.maxNumBatchedTokens} tokens and the sampler on ${Math.min(s.maxNumSeqs, s.maxNumBatchedTokens)} rows`,
      ),
      nonTorch: from('nonTorchBytes', 'not counted'),
      cudaGraphs: from('cudaGraphBytes', 'not counted'),
    },
    assumed: m.assumed,
    starts: error === undefined,
    ...(error !== undefined ? { error } : {}),
    log: [
      `Model loading took ${gib(m.weights)}`,
      `Available KV cache memory: ${gib(Math.max(0, available))}`,
      `GPU KV cache size: ${tokens.toLocaleString('en-US')} tokens`,
      `Maximum concurrency for ${s.maxModelLen.toLocaleString('en-US')} tokens per request: ${maxConcurrency.toFixed(2)}x`,
    ],
  };
}
