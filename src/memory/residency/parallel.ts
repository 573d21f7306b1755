import { fail } from '../../errors.js';
import type { DType } from '../../tensor/dtype.js';
import type { IR } from '../../trace/ir.js';
import { ddp, zeroRedundancyPartition } from './ddp.js';
import { deepspeed } from '../../parallel/engines/deepspeed/residency.js';
import { deepspeedSettings } from '../../parallel/engines/deepspeed/settings.js';
import { fsdp2 } from './fsdp2.js';
import { megatron } from './megatron.js';
import { singleDevice } from './single.js';
import type { EngineHooks, RankContext } from './types.js';

/** The distributed engines vram-ts models per rank. */
export type Engine = 'ddp' | 'zero-redundancy' | 'fsdp2' | 'deepspeed' | 'megatron';

/**
 * One rank of a data-parallel job: which engine, how many ranks, which one, and the engine's
 * knobs that move memory. The figures of an estimate with it are that rank's.
 */
export interface ParallelPlan {
  /**
   * `ddp` (torch DistributedDataParallel), `zero-redundancy` (torch ZeroRedundancyOptimizer
   * over DDP: optimizer state partitioned by whole parameters), `fsdp2` (torch `fully_shard`),
   * `deepspeed` (ZeRO stages 0-3), `megatron` (Megatron-core's DistributedDataParallel and its
   * optimizers; see `megatron`). Required with more than one data-parallel rank; without it
   * a rank holds its (pipeline stage's) model alone, as on one GPU.
   */
  readonly engine?: Engine;
  /** Data-parallel ranks (GPUs). */
  readonly dp: number;
  /** The rank to estimate (default 0; ranks differ by padding and partitions). */
  readonly rank?: number;
  /**
   * DDP `gradient_as_bucket_view` (default false). With `microBatches` > 1, DDP runs every
   * micro-batch but the last under `no_sync()` (what Accelerate and the HF Trainer do).
   */
  readonly bucketView?: boolean;
  /**
   * With `microBatches` > 1, which micro-batches reduce gradients: `last` (the others run under
   * DDP's `no_sync()` or FSDP2's `set_requires_gradient_sync(False)`, keeping whole unsharded
   * gradients between them) or `every`. Default: `last` for DDP and ZeroRedundancyOptimizer
   * (the Hugging Face Trainer's choice), `every` for FSDP2 (`fully_shard`'s own default).
   */
  readonly gradientSync?: 'every' | 'last';
  /** DDP `bucket_cap_mb` (default 25). */
  readonly bucketCapMb?: number;
  /** FSDP2: module keys wrapped with `fully_shard` besides the root (default: the model's repeated blocks). */
  readonly units?: readonly string[];
  /** FSDP2 `reshard_after_forward` of the non-root units (default true). */
  readonly reshardAfterForward?: boolean;
  /** FSDP2 `MixedPrecisionPolicy`: compute (all-gather) and reduce dtypes; parameters stay stored in the model's dtype. */
  readonly mixedPrecision?: { readonly param?: DType; readonly reduce?: DType };
  /** DeepSpeed: the ZeRO stage (1 optimizer state, 2 + gradients, 3 + parameters); required with `engine: 'deepspeed'`. */
  readonly zero?: 0 | 1 | 2 | 3;
  /**
   * DeepSpeed's `zero_optimization` knobs that move memory, in elements as its config takes them
   * (defaults are DeepSpeed's: reduce bucket 5e8, overlap_comm = stage 3, prefetch 5e7, max live
   * 1e9, reuse distance 1e9, persistence 1e5, model persistence unlimited, sub-group 1e9; the
   * Hugging Face Trainer's "auto" writes reduceBucketSize = h², and under ZeRO-3
   * prefetchBucketSize = ⌊0.9·h²⌋ and paramPersistenceThreshold = 10·h).
   */
  readonly deepspeed?: {
    readonly reduceBucketSize?: number;
    readonly overlapComm?: boolean;
    readonly prefetchBucketSize?: number;
    readonly maxLiveParameters?: number;
    readonly maxReuseDistance?: number;
    readonly paramPersistenceThreshold?: number;
    readonly modelPersistenceThreshold?: number;
    readonly subGroupSize?: number;
  };
  /**
   * Megatron-core's knobs that move memory (engine `megatron`; defaults are Megatron's):
   * `distributedOptimizer` (`use_distributed_optimizer`, default false: fp32 master parameters
   * and Adam state sharded over the data-parallel ranks, the parameters in a padded buffer),
   * `gradReduceInFp32` (`grad_reduce_in_fp32`, default false), `overlapGradReduce` (default
   * false; with it buckets of `bucketSize` elements, default max(4e7, 1e6 · dp), which move the
   * distributed optimizer's padding and shards).
   */
  readonly megatron?: { readonly distributedOptimizer?: boolean; readonly gradReduceInFp32?: boolean; readonly overlapGradReduce?: boolean; readonly bucketSize?: number };
  /**
   * What lives in host memory instead of the GPU (device `cuda` only): the optimizer (DeepSpeed
   * `offload_optimizer: {device: cpu}` at ZeRO 1-3: the fp32 master, the optimizer state and the
   * fp32 gradient partition, the step by DeepSpeedCPUAdam / DeepSpeedCPULion, so `adam`, `adamw`
   * or `lion`) and the parameters (DeepSpeed ZeRO-3 `offload_param: {device: cpu}`; FSDP2's
   * `CPUOffloadPolicy` moves parameters, gradients and the optimizer state together: give both).
   * The estimate's `bytes` are then the GPU's figures and `host` the host's. Read from the
   * engines' sources, not measured. DDP and ZeroRedundancyOptimizer offload nothing.
   */
  readonly offload?: { readonly optimizer?: boolean; readonly parameters?: boolean };
  /** Tensor-parallel size (the model must be built for it: see the decoder's `tensorParallel`). */
  readonly tp?: number;
  /** Pipeline stages. */
  readonly pp?: number;
  /** The pipeline stage this rank runs (default 0). */
  readonly stage?: number;
  /** The pipeline schedule (default `1f1b`). */
  readonly schedule?: 'gpipe' | '1f1b' | 'interleaved-1f1b';
  /** Model chunks per pipeline rank under `interleaved-1f1b` (default 2). */
  readonly virtualStages?: number;
  /** Where pipeline stages 1 .. pp·v − 1 begin: a top-level child's name each (default: an even cut). */
  readonly splits?: readonly string[];
  /** `schedule.step(return_outputs=...)`: the final stage keeps every micro-batch's output to the next step (default true, torch's). */
  readonly keepOutputs?: boolean;
  /**
   * Context-parallel size (the model must be built for it: see the decoder's `contextParallel`).
   * The data-parallel engine then spans dp · cp ranks, as torchtitan's FSDP and DDP meshes
   * (`dp_shard_cp`, `dp_cp`) do: parameters and optimizer state shard over, and gradients
   * reduce across, every rank that sees the same weights; `rank` counts in that group.
   */
  readonly cp?: number;
  /**
   * Expert-parallel size (the model must be built for it: the MoE decoder's `expertParallel`).
   * Hugging Face's expert parallelism runs on its own mesh dimension (the tensor-parallel one):
   * the expert-parallel ranks of a group share their data, so the data-parallel engine spans
   * `dp` ranks, as with `tp`.
   */
  readonly ep?: number;
}

/** Whether the engine's accounting can follow a model traced with reduced repeated blocks. */
export function followsRepeatedBlocks(plan: ParallelPlan | undefined): boolean {
  // ZeroRedundancyOptimizer's greedy partition is over the whole model's tensors; DeepSpeed's
  // partitions, buckets and ZeRO-3's reuse distance, Megatron's buffer layout and shards follow
  // each tensor's place in the whole model.
  return plan === undefined || (plan.engine !== 'zero-redundancy' && plan.engine !== 'deepspeed' && plan.engine !== 'megatron');
}

/** The parallel sizes vram-ts does not model yet: a VramError naming the one asked for. */
export function checkModelled(plan: ParallelPlan): void {
  // tp, cp and ep are checked against the model it estimates (checkBuiltParallel).
  // Around tensor-parallel ranks only FSDP2 is measured (its redistribution of the vocab-parallel
  // embedding's Replicate gradient); DDP's buckets and ZeRO's partitions of DTensor gradients are not.
  if ((plan.tp ?? 1) > 1 && plan.dp > 1 && plan.engine !== undefined && plan.engine !== 'fsdp2') {
    fail('not-modelled', `tensor parallelism under ${plan.engine} is not modelled: FSDP2 around tensor-parallel ranks is (torchtitan's 2-D layout)`, { path: ['parallel', 'engine'], expected: "'fsdp2' with tp > 1 and dp > 1", received: plan.engine });
  }
  if ((plan.cp ?? 1) > 1 && (plan.pp ?? 1) > 1) fail('not-modelled', 'context parallelism inside pipeline stages is not modelled', { path: ['parallel', 'cp'], expected: 'pp 1', received: `pp ${plan.pp}` });
  checkOffload(plan);
  // The pipeline's knobs mean nothing without pipeline stages.
  for (const key of ['stage', 'schedule', 'virtualStages'] as const) {
    if (plan[key] !== undefined && (plan.pp ?? 1) === 1) fail('bad-option', `${key} applies to pipeline parallelism (pp > 1)`, { path: ['parallel', key], expected: 'absent', received: String(plan[key]) });
  }
  if (plan.engine === undefined && plan.dp > 1) fail('bad-option', 'more than one data-parallel rank needs an engine', { path: ['parallel', 'engine'], expected: "'ddp' | 'zero-redundancy' | 'fsdp2' | 'deepspeed'", received: 'undefined' });
  if ((plan.pp ?? 1) > 1 && plan.dp > 1 && (plan.engine !== 'ddp' || (plan.virtualStages ?? (plan.schedule === 'interleaved-1f1b' ? 2 : 1)) > 1)) {
    fail('not-modelled', 'pipeline stages are modelled alone or under DDP with one stage per rank so far', { path: ['parallel', 'engine'], expected: "dp 1, or engine 'ddp' with gpipe / 1f1b", received: `${plan.engine ?? 'none'} with ${plan.schedule ?? '1f1b'}` });
  }
  for (const key of ['splits', 'keepOutputs'] as const) {
    if (plan[key] !== undefined && (plan.pp ?? 1) === 1) fail('bad-option', `${key} applies to pipeline parallelism (pp > 1)`, { path: ['parallel', key], expected: 'absent', received: String(plan[key]) });
  }
  const rank = plan.rank ?? 0;
  const ranks = plan.dp * (plan.cp ?? 1);
  if (rank >= ranks) fail('bad-option', 'the rank must be below the number of data-parallel (times context-parallel) ranks', { path: ['parallel', 'rank'], expected: `0 .. ${ranks - 1}`, received: String(rank) });
  if (plan.megatron !== undefined && plan.engine !== 'megatron') fail('bad-option', "megatron applies to engine 'megatron' only", { path: ['parallel', 'megatron'], expected: 'absent', received: plan.engine ?? 'no engine' });
  if (plan.engine === 'megatron' && plan.megatron?.bucketSize !== undefined && plan.megatron.overlapGradReduce !== true) fail('bad-option', 'Megatron buckets only with overlapGradReduce (without it one bucket)', { path: ['parallel', 'megatron', 'bucketSize'], expected: 'overlapGradReduce: true', received: String(plan.megatron.bucketSize) });
  if (plan.engine !== 'deepspeed') {
    for (const key of ['zero', 'deepspeed'] as const) if (plan[key] !== undefined) fail('bad-option', `${key} applies to engine 'deepspeed' only`, { path: ['parallel', key], expected: 'absent', received: plan.engine ?? 'no engine' });
    return;
  }
  if (plan.zero === undefined) fail('bad-option', "engine 'deepspeed' needs the ZeRO stage", { path: ['parallel', 'zero'], expected: '1 | 2 | 3', received: 'undefined' });
  if (plan.zero === 0) fail('not-modelled', 'DeepSpeed without ZeRO (stage 0: FP16_Optimizer / BF16_Optimizer) is not modelled', { path: ['parallel', 'zero'], expected: '1 | 2 | 3', received: '0' });
}

/** Whether the plan offloads anything to host memory. */
export function offloads(plan: ParallelPlan): boolean {
  return plan.offload?.optimizer === true || plan.offload?.parameters === true;
}

/**
 * What each engine offloads, as its sources allow (read, not measured): DeepSpeed
 * `offload_optimizer` at ZeRO 1-3 and `offload_param` at ZeRO-3 only (stages 1/2 take no
 * parameter offload config: engine.py:2415 passes only `offload_optimizer_config` to
 * DeepSpeedZeroOptimizer, so DeepSpeed would silently ignore it; here it is an error); FSDP2's
 * `CPUOffloadPolicy` moves parameters, gradients and optimizer state together (both flags);
 * DDP and ZeroRedundancyOptimizer offload nothing. Every combination outside these is a VramError
 * with its path.
 */
function checkOffload(plan: ParallelPlan): void {
  if (!offloads(plan)) return;
  const given = JSON.stringify(plan.offload);
  if (plan.engine === 'ddp' || plan.engine === 'zero-redundancy' || plan.engine === 'megatron') fail('not-modelled', `${plan.engine === 'ddp' ? 'DistributedDataParallel' : plan.engine === 'megatron' ? "Megatron's optimizer offloading" : 'ZeroRedundancyOptimizer'} ${plan.engine === 'megatron' ? 'is not modelled' : 'has no offloading to host memory'} (use engine 'fsdp2' with CPUOffloadPolicy, or 'deepspeed')`, { path: ['parallel', 'offload'], expected: 'absent', received: given });
  if (plan.engine === 'fsdp2') {
    // CPUOffloadPolicy (_fsdp_api.py): parameters, gradients and optimizer state together.
    for (const key of ['optimizer', 'parameters'] as const) {
      if (plan.offload?.[key] !== true) fail('bad-option', "FSDP2's CPUOffloadPolicy offloads parameters, gradients and the optimizer state together: give both offload.optimizer and offload.parameters", { path: ['parallel', 'offload', key], expected: 'true', received: String(plan.offload?.[key]) });
    }
  }
  if (plan.engine === 'deepspeed' && plan.offload?.parameters === true && plan.zero !== undefined && plan.zero !== 3) {
    fail('bad-option', 'DeepSpeed offloads parameters (offload_param) only under ZeRO-3; stages 1/2 ignore it (engine.py:2415)', { path: ['parallel', 'offload', 'parameters'], expected: 'zero: 3, or no parameter offload', received: `zero: ${plan.zero}` });
  }
}

/** The model-built parallel sizes, by their `parallel` key, with the builder option and its name. */
const BUILT = {
  tp: { option: 'tensorParallel', what: 'tensor-parallel' },
  cp: { option: 'contextParallel', what: 'context-parallel' },
  ep: { option: 'expertParallel', what: 'expert-parallel' },
} as const;

/**
 * `parallel.tp`, `parallel.cp` or `parallel.ep` against the size the model was built for
 * (`built`, 1 when it was built whole): equal, or absent (the model is one rank's already), or
 * a VramError at `['parallel', key]`. These are properties of the model (its local shapes and
 * collectives), not of the residency: the data-parallel engine then holds the rank's local
 * parameters.
 */
export function checkBuiltParallel(plan: ParallelPlan, key: keyof typeof BUILT, built: number): void {
  const given = plan[key];
  if (given === undefined || given === built) return;
  const { option, what } = BUILT[key];
  const message =
    built === 1
      ? `parallel.${key} is ${given} but the model was built whole: build one rank's model with the decoder's ${option}: { size: ${given} }`
      : `parallel.${key} is ${given} but the model was built for ${what} size ${built} (its ${option} option)`;
  fail('bad-option', message, { path: ['parallel', key], expected: String(built), received: String(given) });
}

/**
 * The residency of one rank under the plan. `defaultUnits` are the FSDP units when the plan
 * names none (a decoder's layers); `storeDtype` the dtype FSDP2 keeps sharded parameters in.
 */
export function residencyOf(plan: ParallelPlan, defaultUnits: readonly string[], storeDtype: DType): (ctx: RankContext) => EngineHooks {
  checkModelled(plan);
  const make = engineResidency(plan, defaultUnits, storeDtype);
  if (!offloads(plan)) return make;
  return (ctx) => {
    // On a CPU estimate the "device" is host memory already: moving state from CPU to CPU means nothing.
    if (ctx.ir.settings.device === 'cpu') fail('bad-option', "offloading to host memory needs device 'cuda': on a CPU estimate everything is host memory already", { path: ['parallel', 'offload'], expected: "absent with device 'cpu'", received: JSON.stringify(plan.offload) });
    return make(ctx);
  };
}

function engineResidency(given: ParallelPlan, defaultUnits: readonly string[], storeDtype: DType): (ctx: RankContext) => EngineHooks {
  // Context-parallel ranks hold the same weights: the engine's group is dp · cp.
  const plan = { ...given, dp: given.dp * (given.cp ?? 1) };
  const rank = plan.rank ?? 0;
  const engine = plan.engine;
  if (engine === undefined) return singleDevice;
  switch (engine) {
    case 'ddp':
      return ddp({ bucketView: plan.bucketView ?? false, bucketCapMb: plan.bucketCapMb ?? 25, gradientSync: plan.gradientSync ?? 'last' });
    case 'zero-redundancy':
      return ddp({ bucketView: plan.bucketView ?? false, bucketCapMb: plan.bucketCapMb ?? 25, gradientSync: plan.gradientSync ?? 'last' }, (ctx: RankContext) => zeroRedundancyPartition(ctx.ir as IR, plan.dp)[rank]!);
    case 'fsdp2':
      return fsdp2({
        shards: plan.dp,
        rank,
        units: plan.units ?? defaultUnits,
        unitsGiven: plan.units !== undefined,
        gradientSync: plan.gradientSync ?? 'every',
        reshardAfterForward: plan.reshardAfterForward ?? true,
        storeDtype: () => storeDtype,
        reduceDtype: plan.mixedPrecision?.reduce ?? null,
        offload: offloads(plan),
      });
    case 'megatron': {
      const m = plan.megatron ?? {};
      const overlap = m.overlapGradReduce ?? false;
      return megatron({ distributedOptimizer: m.distributedOptimizer ?? false, gradReduceInFp32: m.gradReduceInFp32 ?? false, bucketSize: overlap ? (m.bucketSize ?? Math.max(40_000_000, 1_000_000 * plan.dp)) : null, dp: plan.dp, rank });
    }
    case 'deepspeed':
      return deepspeed(deepspeedSettings(plan.zero!, plan.dp, rank, { ...plan.deepspeed, offloadOptimizer: plan.offload?.optimizer === true, offloadParam: plan.offload?.parameters === true }));
  }
}
