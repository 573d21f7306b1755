/**
 * Reading tools/oracle/pipeline_cpu.py's fixtures (torch.distributed.pipelining on PyTorch 2.13
 * CPU, one gloo process per pipeline rank) and comparing each rank of vram-ts with them. Shared
 * by the fidelity test and `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, fromHFConfig, type Layer, type ParallelPlan, type PipelineSchedule } from '../../src/index.js';
import { seqFromSpecs, type LayerSpec } from './layer-spec.js';

export interface PipelineFixture {
  readonly id: string;
  readonly case: {
    readonly model: 'sequential' | 'hf';
    /** The whole batch the schedule splits into micro-batches. */
    readonly input: readonly number[];
    readonly layers?: readonly LayerSpec[];
    readonly config?: Readonly<Record<string, unknown>>;
    readonly transformers?: string;
    readonly schedule: 'ScheduleGPipe' | 'Schedule1F1B' | 'ScheduleInterleaved1F1B';
    readonly pp: number;
    readonly virtualStages: number;
    readonly microBatches: number;
    /** Where stages 1 .. pp·v − 1 begin (top-level child indices, or decoder layers). */
    readonly split: readonly number[];
    readonly optimizer: string;
    readonly dtype?: 'float32' | 'bfloat16';
  };
  readonly env: { readonly torch: string };
  readonly schedule: { readonly returnOutputs: boolean };
  readonly ranks: readonly { readonly rank: number; readonly livePeakBytes: number; readonly optimizerStateBytes: number; readonly parametersBytes: number }[];
}

export interface PipelineComparison {
  readonly id: string;
  readonly schedule: PipelineSchedule;
  readonly rank: number;
  readonly figure: string;
  readonly pytorch: number;
  readonly ours: number;
  readonly error: number;
}

const SCHEDULES: Readonly<Record<PipelineFixture['case']['schedule'], PipelineSchedule>> = {
  ScheduleGPipe: 'gpipe',
  Schedule1F1B: '1f1b',
  ScheduleInterleaved1F1B: 'interleaved-1f1b',
};

export function loadPipelineFixtures(): PipelineFixture[] {
  return loadJsonFixtures<PipelineFixture>('pipeline-cpu');
}

function modelOf(fixture: PipelineFixture): Layer {
  const c = fixture.case;
  if (c.model === 'sequential') return seqFromSpecs(c.layers!);
  return fromHFConfig(c.config!, { transformers: c.transformers!, attention: 'eager', useCache: false });
}

/** Each rank's live peak over the measured step, its parameters and its optimizer state. */
export function comparePipelineFixture(fixture: PipelineFixture): PipelineComparison[] {
  const c = fixture.case;
  const model = modelOf(fixture);
  const schedule = SCHEDULES[c.schedule];
  const input = [c.input[0]! / c.microBatches, ...c.input.slice(1)];
  return fixture.ranks.flatMap((measured) => {
    // Split points: top-level children of the Sequential, decoder layers of the Llama.
    const splits = c.split.map((i) => (c.model === 'sequential' ? String(i) : `model.layers.${i}`));
    const parallel: ParallelPlan = {
      dp: 1,
      pp: c.pp,
      stage: measured.rank,
      schedule,
      virtualStages: c.virtualStages,
      splits,
      keepOutputs: fixture.schedule.returnOutputs,
    };
    const r = estimate(model, {
      input,
      device: 'cpu',
      framework: 'torch-2',
      optimizer: 'adam',
      microBatches: c.microBatches,
      timeline: false,
      ...(c.dtype !== undefined && c.dtype !== 'float32' ? { dtype: c.dtype } : {}),
      parallel,
    });
    const row = (figure: string, pytorch: number, ours: number): PipelineComparison => ({
      id: fixture.id,
      schedule,
      rank: measured.rank,
      figure,
      pytorch,
      ours,
      error: pytorch === 0 ? (ours === 0 ? 0 : Infinity) : (ours - pytorch) / pytorch,
    });
    return [
      row('train peak', measured.livePeakBytes, r.bytes.peak as number),
      row('parameters', measured.parametersBytes, r.bytes.parameters as number),
      row('optimizer state', measured.optimizerStateBytes, r.bytes.optimizer as number),
    ];
  });
}

/** Issue 12: per-rank peaks within 5%; parameters and optimizer state exact. */
export function pipelineTolerance(c: PipelineComparison): number {
  return c.figure === 'train peak' ? 0.05 : 0;
}
