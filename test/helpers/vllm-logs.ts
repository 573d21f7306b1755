/**
 * Published vLLM start-up logs (test/fixtures/vllm-logs: each with its URL and the quoted lines) and
 * what vllmEngine makes of their figures. A log prints its memory rounded to 0.01 GiB, so the pool's
 * tokens are checked against the interval that rounding allows.
 */
import { loadJsonFixtures } from './fixtures.js';
import { LLMS, fromHFConfig, vllmEngine, type ModuleLayer, type VllmEngine } from '../../src/index.js';

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
  // A budget of the whole (notional) device less weights chosen so that the pool is `bytes` (negative included).
  return vllmEngine(model, {
    totalBytes: 2 ** 40,
    gpuMemoryUtilization: 1,
    maxModelLen: 1,
    ...(s.tensorParallelSize != null ? { tensorParallelSize: s.tensorParallelSize } : {}),
    ...(s.blockSize != null ? { blockSize: s.blockSize } : {}),
    ...(kvDtype !== undefined ? { kvCacheDtype: kvDtype } : {}),
    measured: { weightsBytes: 2 ** 40 - bytes, activationPeakBytes: 0, nonTorchBytes: 0, cudaGraphBytes: 0 },
  }).kvCache;
}

const llama3 = LLMS.find((e) => e.id === 'llama-3-8b')!.config;

/** meta-llama/Llama-3.1-8B's config.json: Llama-3-8B's shape, 131072 positions, llama3 rope scaling. */
export const LLAMA_31_8B = {
  ...llama3,
  max_position_embeddings: 131072,
  rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
} as const;

/** Qwen/Qwen2.5-32B-Instruct's config.json (the KV fields as the fixture's `config` records them). */
export const QWEN_25_32B = {
  model_type: 'qwen2',
  torch_dtype: 'bfloat16',
  hidden_size: 5120,
  intermediate_size: 27648,
  num_hidden_layers: 64,
  num_attention_heads: 40,
  num_key_value_heads: 8,
  vocab_size: 152064,
  tie_word_embeddings: false,
  max_position_embeddings: 32768,
  rope_theta: 1000000.0,
  rms_norm_eps: 1e-6,
} as const;

/** The logs whose model vram-ts builds whole (its config.json), with the tensor-parallel size of the log. */
export const WHOLE_MODELS: Readonly<Record<string, { readonly model: () => ModuleLayer; readonly tp: number }>> = {
  'v0-llama3-8b-80gb-tp1-pr10511': { model: () => fromHFConfig(llama3), tp: 1 },
  'v0-llama3-8b-80gb-tp2-pr10511': { model: () => fromHFConfig(llama3), tp: 2 },
  'v0-llama31-8b-rtx3090-20k': { model: () => fromHFConfig(LLAMA_31_8B as never), tp: 1 },
  'v0-llama31-8b-rtx3090-29k': { model: () => fromHFConfig(LLAMA_31_8B as never), tp: 1 },
  'v0-llama31-8b-tp8-mlcommons': { model: () => fromHFConfig(LLAMA_31_8B as never), tp: 8 },
  'v0-qwen25-32b-l40s-tp2': { model: () => fromHFConfig(QWEN_25_32B as never), tp: 2 },
};

/** The weights figure a log printed ("Loading model weights took" / "model weights take" / "Model loading took") and half its last digit. */
export function loggedWeights(f: VllmLogFixture): { readonly gib: number; readonly half: number } | undefined {
  const text = f.quoted.find((q) => /Loading model weights took|model weights take|Model loading took/.test(q));
  const figure = text === undefined ? undefined : /(?:took|take)\s+([0-9.]+) ?G/.exec(text)?.[1];
  if (figure === undefined) return undefined;
  return { gib: Number(figure), half: 0.5 * 10 ** -(figure.split('.')[1]?.length ?? 0) };
}

/** The logs that print every line of the budget (total, utilization, weights, activation peak, non-torch, KV) for a model built whole. */
export const WHOLE_BUDGET_LOGS = ['v0-llama3-8b-80gb-tp1-pr10511', 'v0-qwen25-32b-l40s-tp2'] as const;
