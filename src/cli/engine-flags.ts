/**
 * The rollout engines' flags, under vLLM's own names (`vllm serve --gpu-memory-utilization …`),
 * and the RL job's: entries of the flag table (./flags.ts spreads them into FLAGS, which checks
 * their shape); `vllm` and `rl` take them.
 */
import { decimal, gpuBudget, wholeNumber } from './args.js';
import { usage } from './errors.js';

/** --kv-cache-dtype: vLLM's cache dtypes modelled. */
export const KV_CACHE_DTYPES = ['auto', 'bfloat16', 'float16', 'float32', 'fp8', 'fp8_e4m3', 'fp8_e5m2'] as const;
/** --entrypoint: vLLM's usage contexts, whose batch defaults differ. */
export const ENTRYPOINTS = ['serve', 'llm'] as const;
/** rl's --framework: the RL frameworks whose placement rules are read. */
export const RL_FRAMEWORKS = ['trl', 'verl', 'openrlhf'] as const;

/** A fraction in (0, 1]. */
function fraction(flag: string): (value: string) => number {
  return (value) => {
    const n = decimal(value, flag);
    if (!(n > 0 && n <= 1)) usage(flag, 'is a fraction of the GPU', { expected: 'in (0, 1], e.g. 0.9', received: JSON.stringify(value) });
    return n;
  };
}

/** A memory size (24GB, 512MiB or bytes), as --gpu reads one. */
function size(flag: string): (value: string) => number {
  return (value) => {
    if (/^[0-9]+$/.test(value)) return wholeNumber(value, flag, 0, Number.MAX_SAFE_INTEGER);
    if (!/[0-9]/.test(value) || /^[a-z]/i.test(value))
      usage(flag, 'is a memory size', { expected: 'e.g. 0.5GiB, 300MiB or bytes', received: JSON.stringify(value) });
    return gpuBudget(value);
  };
}

const VLLM = ['vllm', 'rl'] as const;
const ENGINE_ONLY = ['vllm'] as const;
const RL = ['rl'] as const;

/** vLLM's engine arguments (both commands) and the measured figures of its start-up log (vllm only). */
export const ENGINE_FLAGS = {
  'gpu-memory-utilization': {
    type: 'string',
    read: fraction('--gpu-memory-utilization'),
    scope: VLLM,
    meta: 'F',
    help: {
      vllm: "fraction of the GPU's TOTAL memory vLLM takes (vLLM's default: 0.92 from v0.21,\n0.9 before)",
      rl: "the rollout engine's fraction of the GPU's total (by default the framework's:\nTRL 0.3, verl 0.5, OpenRLHF 0.95)",
    },
  },
  'max-model-len': { type: 'string', max: 100_000_000, scope: VLLM, meta: 'N', help: "the longest request (default: the model's max_position_embeddings)" },
  'max-num-seqs': { type: 'string', max: 1_000_000, scope: VLLM, meta: 'N', help: "requests at once (default: vLLM's for the GPU and entrypoint)" },
  'max-num-batched-tokens': {
    type: 'string',
    max: 100_000_000,
    scope: VLLM,
    meta: 'N',
    help: "tokens per step: the profiling forward's size (default: vLLM's for the GPU and entrypoint)",
  },
  'tensor-parallel-size': {
    type: 'string',
    max: 1024,
    scope: VLLM,
    meta: 'N',
    help: "GPUs one engine spans (vLLM's default: 1; verl's 2); the figures are one rank",
  },
  'kv-cache-dtype': {
    type: 'string',
    scope: VLLM,
    values: KV_CACHE_DTYPES,
    meta: 'D',
    help: `${KV_CACHE_DTYPES.join(', ')} (default auto: the model's dtype)`,
  },
  'block-size': { type: 'string', max: 1_000_000, scope: VLLM, meta: 'N', help: "tokens per KV block (vLLM's default: 16)" },
  'kv-cache-memory': {
    type: 'string',
    read: size('--kv-cache-memory'),
    scope: VLLM,
    meta: 'SIZE',
    help: 'the KV pool itself, instead of the utilization rule',
  },
  'enforce-eager': { type: 'boolean', scope: VLLM, help: 'no torch.compile and no CUDA graphs' },
  'cpu-offload-gb': {
    type: 'string',
    read: (value: string) => decimal(value, '--cpu-offload-gb'),
    scope: VLLM,
    meta: 'G',
    help: 'GiB of weights per GPU kept in CPU memory (whole layers)',
  },
  entrypoint: {
    type: 'string',
    scope: ENGINE_ONLY,
    values: ENTRYPOINTS,
    meta: 'E',
    help: 'serve (the OpenAI server, default) or llm (the LLM class): batch defaults differ',
  },
  'vllm-release': { type: 'string', scope: VLLM, meta: 'X.Y.Z', help: 'the vLLM release whose rule to follow (the newest read: 0.21.0; 0.8.0 – 0.21.0 read)' },
  'weights-memory': {
    type: 'string',
    read: size('--weights-memory'),
    scope: ENGINE_ONLY,
    meta: 'SIZE',
    help: 'measured: "Model loading took X GiB" (default: the sharding rule)',
  },
  'activation-memory': {
    type: 'string',
    read: size('--activation-memory'),
    scope: ENGINE_ONLY,
    meta: 'SIZE',
    help: 'measured: the profiling run\'s "torch peak memory increase" (default: its program)',
  },
  'non-torch-memory': {
    type: 'string',
    read: size('--non-torch-memory'),
    scope: VLLM,
    meta: 'SIZE',
    help: 'measured: "non_torch_memory" (NCCL, library handles; default: not counted)',
  },
  'cuda-graph-memory': {
    type: 'string',
    read: size('--cuda-graph-memory'),
    scope: VLLM,
    meta: 'SIZE',
    help: 'measured: "Estimated CUDA graph memory" (default: not counted)',
  },
  'mem-fraction-static': {
    type: 'string',
    read: fraction('--mem-fraction-static'),
    scope: ENGINE_ONLY,
    meta: 'F',
    help: "also SGLang's pool: weights + KV = this fraction of the free memory",
  },
  sleep: {
    type: 'boolean',
    scope: RL,
    help: "the engine sleeps outside rollout (TRL's vllm_enable_sleep_mode, verl's\nfree_cache_engine, OpenRLHF's --vllm.enable_sleep)",
  },
  colocate: { type: 'boolean', scope: RL, help: "OpenRLHF's --train.colocate_all: the engines on the trainer's GPUs" },
  engines: { type: 'string', max: 100_000, scope: RL, meta: 'N', help: "OpenRLHF's --vllm.num_engines when not colocated" },
  'log-prob-batch': {
    type: 'string',
    max: 1_000_000,
    scope: RL,
    meta: 'N',
    help: "verl/OpenRLHF: sequences per log-probability pass (by default the update's --batch)",
  },
  'param-offload': { type: 'boolean', scope: RL, help: "verl's param_offload: the actor's parameters on the CPU outside its passes" },
  'optimizer-offload': { type: 'boolean', scope: RL, help: "verl's optimizer_offload: Adam's state on the CPU outside the update" },
} as const;
