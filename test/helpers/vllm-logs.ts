/**
 * Published vLLM start-up logs (test/fixtures/vllm-logs: each with its URL and the quoted lines) and
 * what vllmEngine makes of their figures. A log prints its memory rounded to 0.01 GiB, so the pool's
 * tokens are checked against the interval that rounding allows.
 */
import { loadJsonFixtures } from './fixtures.js';
import { vllmEngine, type ModuleLayer, type VllmEngine } from '../../src/index.js';

export interface VllmLogFixture {
  readonly id: string;
  readonly url: string;
  readonly quoted: readonly string[];
  readonly vllm: string | null;
  readonly engine: 'v0' | 'v1' | null;
  readonly model: string | null;
  readonly config: null | {
    readonly num_hidden_layers?: number;
    readonly num_attention_heads?: number;
    readonly num_key_value_heads?: number;
    readonly head_dim?: number;
    readonly hidden_size?: number;
    readonly kv_lora_rank?: number;
    readonly qk_rope_head_dim?: number;
    readonly sliding_window?: number | null;
    readonly layer_types?: readonly string[];
  };
  readonly settings: {
    readonly gpuMemoryUtilization?: number | null;
    readonly tensorParallelSize?: number | null;
    readonly maxModelLen?: number | null;
    readonly blockSize?: number | null;
    readonly kvCacheDtype?: string | null;
    readonly dtype?: string | null;
  };
  readonly figures: {
    readonly totalGiB?: number | null;
    readonly weightsGiB?: number | null;
    readonly nonTorchGiB?: number | null;
    readonly activationPeakGiB?: number | null;
    readonly availableKvGiB?: number | null;
    readonly gpuBlocks?: number | null;
    readonly kvTokens?: number | null;
    readonly maxConcurrency?: number | null;
    readonly concurrencyTokens?: number | null;
  };
}

export function loadVllmLogs(): VllmLogFixture[] {
  return loadJsonFixtures<VllmLogFixture>('vllm-logs');
}

/** A model as vllmEngine reads it (its meta), from the config fields a log's model has. */
export function modelOfLog(f: VllmLogFixture): ModuleLayer | undefined {
  const c = f.config;
  if (c === null) return undefined;
  const layers = c.num_hidden_layers;
  const heads = c.num_attention_heads;
  if (layers === undefined || heads === undefined) return undefined;
  const headDim = c.head_dim ?? (c.hidden_size !== undefined ? c.hidden_size / heads : undefined);
  const mla = c.kv_lora_rank !== undefined && c.qk_rope_head_dim !== undefined ? { latentPerToken: c.kv_lora_rank + c.qk_rope_head_dim } : undefined;
  if (headDim === undefined && mla === undefined) return undefined;
  const dtype = f.settings.dtype === 'float32' ? 'float32' : 'bfloat16';
  return {
    kind: 'module',
    className: f.model ?? 'unknown',
    body: { kind: 'seq', isSequential: true, children: [] },
    dtype,
    meta: {
      kind: 'decoder',
      family: 'log',
      layers,
      heads,
      kvHeads: c.num_key_value_heads ?? heads,
      headDim: headDim ?? 0,
      hidden: c.hidden_size ?? 0,
      vocab: 0,
      intermediate: 0,
      gatedMlp: true,
      tied: false,
      ...(mla !== undefined ? { mla: mla as never } : {}),
    },
  } as unknown as ModuleLayer;
}

/** The tokens vllmEngine gives for a pool of `bytes` under the log's settings. */
export function poolTokens(model: ModuleLayer, f: VllmLogFixture, bytes: number): VllmEngine['kvCache'] {
  const s = f.settings;
  const kvDtype = s.kvCacheDtype?.startsWith('fp8') === true ? 'fp8' : undefined;
  return vllmEngine(model, {
    totalBytes: 2 ** 40,
    kvCacheMemoryBytes: bytes,
    maxModelLen: 1,
    ...(s.tensorParallelSize != null ? { tensorParallelSize: s.tensorParallelSize } : {}),
    ...(s.blockSize != null ? { blockSize: s.blockSize } : {}),
    ...(kvDtype !== undefined ? { kvCacheDtype: kvDtype } : {}),
    measured: { weightsBytes: 0, activationPeakBytes: 0, nonTorchBytes: 0 },
  }).kvCache;
}
