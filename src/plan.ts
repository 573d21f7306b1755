import type { EstimateOptions } from './estimate-types.js';
import { budget as budgetCheck, ESTIMATE_FIELDS, MODEL_KEYS } from './estimate-options.js';
import { fail } from './errors.js';
import { maxFittingUpTo } from './fit.js';
import { memoryBudget } from './gpus/catalog.js';
import { LIMITS } from './limits.js';
import type { CheckpointPlan } from './trace/trace.js';
import { ENGINE_NAMES, engineNamed, PLANNED_ENGINES, type Engine } from './parallel/index.js';
import type { Layer } from './nn/types.js';
import { rankPeaks } from './ranks.js';
import { estimate, withTraces } from './estimate.js';
import { sym } from './sym/ops.js';
import { anything, arrayOf, boolean, integer, object, oneOf, show, validate, type Check } from './validate.js';

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
  /**
   * Stop at the fewest GPUs: layouts are weighed by their GPU count, smallest first, and the search
   * ends after the first count where one fits. `fewest` is the full search's; `layouts` holds only
   * those weighed (default false: every layout).
   */
  readonly fewestOnly?: boolean;
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

/** A callback (the model of one tensor- or context-parallel rank). */
const callback: Check = (value, path, issues) => {
  if (typeof value !== 'function') issues.push({ path, code: 'bad-option', message: 'must be a function', expected: '(size) => Layer', received: show(value) });
};

/** tensorParallel / contextParallel: the sizes to try (each a whole job at most) and the rank's model of each. */
const parallelSearch = object({ fields: { sizes: arrayOf(integer(1, LIMITS.ranks)), model: callback }, required: ['sizes', 'model'] });

const { input: _input, parallel: _parallel, microBatches: _microBatches, mode: _mode, ...ESTIMATE_REST } = ESTIMATE_FIELDS;

/** PlanOptions as a check: estimate's options less those the search sets itself, and the job. */
const planOptions = object({
  fields: {
    ...ESTIMATE_REST,
    mode: oneOf(['train'], 'mode'),
    sample: arrayOf(integer(1)),
    globalBatch: integer(1, LIMITS.globalBatch),
    gpu: budgetCheck,
    // Up to LIMITS.ranks GPUs: every rank of every layout is weighed.
    gpus: integer(1, LIMITS.ranks),
    engines: arrayOf(oneOf(ENGINE_NAMES, 'engine')),
    pipelines: arrayOf(integer(1, LIMITS.ranks), { min: 1 }),
    tensorParallel: parallelSearch,
    contextParallel: parallelSearch,
    zero: integer(1, 3),
    fewestOnly: boolean,
  },
  misplaced: {
    ...MODEL_KEYS,
    input: "plan builds each input itself: give one sample's shape as sample and the step's samples as globalBatch",
    parallel: 'plan lays out the ranks itself: give gpus (and engines, pipelines, tensorParallel, contextParallel to narrow or widen the search)',
    microBatches: 'plan picks the micro-batch and accumulation itself from globalBatch',
  },
  required: ['sample', 'globalBatch', 'gpu', 'gpus'],
});

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

/** One layout to try, before its micro-batch is searched: the model one rank runs (built when first asked for), and how the ranks are laid out. */
interface Candidate extends Pick<Layout, 'engine' | 'zero' | 'dp' | 'pp' | 'tp' | 'cp'> {
  readonly model: () => Layer;
}

/** A model built once, on first use. */
function once(build: () => Layer): () => Layer {
  let built: Layer | undefined;
  return () => (built ??= build());
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
      if (globalBatch % dp !== 0 || microBatchesOf(globalBatch / dp, pp).length === 0) continue;
      const dpEngines = dp === 1 ? (['single'] as const) : pp > 1 ? engines.filter((e) => engineNamed(e).pipeline === true) : engines;
      for (const engine of dpEngines) {
        for (const zero of stagesOf(engine, onlyStage)) yield { model: () => model, engine, zero, dp, pp, tp: 1, cp: 1 };
      }
    }
  }
}

/** Tensor-parallel layouts: one replica of tp ranks, or dp replicas under the engine measured around them. */
function* tensorParallelLayouts({ globalBatch, gpus, engines, tensorParallel }: Space): Generator<Candidate> {
  for (const tp of sizesOf((tensorParallel?.sizes ?? []).filter((size) => size > 1 && size <= gpus))) {
    const model = once(() => tensorParallel!.model(tp));
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
    const model = once(() => contextParallel!.model(cp));
    for (let dp = 1; dp * cp <= gpus; dp += 1) {
      if (globalBatch % dp !== 0) continue;
      for (const engine of engines) {
        for (const zero of stagesOf(engine, onlyStage)) yield { model, engine, zero, dp, pp: 1, tp: 1, cp };
      }
    }
  }
}

/** Every layout to try, in the search's order; a TP or CP model is built only when the search reaches its size. */
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
 * The options are checked first (a VramError with the path of each bad one, unknown keys
 * included); `gpus` is at most 1,024 (`LIMITS.ranks`) and a search that would estimate more than
 * 4,096 ranks (`LIMITS.planRanks`) is refused before it starts, naming what to narrow.
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
  validate(options, planOptions);
  // Every layout traces the same graphs: traced once each over the search.
  return withTraces(() => search(model, options));
}

function search(model: Layer, options: PlanOptions): PlanResult {
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
    fewestOnly,
    ...rest
  } = options;
  const budget = memoryBudget(gpu);
  const space: Space = { model, sample, globalBatch, gpus, engines, onlyStage, pipelines, tensorParallel, contextParallel };
  const choices = checkpoint === undefined ? [false] : [false, true];
  const candidates = [...layoutsToTry(space)];
  checkSearchSize(candidates, choices.length);
  const weigh = ({ model: rankModel, engine, zero, dp, pp, tp, cp }: Candidate) =>
    choices.map((checkpointing) =>
      bestLayout(rankModel(), {
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
  const layouts = fewestOnly === true ? untilOneFits(candidates, weigh) : candidates.flatMap(weigh);
  const fitting = layouts.filter((l) => l.fits).sort((a, b) => ranksOf(a) - ranksOf(b) || a.accumulation - b.accumulation || a.peak - b.peak);
  return { budget, layouts, fewest: fitting[0] };
}

/**
 * The layouts of the smallest GPU counts, count after count, until one fits: the same ones the full
 * search weighs there, in its order (a stable sort), so its tie-breaks pick the same fewest.
 */
function untilOneFits(candidates: readonly Candidate[], weigh: (c: Candidate) => Layout[]): Layout[] {
  const byCount = [...candidates].sort((a, b) => ranksOf(a) - ranksOf(b));
  const layouts: Layout[] = [];
  for (let i = 0; i < byCount.length; ) {
    const count = ranksOf(byCount[i]!);
    for (; i < byCount.length && ranksOf(byCount[i]!) === count; i += 1) layouts.push(...weigh(byCount[i]!));
    if (layouts.some((l) => l.fits)) break;
  }
  return layouts;
}

/** The ranks a layout's search estimates each time it weighs a micro-batch: one per stage where every rank is alike, else every rank. */
function ranksWeighed({ engine, zero, dp, pp, cp }: Candidate): number {
  const alike = engine === 'single' || engineNamed(engine).sameOnEveryRank({ engine, dp, ...(zero !== null ? { zero } : {}) } as never);
  return alike ? pp : dp * pp * cp;
}

/** Refuses, before any estimate, a search that would weigh more than LIMITS.planRanks ranks (minutes of estimates). */
function checkSearchSize(candidates: readonly Candidate[], choices: number): void {
  const ranks = candidates.reduce((total, candidate) => total + ranksWeighed(candidate), 0) * choices;
  if (ranks > LIMITS.planRanks)
    fail('too-many-ranks', `the search would estimate ${ranks} ranks over ${candidates.length * choices} layouts`, {
      path: ['gpus'],
      expected: `at most ${LIMITS.planRanks}: fewer gpus, fewer engines, fewer pipelines, or a global batch with fewer divisors`,
      received: String(ranks),
    });
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
  validate(layout, layoutSizes, ['layout']);
  const gpus = ranksOf(layout);
  if (!Number.isSafeInteger(gpus))
    fail('bad-option', 'dp · pp · tp · cp is past 2^53', { path: ['layout'], expected: 'a product below 2^53', received: String(gpus) });
  return gpus;
}

/** dp · pp · tp · cp of a layout known to be one. */
function ranksOf(layout: Pick<Layout, 'dp' | 'pp' | 'tp' | 'cp'>): number {
  return layout.dp * layout.pp * layout.tp * layout.cp;
}

const size = integer(1);

/** A layout as gpusOf reads it: its four sizes, and any of a Layout's other fields. */
const layoutSizes = object({
  fields: {
    dp: size,
    pp: size,
    tp: size,
    cp: size,
    ...Object.fromEntries(['engine', 'zero', 'microBatch', 'accumulation', 'checkpointing', 'peak', 'rank', 'fits'].map((key) => [key, anything])),
  },
  required: ['dp', 'pp', 'tp', 'cp'],
});

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

/**
 * The micro-batches a rank's share can be split into, largest first: divisors of the share whose
 * accumulation is at least the pipeline's pp micro-batches (1F1B) and at most LIMITS.microBatches.
 */
function microBatchesOf(share: number, pp: number): number[] {
  return divisorsDown(share).filter((micro) => share / micro >= pp && share / micro <= LIMITS.microBatches);
}

/** The divisors of n, largest first (trial division up to √n, n at most LIMITS.globalBatch). */
function divisorsDown(n: number): number[] {
  const small: number[] = [];
  const large: number[] = [];
  for (let d = 1; d * d <= n; d += 1) {
    if (n % d !== 0) continue;
    small.push(d);
    if (d * d !== n) large.push(n / d);
  }
  return [...large, ...small.reverse()];
}

/** Micro-batches weighed of a longer accumulation without pipeline stages: the first, one repeat, the last. */
export const ACCUMULATION_CAP = 3;

/** Micro-batches to try from which the search solves for the largest first (below, it checks each). */
const SOLVE_FROM = 4;

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
  // With a budget, the ranks after the first one past it are not weighed (the micro-batch does not fit).
  const stepPeak = (micro: number, within = Number.POSITIVE_INFINITY) => {
    // Without pipeline stages, the micro-batches between the first and the last repeat one another (the
    // gradients accumulate in place): the peak of m ≥ 3 is that of 3
    // (test/plan-speed.test.ts holds the law on every engine).
    const accumulation = share / micro;
    const microBatches = pp === 1 ? Math.min(accumulation, ACCUMULATION_CAP) : accumulation;
    const options = { ...estimateOnly, ...parallel, input: [micro, ...sample], microBatches, timeline: false };
    const peaks =
      engine === 'single' && pp === 1 && cp === 1 ? [estimate(model, options).bytes.peak as number] : rankPeaks(model, options, within).map((r) => r.peak);
    // A TP rank's model is rank 0's; the others differ only by the vocabulary's padding.
    const peak = Math.max(...peaks);
    return { peak, rank: peaks.indexOf(peak) };
  };
  // The peak grows with the micro-batch: solve for it once, then check each divisor below it
  // exactly (accumulation and the other ranks can add to rank 0's single-micro-batch peak). A
  // pipeline's first stage is solved with pp micro-batches in flight, its most under 1F1B.
  // With at most SOLVE_FROM − 1 micro-batches to try the exact checks decide alone (what fits exactly
  // is never above the solved bound, accumulation only adding to the peak): a solve costs about
  // what a check does, and saves only the checks of the micro-batches above the answer.
  const micros = microBatchesOf(share, pp);
  const largest =
    micros.length < SOLVE_FROM
      ? Number.POSITIVE_INFINITY
      : maxFittingUpTo(
          model,
          'B',
          {
            ...estimateOnly,
            ...parallel,
            // One symbol for every share of the search (one trace), each share's range searched alone.
            input: [sym('B', { max: Math.floor((share * dp) / pp) }), ...sample],
            ...(pp > 1 ? { microBatches: pp } : {}),
            gpu,
            // The plan compares allocated peaks with the nominal memory (below); the reserved verdict is not its yet.
            verdict: 'allocated',
          },
          Math.floor(share / pp),
        );
  const smallest = micros.at(-1)!;
  for (const micro of micros) {
    if (micro > largest) continue;
    // The smallest is weighed on every rank: if it does not fit either, its peak is the layout's (weighed once).
    const { peak, rank } = micro === smallest ? stepPeak(micro) : stepPeak(micro, budget);
    if (peak <= budget) return { engine, zero, dp, pp, tp, cp, microBatch: micro, accumulation: share / micro, checkpointing, peak, rank, fits: true };
    if (micro === smallest) return { engine, zero, dp, pp, tp, cp, microBatch: 0, accumulation: 0, checkpointing, peak, rank, fits: false };
  }
  // Not even the smallest micro-batch (one sample, unless that is more than LIMITS.microBatches steps): its step's peak says by how much.
  return { engine, zero, dp, pp, tp, cp, microBatch: 0, accumulation: 0, checkpointing, ...stepPeak(smallest), fits: false };
}
