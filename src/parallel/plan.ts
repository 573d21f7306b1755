import { fail } from '../errors.js';
import { arrayOf, boolean, integer, object, oneOf, string, type Check } from '../validate.js';
import type { DdpKnobs } from './engines/ddp.js';
import type { DeepSpeedKnobs } from './engines/deepspeed/index.js';
import type { Fsdp2Knobs } from './engines/fsdp2.js';
import type { CommonPlan } from './engines/engine.js';
import { ENGINE_NAMES, ENGINES, engineNamed, type Engine } from './engines/index.js';
import type { MegatronKnobs } from './engines/megatron.js';

export type { Engine };

/**
 * One rank of a data-parallel job: which engine, how many ranks, which one, and the engine's
 * knobs that move memory (each engine's own, from its record). The figures of an estimate with
 * it are that rank's.
 */
export interface ParallelPlan extends Omit<CommonPlan, 'engine'>, DdpKnobs, Fsdp2Knobs, DeepSpeedKnobs, MegatronKnobs {
  /**
   * `ddp` (torch DistributedDataParallel), `zero-redundancy` (torch ZeroRedundancyOptimizer
   * over DDP: optimizer state partitioned by whole parameters), `fsdp2` (torch `fully_shard`),
   * `deepspeed` (ZeRO stages 0-3), `megatron` (Megatron-core's DistributedDataParallel and its
   * optimizers; see `megatron`). Required with more than one data-parallel rank; without it
   * a rank holds its (pipeline stage's) model alone, as on one GPU.
   */
  readonly engine?: Engine;
}

/**
 * What the parallel wing reads of the estimate's options (EstimateOptions satisfies it): the
 * plan, the mode and the micro-batches. The wing hands the options back to the estimate's tracer,
 * so it is generic over the options' own type.
 */
export interface RankOptions {
  readonly mode?: 'train' | 'inference';
  readonly microBatches?: number;
  readonly parallel?: ParallelPlan;
}

const wide = integer(1, 1_000_000);

/** The plan's schema: the common fields, with every engine's knobs (registry order) between the rank and `offload`. */
export const parallelSchema: Check = object({
  fields: {
    engine: oneOf(ENGINE_NAMES, 'engine'),
    dp: wide,
    rank: integer(0, 1_000_000),
    ...Object.assign({}, ...ENGINES.map((engine) => ({ ...engine.sharedKnobs, ...engine.knobs }))),
    offload: object({ fields: { optimizer: boolean, parameters: boolean } }),
    tp: wide,
    pp: wide,
    stage: integer(0, 1_000_000),
    schedule: oneOf(['gpipe', '1f1b', 'interleaved-1f1b'], 'schedule'),
    virtualStages: wide,
    splits: arrayOf(string),
    keepOutputs: boolean,
    cp: wide,
    ep: wide,
  },
  required: ['dp'],
});

/** Whether the plan offloads anything to host memory. */
export function offloads(plan: ParallelPlan): boolean {
  return plan.offload?.optimizer === true || plan.offload?.parameters === true;
}

const quoted = (names: readonly string[]) => names.map((name) => `'${name}'`).join(' | ');

/**
 * A plan that passed the schema, checked once: the common checks (what is not modelled, knobs
 * that mean nothing without pipeline stages, the rank's range, another engine's knobs), then the
 * engine's own. A VramError with the path of the first problem.
 */
export function checkPlan(plan: ParallelPlan): void {
  checkCombinations(plan);
  checkPipelineKnobs(plan);
  const rank = plan.rank ?? 0;
  const ranks = plan.dp * (plan.cp ?? 1);
  if (rank >= ranks)
    fail('bad-option', 'the rank must be below the number of data-parallel (times context-parallel) ranks', {
      path: ['parallel', 'rank'],
      expected: `0 .. ${ranks - 1}`,
      received: String(rank),
    });
  for (const engine of ENGINES) {
    if (engine.name === plan.engine) continue;
    for (const key of Object.keys(engine.knobs)) {
      if ((plan as unknown as Record<string, unknown>)[key] !== undefined)
        fail('bad-option', `${key} applies to engine '${engine.name}' only`, {
          path: ['parallel', key],
          expected: 'absent',
          received: plan.engine ?? 'no engine',
        });
    }
  }
  if (plan.engine !== undefined) engineNamed(plan.engine).check(plan);
}

/** The combinations of parallelism vram-ts does not model yet, and more than one rank without an engine. */
function checkCombinations(plan: ParallelPlan): void {
  const engine = plan.engine === undefined ? undefined : engineNamed(plan.engine);
  // tp, cp and ep are checked against the model it estimates (checkBuiltParallel).
  // Around tensor-parallel ranks only FSDP2 is measured (its redistribution of the vocab-parallel
  // embedding's Replicate gradient); DDP's buckets and ZeRO's partitions of DTensor gradients are not.
  if ((plan.tp ?? 1) > 1 && plan.dp > 1 && engine !== undefined && engine.tensorParallel !== true) {
    const around = ENGINES.filter((e) => e.tensorParallel === true).map((e) => e.name);
    fail(
      'not-modelled',
      `tensor parallelism under ${plan.engine} is not modelled: ${around.join(', ')} around tensor-parallel ranks is (torchtitan's 2-D layout)`,
      { path: ['parallel', 'engine'], expected: `${quoted(around)} with tp > 1 and dp > 1`, received: plan.engine! },
    );
  }
  if ((plan.cp ?? 1) > 1 && (plan.pp ?? 1) > 1)
    fail('not-modelled', 'context parallelism inside pipeline stages is not modelled', {
      path: ['parallel', 'cp'],
      expected: 'pp 1',
      received: `pp ${plan.pp}`,
    });
  if (plan.engine === undefined && plan.dp > 1)
    fail('bad-option', 'more than one data-parallel rank needs an engine', {
      path: ['parallel', 'engine'],
      expected: quoted(ENGINE_NAMES),
      received: 'undefined',
    });
  if ((plan.pp ?? 1) > 1 && plan.dp > 1 && (engine?.pipeline !== true || (plan.virtualStages ?? (plan.schedule === 'interleaved-1f1b' ? 2 : 1)) > 1)) {
    const around = ENGINES.filter((e) => e.pipeline === true).map((e) => e.name);
    fail('not-modelled', `pipeline stages are modelled alone or under ${around.join(', ')} with one stage per rank so far`, {
      path: ['parallel', 'engine'],
      expected: `dp 1, or engine ${quoted(around)} with gpipe / 1f1b`,
      received: `${plan.engine ?? 'none'} with ${plan.schedule ?? '1f1b'}`,
    });
  }
}

/** The pipeline's knobs mean nothing without pipeline stages; the stage is one of them. */
function checkPipelineKnobs(plan: ParallelPlan): void {
  for (const key of ['stage', 'schedule', 'virtualStages', 'splits', 'keepOutputs'] as const) {
    if (plan[key] !== undefined && (plan.pp ?? 1) === 1)
      fail('bad-option', `${key} applies to pipeline parallelism (pp > 1)`, { path: ['parallel', key], expected: 'absent', received: String(plan[key]) });
  }
  const stage = plan.stage ?? 0;
  if ((plan.pp ?? 1) > 1 && stage >= plan.pp!)
    fail('bad-option', 'the pipeline stage must be below the number of stages', {
      path: ['parallel', 'stage'],
      expected: `0 .. ${plan.pp! - 1}`,
      received: String(stage),
    });
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
