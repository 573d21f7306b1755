import { builtContextParallel } from '../catalog/context-parallel.js';
import { builtExpertParallel } from '../catalog/moe.js';
import { builtTensorParallel } from '../catalog/tensor-parallel.js';
import { fail } from '../errors.js';
import { singleDevice } from '../memory/residency/single.js';
import type { EngineHooks, RankContext } from '../memory/residency/types.js';
import type { StepSettings } from '../memory/simulate.js';
import type { Layer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import type { IR } from '../trace/ir.js';
import { engineNamed, type EngineRecord } from './engines/index.js';
import type { EngineEnv } from './engines/engine.js';
import { unitModuleKeys } from './engines/fsdp2-units.js';
import { checkBuiltParallel, checkPlan, offloads, type ParallelPlan, type RankOptions } from './plan.js';
import { pipelineRank, type PipelineRank, type RankTracer } from './pipeline/rank.js';

export type { PipelineRank, RankTracer };

/**
 * Everything the estimate needs to know about the rank it estimates, resolved once from
 * `options.parallel` (one device when there is none): the options the rank's model is traced
 * with, whether the model may be traced with reduced repeated blocks, the pipeline rank's cut,
 * and what the training step simulates with.
 */
export interface RankSetup<O extends RankOptions> {
  /** The options the rank's model is traced with (FSDP2 mixed precision: parameters in `param_dtype`, no `precision`). */
  readonly options: O;
  /** Whether the engine's accounting needs the whole model traced (no reduced repeated blocks). */
  readonly wholeTrace: boolean;
  /** Module keys of the plan (FSDP2 units): one naming a single block makes the blocks differ. */
  readonly moduleNames: readonly string[];
  /** With pipeline stages: the rank's stages cut, traced (with the estimate's tracer) and their runner; else null. */
  readonly pipeline: ((trace: RankTracer<O>) => PipelineRank<O>) | null;
  /** The training step's residency and buffer dtype for the traced model (nothing on one device). */
  readonly step: (model: Layer, ir: IR) => Pick<StepSettings, 'residency' | 'bufferDtype'>;
}

/**
 * The one door from the estimate into the parallel wing: checks the plan once (the schema ran
 * with the estimate's options; then the common checks, the engine's own, and the parallel sizes
 * against those the model was built for), then resolves the rank. `storedDtype` is the dtype the
 * options store parameters in (read only with FSDP2 mixed precision). With `family`, the engine
 * is asked to stand for every rank of the group in one run where it can (see EngineEnv.family).
 */
export function rankSetup<O extends RankOptions>(model: Layer, options: O, storedDtype: () => DType, family = false): RankSetup<O> {
  const plan = options.parallel;
  if (plan === undefined) return { options, wholeTrace: false, moduleNames: [], pipeline: null, step: () => ({}) };
  checkPlan(plan);
  checkBuiltParallel(plan, 'tp', builtTensorParallel(model));
  checkBuiltParallel(plan, 'cp', builtContextParallel(model));
  checkBuiltParallel(plan, 'ep', builtExpertParallel(model));
  const training = (options.mode ?? 'train') === 'train';
  if ((plan.pp ?? 1) > 1 && !training) fail('not-modelled', 'a pipeline-parallel inference forward is not modelled', { path: ['parallel', 'pp'] });
  if (!training && plan.dp > 1)
    fail('not-modelled', 'a data-parallel inference forward is not modelled (estimate one rank in training, or a single device in inference)', {
      path: ['parallel'],
    });
  // FSDP2 mixed precision: the forward and backward run in param_dtype; the sharded
  // parameters, their gradients and the optimizer stay in the model's dtype.
  const param = plan.mixedPrecision?.param;
  const stored = param === undefined ? undefined : storedDtype();
  const rankOptions = param === undefined ? options : computeIn(options, param);
  const engine = plan.engine === undefined ? undefined : engineNamed(plan.engine);
  return {
    options: rankOptions,
    wholeTrace: engine?.wholeTrace ?? false,
    moduleNames: unitModuleKeys(plan.units ?? []),
    pipeline: (plan.pp ?? 1) > 1 ? (trace) => pipelineRank(model, rankOptions, plan, trace) : null,
    step: (traced, ir) => ({
      residency: residencyOf(plan, engine, { defaultUnits: defaultUnits(traced), storeDtype: stored ?? ir.settings.paramDtype, family }),
      ...(stored !== undefined ? { bufferDtype: stored } : {}),
    }),
  };
}

/** The options with parameters traced in `dtype` (and no `precision` to contradict it). */
function computeIn<O extends RankOptions>(options: O, dtype: DType): O {
  // The options less their (optional) precision, with a dtype: options of the same type still.
  const { precision: _precision, ...rest } = options as O & { readonly precision?: unknown };
  return { ...rest, dtype } as unknown as O;
}

/** FSDP's default units: a model's repeated blocks (decoder layers), else none (the root alone). */
function defaultUnits(model: Layer): readonly string[] {
  const repeated = model.kind === 'module' ? model.repeated : undefined;
  return repeated === undefined ? [] : Array.from({ length: repeated.count }, (_, i) => `${repeated.prefix}${i}`);
}

/**
 * The residency of one rank under the plan: the engine's, with the facts of the rank (its group
 * is dp · cp: context-parallel ranks hold the same weights); one device's without an engine.
 */
function residencyOf(
  plan: ParallelPlan,
  engine: EngineRecord<string, ParallelPlan> | undefined,
  rank: Pick<EngineEnv, 'defaultUnits' | 'storeDtype' | 'family'>,
): (ctx: RankContext) => EngineHooks {
  const make =
    engine === undefined ? singleDevice : engine.residency(plan, { ...rank, group: plan.dp * (plan.cp ?? 1), rank: plan.rank ?? 0, offloads: offloads(plan) });
  if (!offloads(plan)) return make;
  return (ctx) => {
    // On a CPU estimate the "device" is host memory already: moving state from CPU to CPU means nothing.
    if (ctx.ir.settings.device === 'cpu')
      fail('bad-option', "offloading to host memory needs device 'cuda': on a CPU estimate everything is host memory already", {
        path: ['parallel', 'offload'],
        expected: "absent with device 'cpu'",
        received: JSON.stringify(plan.offload),
      });
    return make(ctx);
  };
}

export { ENGINE_NAMES, ENGINES, engineNamed, PLANNED_ENGINES, type Engine } from './engines/index.js';
export { offloads, parallelSchema, type ParallelPlan } from './plan.js';
