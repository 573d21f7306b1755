/**
 * DeepSpeed ZeRO's knobs that move a rank's memory, with DeepSpeed's defaults (cfg) and what
 * the Hugging Face Trainer's `"auto"` writes (transformers `integrations/deepspeed.py`,
 * `trainer_config_finalize`: h is the model's hidden size).
 * Sources: deepspeedai/DeepSpeed edaa7221, cfg = deepspeed/runtime/zero/config.py,
 * ppc = partitioned_param_coordinator.py, po = parameter_offload.py (the list in residency.ts).
 */
export interface DeepSpeedSettings {
  /** `zero_optimization.stage`: 1 (optimizer state), 2 (+ gradients), 3 (+ parameters). Stage 0 is not modelled. */
  readonly stage: 0 | 1 | 2 | 3;
  /** Data-parallel world size N. */
  readonly shards: number;
  /** This rank (stages 1/2: partitions and the gradient partition differ by rank). */
  readonly rank: number;
  /** `reduce_bucket_size`, elements (default 5e8, cfg:113; HF "auto": h²). The IPG bucket and the "extra-large" threshold. */
  readonly reduceBucketSize: number;
  /** `overlap_comm` (default: stage == 3, cfg:138 and cfg:382-386). Stages 1/2: a second IPG buffer; stage 1: reductions in the hooks. */
  readonly overlapComm: boolean;
  /** `stage3_prefetch_bucket_size`, elements (default 5e7, cfg:215; HF "auto": ⌊0.9·h²⌋). */
  readonly prefetchBucketSize: number;
  /** `stage3_max_live_parameters` (default 1e9, cfg:238): caps prefetch only (ppc:453-454). */
  readonly maxLiveParameters: number;
  /** `stage3_max_reuse_distance`, elements (default 1e9, cfg:244). */
  readonly maxReuseDistance: number;
  /** `stage3_param_persistence_threshold`, elements (default 1e5, cfg:221, `≤` at po:319; HF "auto": 10·h). */
  readonly paramPersistenceThreshold: number;
  /** `stage3_model_persistence_threshold`, elements (default sys.maxsize, cfg:228; po:316). */
  readonly modelPersistenceThreshold: number;
  /** `sub_group_size`, elements (default 1e9, cfg:175): stage 3's fp32 gradient and optimizer tile. */
  readonly subGroupSize: number;
  /**
   * `offload_optimizer: {device: cpu}` (default off): the fp32 master, the optimizer state and the
   * fp32 gradient partition live on the host, and DeepSpeedCPUAdam / DeepSpeedCPULion steps there.
   */
  readonly offloadOptimizer: boolean;
  /** `offload_param: {device: cpu}` (ZeRO-3 only, default off): the parameters' partitions live on the host between gathers. */
  readonly offloadParam: boolean;
}

/** DeepSpeed's defaults for the size knobs (cfg); `overlapComm` defaults to `stage === 3`. */
export const DEEPSPEED_DEFAULTS = Object.freeze({
  reduceBucketSize: 500_000_000,
  prefetchBucketSize: 50_000_000,
  maxLiveParameters: 1_000_000_000,
  maxReuseDistance: 1_000_000_000,
  paramPersistenceThreshold: 100_000,
  modelPersistenceThreshold: Number.MAX_SAFE_INTEGER,
  subGroupSize: 1_000_000_000,
});

/** The settings with DeepSpeed's defaults for every knob not given. */
export function deepspeedSettings(
  stage: 0 | 1 | 2 | 3,
  shards: number,
  rank: number,
  knobs: Partial<Omit<DeepSpeedSettings, 'stage' | 'shards' | 'rank'>> = {},
): DeepSpeedSettings {
  const set = Object.fromEntries(Object.entries(knobs).filter(([, v]) => v !== undefined));
  return { stage, shards, rank, ...DEEPSPEED_DEFAULTS, overlapComm: stage === 3, offloadOptimizer: false, offloadParam: false, ...set };
}
