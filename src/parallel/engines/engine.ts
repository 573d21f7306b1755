import type { EngineHooks, RankContext } from '../../memory/residency/types.js';
import type { DType } from '../../tensor/dtype.js';
import type { Check } from '../../validate.js';

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
  /** Checks of the engine's knobs and of the common plan under this engine (VramError with a path). */
  readonly check: (plan: P) => void;
  /**
   * Whether its accounting follows each tensor's place in the whole model (partitions, buckets,
   * greedy placement), so the model cannot be traced with reduced repeated blocks.
   */
  readonly wholeTrace: boolean;
  /** Whether every rank of the group has the same figures under the plan (no uneven shards). */
  readonly sameOnEveryRank: (plan: P) => boolean;
  /** Whether `plan` searches it by default, and its variants there (DeepSpeed: one per ZeRO stage). */
  readonly planned?: { readonly byDefault: boolean };
  /** The rank's residency: the knobs with their defaults filled in, then the hooks. */
  readonly residency: (plan: P, env: EngineEnv) => (ctx: RankContext) => EngineHooks;
}
