import type { StepSettings } from '../../memory/simulate.js';
import type { Layer } from '../../nn/types.js';
import type { IR } from '../../trace/ir.js';
import type { TraceOptions } from '../../trace/trace.js';
import type { ParallelPlan, RankOptions } from '../plan.js';
import { pipelineRunner, type PipelineChunk } from './runner.js';
import { pipelineActions } from './schedules.js';
import { pipelineRankModel, type PipelineRankModel } from './stages.js';
import { steadyActions } from './steady.js';

/** Whether pipeline ranks write their steady phase once (tests turn it off to compare with the whole step). */
export const STEADY = { on: true };

/** How the estimate traces a model with its options `O` (and the trace options a pipeline rank adds). */
export type RankTracer<O extends RankOptions> = (model: Layer, options: O, overrides?: Pick<TraceOptions, 'inputRequiresGrad'>) => IR;

/** A pipeline rank ready to be estimated: its stages' model traced, the options it ran with, the schedule's runner. */
export interface PipelineRank<O extends RankOptions> {
  readonly model: Layer;
  readonly ir: IR;
  readonly options: O;
  readonly run: NonNullable<StepSettings['run']>;
}

/**
 * One pipeline rank: its stages cut from the model and traced side by side, the schedule's
 * actions replayed over them (runner.ts) with the rank's data-parallel engine, if any, around
 * them. The plan was checked (the stage is below pp; training only).
 */
export function pipelineRank<O extends RankOptions>(model: Layer, options: O, plan: ParallelPlan, trace: RankTracer<O>): PipelineRank<O> {
  const pp = plan.pp!;
  const schedule = plan.schedule ?? '1f1b';
  const virtualStages = plan.virtualStages ?? (schedule === 'interleaved-1f1b' ? 2 : 1);
  const rank = plan.stage ?? 0;
  const microBatches = options.microBatches ?? 1;
  const actions = pipelineActions(schedule, pp, rank, microBatches, virtualStages);
  const { parallel: _parallel, ...alone } = options;
  // The whole model's trace gives each cut's input (its shape and dtype).
  // The options less their (optional) plan are options of the same type still.
  const whole = trace(model, { ...alone, loss: 'none', mode: 'inference' } as unknown as O);
  const boundary = (child: string) => {
    const mod = whole.modules.find((m) => m.key === child);
    return whole.tensors[mod!.inputs[0]!]!.spec;
  };
  const cut = pipelineRankModel(
    model,
    whole.inputs.map((id) => whole.tensors[id]!.spec),
    { pp, virtualStages, rank, ...(plan.splits !== undefined ? { splits: plan.splits } : {}) },
    boundary,
  );
  const rankOptions: O = { ...options, input: cut.inputs, ...(cut.final ? {} : { loss: 'none' }) };
  const ir = trace(cut.model, rankOptions, { inputRequiresGrad: cut.inputRequiresGrad });
  return {
    model: cut.model,
    ir,
    options: rankOptions,
    run: pipelineRunner({
      chunks: chunksOf(ir, cut, whole.inputs.length),
      actions,
      keepOutputs: plan.keepOutputs ?? true,
      // The steady phase written once: a rank's cost does not grow with its micro-batches.
      steady: STEADY.on ? steadyActions(actions, schedule, pp, rank, microBatches) : null,
    }),
  };
}

/** Each stage of the rank as a run of the traced rank model's ops, with what it receives and sends. */
function chunksOf(ir: IR, cut: PipelineRankModel, wholeInputs: number): PipelineChunk[] {
  let input = 0;
  return cut.stages.map((stage): PipelineChunk => {
    const mod = stage.key === '' ? null : ir.modules.find((m) => m.key === stage.key)!;
    const inputs = ir.inputs.slice(input, input + (stage.first ? wholeInputs : 1));
    input += inputs.length;
    return {
      stage: stage.stage,
      firstOp: mod?.firstOp ?? 0,
      endOp: mod === null || stage.final ? ir.ops.length : mod.endOp,
      outputs: mod?.outputs ?? ir.outputs,
      sent: stage.final ? [] : (mod?.outputs ?? ir.outputs),
      roots: [...(stage.first ? inputs : []), ...(stage.final ? ir.targets : [])],
      received: stage.first ? null : inputs[0]!,
      final: stage.final,
    };
  });
}
