import { fail } from '../../../errors.js';
import { deepspeed, deepspeedRankKey } from './residency.js';
import { deepspeedSettings } from './settings.js';
import { boolean, integer, object } from '../../../validate.js';
import type { CommonPlan, EngineRecord } from '../engine.js';

/** The plan keys DeepSpeed reads. */
export interface DeepSpeedKnobs {
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
}

/** Every `zero_optimization` knob vram-ts models, resolved: the plan's `deepspeed` knobs, all given (a config reader's output). */
export type DeepSpeedKnobValues = Required<NonNullable<DeepSpeedKnobs['deepspeed']>>;

/** The plan DeepSpeed reads: the common fields and its knobs. */
export type DeepSpeedPlan = CommonPlan & DeepSpeedKnobs;

/**
 * The plan under DeepSpeed: the ZeRO stage is required, stage 0 (FP16_Optimizer /
 * BF16_Optimizer) is not modelled, and `offload_param` exists at ZeRO-3 only (stages 1/2 take no
 * parameter offload config: engine.py:2415 passes only `offload_optimizer_config` to
 * DeepSpeedZeroOptimizer, so DeepSpeed would silently ignore it; here it is an error).
 */
function checkDeepSpeed(plan: DeepSpeedPlan): void {
  if (plan.offload?.parameters === true && plan.zero !== undefined && plan.zero !== 3) {
    fail('bad-option', 'DeepSpeed offloads parameters (offload_param) only under ZeRO-3; stages 1/2 ignore it (engine.py:2415)', {
      path: ['parallel', 'offload', 'parameters'],
      expected: 'zero: 3, or no parameter offload',
      received: `zero: ${plan.zero}`,
    });
  }
  if (plan.zero === undefined)
    fail('bad-option', "engine 'deepspeed' needs the ZeRO stage", { path: ['parallel', 'zero'], expected: '1 | 2 | 3', received: 'undefined' });
  if (plan.zero === 0)
    fail('not-modelled', 'DeepSpeed without ZeRO (stage 0: FP16_Optimizer / BF16_Optimizer) is not modelled', {
      path: ['parallel', 'zero'],
      expected: '1 | 2 | 3',
      received: '0',
    });
}

/**
 * DeepSpeed ZeRO stages 1-3 (with ZeRO-Offload). Its partitions, buckets and ZeRO-3's reuse
 * distance follow each tensor's place in the whole model (the whole trace); ZeRO-3 cuts every
 * parameter into equal (padded) partitions, so its ranks have the same figures, while ZeRO-1/2's
 * gradient partitions hold whole parameters and differ by rank.
 */
export const deepspeedEngine: EngineRecord<'deepspeed', DeepSpeedPlan> = {
  name: 'deepspeed',
  summary: 'DeepSpeed ZeRO: stage 1 partitions the optimizer state, 2 the gradients too, 3 the parameters too; optional CPU offload',
  knobs: {
    zero: integer(0, 3),
    deepspeed: object({
      fields: {
        reduceBucketSize: integer(0),
        overlapComm: boolean,
        prefetchBucketSize: integer(0),
        maxLiveParameters: integer(0),
        maxReuseDistance: integer(0),
        paramPersistenceThreshold: integer(0),
        modelPersistenceThreshold: integer(0),
        subGroupSize: integer(0),
      },
    }),
  },
  check: checkDeepSpeed,
  wholeTrace: true,
  sameOnEveryRank: (plan) => plan.zero === 3,
  rankKey: (plan, group, rank, ir) => deepspeedRankKey(plan.zero!, ir, group, rank),
  // ZeRO-1/2 without offload: the ranks differ only in blocks of their own (zero12Family).
  family: (plan) => (plan.zero === 1 || plan.zero === 2) && plan.offload?.optimizer !== true,
  planned: { byDefault: true, order: 3, zeroStages: [1, 2, 3] },
  residency: (plan, env) =>
    deepspeed(
      deepspeedSettings(plan.zero!, env.group, env.rank, {
        ...plan.deepspeed,
        offloadOptimizer: plan.offload?.optimizer === true,
        offloadParam: plan.offload?.parameters === true,
      }),
      env.family,
    ),
};
