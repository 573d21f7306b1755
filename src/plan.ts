import type { EstimateOptions } from './estimate-types.js';
import { fail } from './errors.js';
import { maxFitting } from './fit.js';
import { memoryBudget } from './gpus/catalog.js';
import type { CheckpointPlan } from './trace/trace.js';
import { engineNamed, PLANNED_ENGINES, type Engine } from './parallel/index.js';
import type { Layer } from './nn/types.js';
import { estimateRanks } from './ranks.js';
import { estimate } from './estimate.js';
import { sym } from './sym/ops.js';

/** What {@link plan} searches over, and the job it plans for. */
export interface PlanOptions extends Omit<EstimateOptions, 'input' | 'parallel' | 'microBatches' | 'checkpoint'> {
  /** One sample's shape without the batch: `[4096]` tokens, `[3, 224, 224]` an image. */
  readonly sample: readonly number[];
  /** Samples per optimizer step over all ranks. */
  readonly globalBatch: number;
  /** The GPU: a catalog name (`A800-80GB`), a size (`80GB`) or bytes. */
  readonly gpu: string | number;
  /** GPUs available: data-parallel sizes 1 .. gpus that divide the global batch are tried. */
  readonly gpus: number;
  /** Engines to try on more than one GPU (default all: FSDP2, ZeroRedundancyOptimizer, DDP, DeepSpeed ZeRO stages 1-3). */
  readonly engines?: readonly Engine[];
  /**
   * Pipeline sizes to try (default `[1]`: no pipeline). A layout on pp stages runs 1F1B with the
   * rank's share split into at least pp micro-batches; its data-parallel engine, with more than
   * one pipeline, is DDP (the one modelled around pipeline stages).
   */
  readonly pipelines?: readonly number[];
  /**
   * Tensor-parallel sizes to try, with the model built as one rank of each (`size` 1: the
   * model itself), e.g. `(size) => fromHFConfig(config, { tensorParallel: { size } })`. A TP
   * layout runs without pipeline stages: one replica, or dp replicas under FSDP2 (torchtitan's
   * 2-D layout, measured; TP under DDP or ZeRO is not modelled) when `engines` includes it.
   */
  readonly tensorParallel?: { readonly sizes: readonly number[]; readonly model: (size: number) => Layer };
  /**
   * Context-parallel sizes to try, with the model built as one rank of each, e.g. `(size) =>
   * fromHFConfig(config, { attention: 'sdpa', contextParallel: { size } })`. A CP layout's cp
   * ranks share each sample (the sequence cut cp ways), its data-parallel engine spans dp · cp
   * ranks; sizes whose 2 · cp does not divide the sequence are skipped.
   */
  readonly contextParallel?: { readonly sizes: readonly number[]; readonly model: (size: number) => Layer };
  /** DeepSpeed: try only this ZeRO stage (default 1, 2 and 3). */
  readonly zero?: 1 | 2 | 3;
  /** A checkpointing plan to try besides none (e.g. every decoder layer). */
  readonly checkpoint?: CheckpointPlan;
}

/** One layout of the job: how many ranks, which engine, how each rank splits its share. */
export interface Layout {
  /** `single` on one GPU. */
  readonly engine: Engine | 'single';
  /** DeepSpeed's ZeRO stage (null for the other engines). */
  readonly zero: 1 | 2 | 3 | null;
  readonly dp: number;
  /** Pipeline stages (1: none). */
  readonly pp: number;
  /** Tensor-parallel ranks per model replica (1: none). */
  readonly tp: number;
  /** Context-parallel ranks per model replica (1: none); the layout uses dp · tp · pp · cp GPUs. */
  readonly cp: number;
  /** Samples per forward on one rank (0: not even one fits). */
  readonly microBatch: number;
  /** Micro-batches per optimizer step (gradient accumulation). */
  readonly accumulation: number;
  readonly checkpointing: boolean;
  /** The highest rank peak of the step, and which rank has it. */
  readonly peak: number;
  readonly rank: number;
  readonly fits: boolean;
}

/** Every layout tried, and the one on the fewest GPUs that fits (fewest accumulation steps next). */
export interface PlanResult {
  readonly budget: number;
  readonly layouts: readonly Layout[];
  readonly fewest: Layout | undefined;
}

/** An engine's variants in the search: DeepSpeed's ZeRO stages (or the one asked for), one for the others. */
function stagesOf(engine: Engine | 'single', only: 1 | 2 | 3 | undefined): readonly (1 | 2 | 3 | null)[] {
  const stages = engine === 'single' ? undefined : engineNamed(engine).planned?.zeroStages;
  return stages === undefined ? [null] : only !== undefined ? [only] : stages;
}

/** The options `plan` checks before searching, in the order it reports them. */
function checkPlanOptions({ sample, globalBatch, gpus, pipelines = [1] }: PlanOptions): void {
  pipelines.forEach((pp, i) => {
    if (!Number.isSafeInteger(pp) || pp < 1)
      fail('bad-option', 'a pipeline size is a whole number of stages', { path: ['pipelines', i], expected: 'an integer >= 1', received: String(pp) });
  });
  if (!Number.isSafeInteger(globalBatch) || globalBatch < 1)
    fail('bad-option', 'the global batch is a whole number of samples', { path: ['globalBatch'], expected: 'an integer >= 1', received: String(globalBatch) });
  if (!Number.isSafeInteger(gpus) || gpus < 1)
    fail('bad-option', 'the number of GPUs is a whole number', { path: ['gpus'], expected: 'an integer >= 1', received: String(gpus) });
  sample.forEach((size, i) => {
    if (!Number.isSafeInteger(size) || size < 1)
      fail('bad-option', "a sample's sizes are whole numbers", { path: ['sample', i], expected: 'an integer >= 1', received: String(size) });
  });
}

/** The search's space: the options `plan`'s layout generators read, defaults filled in. */
interface Space {
  readonly model: Layer;
  readonly sample: readonly number[];
  readonly globalBatch: number;
  readonly gpus: number;
  readonly engines: readonly Engine[];
  readonly onlyStage: 1 | 2 | 3 | undefined;
  readonly pipelines: readonly number[];
  readonly tensorParallel: PlanOptions['tensorParallel'];
  readonly contextParallel: PlanOptions['contextParallel'];
}

/** One layout to try, before its micro-batch is searched: the model one rank runs, and how the ranks are laid out. */
interface Candidate extends Pick<Layout, 'engine' | 'zero' | 'dp' | 'pp' | 'tp' | 'cp'> {
  readonly model: Layer;
}

/** The sizes to try, once each, smallest first. */
function sizesOf(sizes: readonly number[]): number[] {
  return [...new Set(sizes)].sort((a, b) => a - b);
}

/** Data-parallel layouts, per pipeline size: every dp dividing the global batch, × engine × ZeRO stage. */
function* dataParallelLayouts({ model, globalBatch, gpus, engines, onlyStage, pipelines }: Space): Generator<Candidate> {
  for (const pp of sizesOf(pipelines)) {
    for (let dp = 1; dp * pp <= gpus; dp += 1) {
      // 1F1B needs pp micro-batches of at least one sample from each rank's share.
      if (globalBatch % dp !== 0 || globalBatch / dp < pp) continue;
      const dpEngines = dp === 1 ? (['single'] as const) : pp > 1 ? engines.filter((e) => engineNamed(e).pipeline === true) : engines;
      for (const engine of dpEngines) {
        for (const zero of stagesOf(engine, onlyStage)) yield { model, engine, zero, dp, pp, tp: 1, cp: 1 };
      }
    }
  }
}

/** Tensor-parallel layouts: one replica of tp ranks, or dp replicas under the engine measured around them. */
function* tensorParallelLayouts({ globalBatch, gpus, engines, tensorParallel }: Space): Generator<Candidate> {
  for (const tp of sizesOf((tensorParallel?.sizes ?? []).filter((size) => size > 1 && size <= gpus))) {
    const model = tensorParallel!.model(tp);
    // The engine measured around tensor-parallel ranks (FSDP2, torchtitan's 2-D layout), if asked for.
    const around = engines.find((e) => engineNamed(e).tensorParallel === true);
    for (let dp = 1; dp * tp <= gpus; dp += 1) {
      if (globalBatch % dp !== 0 || (dp > 1 && around === undefined)) continue;
      yield { model, engine: dp === 1 ? 'single' : around!, zero: null, dp, pp: 1, tp, cp: 1 };
    }
  }
}

/**
 * Context-parallel layouts (load-balanced: the sequence in 2 · cp pieces): dp replicas of cp
 * ranks, the engine over all dp · cp of them, × engine × ZeRO stage.
 */
function* contextParallelLayouts({ sample, globalBatch, gpus, engines, onlyStage, contextParallel }: Space): Generator<Candidate> {
  const seqLength = sample[0]!;
  for (const cp of sizesOf((contextParallel?.sizes ?? []).filter((size) => size > 1 && size <= gpus && seqLength % (2 * size) === 0))) {
    const model = contextParallel!.model(cp);
    for (let dp = 1; dp * cp <= gpus; dp += 1) {
      if (globalBatch % dp !== 0) continue;
      for (const engine of engines) {
        for (const zero of stagesOf(engine, onlyStage)) yield { model, engine, zero, dp, pp: 1, tp: 1, cp };
      }
    }
  }
}

/** Every layout to try, in the search's order; lazily, so a TP or CP model is built only when the search reaches its size. */
function* layoutsToTry(space: Space): Generator<Candidate> {
  yield* dataParallelLayouts(space);
  yield* tensorParallelLayouts(space);
  yield* contextParallelLayouts(space);
}

/**
 * Which data-parallel layouts of a training job fit a GPU, and which needs the fewest GPUs: for
 * every data-parallel size that divides the global batch, engine (DeepSpeed: each ZeRO stage) and
 * checkpointing choice, the
 * largest micro-batch dividing the rank's share whose step fits on every rank (each rank's exact
 * peak, gradient accumulation included); with `pipelines`, each pipeline size too (1F1B, every
 * stage's peak); with `tensorParallel`, each tensor-parallel size (the model built as one rank);
 * with `contextParallel`, each context-parallel size under every engine.
 *
 * @example
 * ```ts
 * import { plan, seq, linear, relu } from 'vram-ts';
 * const model = seq(linear({ out: 4096 }), relu(), linear({ out: 4096 }), relu(), linear({ out: 10 }));
 * const r = plan(model, { sample: [4096], globalBatch: 64, gpu: '512MB', gpus: 8, optimizer: 'adam' });
 * console.log(r.fewest?.dp, r.fewest?.engine, r.fewest?.microBatch); // 2 fsdp2 32
 * ```
 */
export function plan(model: Layer, options: PlanOptions): PlanResult {
  checkPlanOptions(options);
  const {
    sample,
    globalBatch,
    gpu,
    gpus,
    engines = PLANNED_ENGINES,
    zero: onlyStage,
    pipelines = [1],
    tensorParallel,
    contextParallel,
    checkpoint,
    ...rest
  } = options;
  const budget = memoryBudget(gpu);
  const space: Space = { model, sample, globalBatch, gpus, engines, onlyStage, pipelines, tensorParallel, contextParallel };
  const layouts: Layout[] = [];
  const choices = checkpoint === undefined ? [false] : [false, true];
  for (const { model: rankModel, engine, zero, dp, pp, tp, cp } of layoutsToTry(space)) {
    for (const checkpointing of choices)
      layouts.push(
        bestLayout(rankModel, {
          ...rest,
          sample,
          share: globalBatch / dp,
          dp,
          pp,
          tp,
          cp,
          engine,
          zero,
          gpu,
          budget,
          ...(checkpointing ? { checkpoint: checkpoint! } : {}),
        }),
      );
  }
  const fitting = layouts.filter((l) => l.fits).sort((a, b) => gpusOf(a) - gpusOf(b) || a.accumulation - b.accumulation || a.peak - b.peak);
  return { budget, layouts, fewest: fitting[0] };
}

/**
 * The GPUs a layout uses: dp · pp · tp · cp.
 *
 * @example
 * ```ts
 * import { gpusOf } from 'vram-ts';
 * console.log(gpusOf({ dp: 2, pp: 1, tp: 1, cp: 4 })); // 8
 * ```
 */
export function gpusOf(layout: Pick<Layout, 'dp' | 'pp' | 'tp' | 'cp'>): number {
  return layout.dp * layout.pp * layout.tp * layout.cp;
}

interface Trial extends Omit<EstimateOptions, 'input' | 'parallel' | 'microBatches'> {
  readonly sample: readonly number[];
  /** Samples per step on one rank. */
  readonly share: number;
  readonly dp: number;
  readonly pp: number;
  readonly tp: number;
  readonly cp: number;
  readonly engine: Engine | 'single';
  readonly zero: 1 | 2 | 3 | null;
  readonly gpu: string | number;
  readonly budget: number;
}

/** The largest micro-batch dividing the rank's share that fits on every rank. */
function bestLayout(model: Layer, trial: Trial): Layout {
  const { sample, share, dp, pp, tp, cp, engine, zero, gpu, budget, ...estimateOnly } = trial;
  const pipeline = pp > 1 ? { pp } : {};
  const parallel =
    engine === 'single' && pp === 1 && tp === 1 && cp === 1
      ? {}
      : {
          parallel: {
            ...(engine === 'single' ? {} : { engine }),
            dp,
            ...pipeline,
            ...(tp > 1 ? { tp } : {}),
            ...(cp > 1 ? { cp } : {}),
            ...(zero !== null ? { zero } : {}),
          },
        };
  const checkpointing = trial.checkpoint !== undefined;
  const stepPeak = (micro: number) => {
    const options = { ...estimateOnly, ...parallel, input: [micro, ...sample], microBatches: share / micro, timeline: false };
    const peaks =
      engine === 'single' && pp === 1 && cp === 1
        ? [estimate(model, options).bytes.peak as number]
        : estimateRanks(model, options).map((r) => r.peak as number);
    // A TP rank's model is rank 0's; the others differ only by the vocabulary's padding.
    const peak = Math.max(...peaks);
    return { peak, rank: peaks.indexOf(peak) };
  };
  // The peak grows with the micro-batch: solve for it once, then check each divisor below it
  // exactly (accumulation and the other ranks can add to rank 0's single-micro-batch peak). A
  // pipeline's first stage is solved with pp micro-batches in flight, its most under 1F1B.
  const largest = maxFitting(model, 'B', {
    ...estimateOnly,
    ...parallel,
    input: [sym('B', { max: Math.floor(share / pp) }), ...sample],
    ...(pp > 1 ? { microBatches: pp } : {}),
    gpu,
  });
  for (let micro = largest; micro >= 1; micro -= 1) {
    if (share % micro !== 0 || share / micro < pp) continue;
    const { peak, rank } = stepPeak(micro);
    if (peak <= budget) return { engine, zero, dp, pp, tp, cp, microBatch: micro, accumulation: share / micro, checkpointing, peak, rank, fits: true };
  }
  // Not even one sample per forward: the one-sample step's peak says by how much.
  return { engine, zero, dp, pp, tp, cp, microBatch: 0, accumulation: 0, checkpointing, ...stepPeak(1), fits: false };
}
