import type { RankFamily } from '../../memory/ledger.js';
import type { EngineHooks, RankContext } from '../../memory/residency/types.js';
import type { DType } from '../../tensor/dtype.js';
import type { IR } from '../../trace/ir.js';
import { oneOf, type Check } from '../../validate.js';

/** The plan's fields every engine shares: which engine, the ranks, offloading and the other parallel sizes. */
export interface CommonPlan {
  /** The engine's name (ParallelPlan narrows it to the registry's names). */
  readonly engine?: string;
  /** Data-parallel ranks (GPUs). */
  readonly dp: number;
  /** The rank to estimate (default 0; ranks differ by padding and partitions). */
  readonly rank?: number;
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

/**
 * What an engine's residency is made with besides its own knobs: facts of the model and of the
 * rank that the common plan resolves once (rankSetup), so no engine reads them again.
 */
export interface EngineEnv {
  /** Ranks in the engine's group: dp · cp (context-parallel ranks hold the same weights). */
  readonly group: number;
  /** This rank's place in the group (0 .. group − 1). */
  readonly rank: number;
  /** FSDP-style units when the plan names none: the model's repeated blocks (decoder layers). */
  readonly defaultUnits: readonly string[];
  /** The dtype parameters are stored in (FSDP2 mixed precision computes in another). */
  readonly storeDtype: DType;
  /** Whether the plan offloads anything to host memory (already checked against the engine). */
  readonly offloads: boolean;
  /**
   * Asked to stand for every rank of the group in one run where the engine can (a search reading
   * only the peaks): the log then holds each rank's own blocks ({@link RankFamily}); an engine
   * that cannot, or has no such mode, simulates `rank` alone.
   */
  readonly family: boolean;
}

/**
 * One data-parallel engine as a record: its name (written here and nowhere else), the plan keys
 * it owns with their schema, the checks of its knobs, whether its accounting needs the whole
 * model traced, which ranks it gives equal figures, and the residency factory. The registry
 * (engines/index.ts) lists the records; nothing outside parallel/engines/ names an engine.
 *
 * `P` is the plan type the engine reads (the common plan and its knobs).
 */
export interface EngineRecord<Name extends string = string, P = unknown> {
  readonly name: Name;
  /** One line for help texts and docs (what the engine is, as its users name it). */
  readonly summary: string;
  /** The plan keys only this engine reads, with their schema (another engine given them is an error). */
  readonly knobs: Readonly<Record<string, Check>>;
  /**
   * Plan keys this engine reads that other engines accept and ignore (DDP's buckets, FSDP2's
   * units: plans written for one engine run under another), with their schema.
   */
  readonly sharedKnobs?: Readonly<Record<string, Check>>;
  /** Whether it is modelled around tensor-parallel ranks (dp > 1 with tp > 1; measured layouts only). */
  readonly tensorParallel?: boolean;
  /** Whether it is modelled around pipeline stages (dp > 1 with one stage per rank). */
  readonly pipeline?: boolean;
  /** Checks of the engine's knobs and of the common plan under this engine (VramError with a path). */
  readonly check: (plan: P) => void;
  /**
   * Whether its accounting follows each tensor's place in the whole model (partitions, buckets,
   * greedy placement), so the model cannot be traced with reduced repeated blocks.
   */
  readonly wholeTrace: boolean;
  /** Whether every rank of the group has the same figures under the plan (no uneven shards). */
  readonly sameOnEveryRank: (plan: P) => boolean;
  /**
   * Where ranks differ but in few ways (FSDP2's padded last chunks): a key of what the rank's
   * figures depend on, so that ranks with equal keys are estimated once. `ir` is the rank's traced
   * model (any rank's: the trace does not depend on the rank). Absent: every rank is its own.
   */
  readonly rankKey?: (plan: P, group: number, rank: number, ir: IR) => string;
  /**
   * Whether under the plan one run may stand for every rank of the group (EngineEnv.family; the
   * engine still decides on the traced model). Absent: never.
   */
  readonly family?: (plan: P) => boolean;
  /**
   * Whether `plan` searches it by default, in which place of the default search (`order`, lowest
   * first: the order breaks ties between equally good layouts), and its variants there (DeepSpeed:
   * one per ZeRO stage).
   */
  readonly planned?: { readonly byDefault: boolean; readonly order: number; readonly zeroStages?: readonly (1 | 2 | 3)[] };
  /** The rank's residency: the knobs with their defaults filled in, then the hooks. */
  readonly residency: (plan: P, env: EngineEnv) => (ctx: RankContext) => EngineHooks;
}

/**
 * `gradientSync`: with `microBatches` > 1, which micro-batches reduce gradients: `last` (the
 * others run under DDP's `no_sync()` or FSDP2's `set_requires_gradient_sync(False)`, keeping whole
 * unsharded gradients between them) or `every`. Read by DDP, ZeroRedundancyOptimizer and FSDP2,
 * each with its own default.
 */
export interface GradientSyncKnob {
  /**
   * With `microBatches` > 1, which micro-batches reduce gradients: `last` (the others run under
   * DDP's `no_sync()` or FSDP2's `set_requires_gradient_sync(False)`, keeping whole unsharded
   * gradients between them) or `every`. Default: `last` for DDP and ZeroRedundancyOptimizer
   * (the Hugging Face Trainer's choice), `every` for FSDP2 (`fully_shard`'s own default).
   */
  readonly gradientSync?: 'every' | 'last';
}

/** The schema of `gradientSync` (one check for every engine that reads it). */
export const gradientSyncKnob: Check = oneOf(['every', 'last'], 'gradientSync');
