import { estimate, estimateFamily, withTraces } from './estimate.js';
import { familyPeaks } from './memory/rank-family.js';
import { estimateOptions } from './estimate-options.js';
import type { Estimate, EstimateOptions } from './estimate-types.js';
import { fail } from './errors.js';
import { LIMITS } from './limits.js';
import { validate } from './validate.js';
import { engineNamed, type ParallelPlan } from './parallel/index.js';
import type { Layer } from './nn/types.js';
import type { Dim } from './sym/expr.js';

/** One rank's figures in {@link estimateRanks}. */
export interface RankFigures {
  /** The global rank: data-parallel ranks within a pipeline stage, stage after stage (`stage · dp + dpRank`). */
  readonly rank: number;
  /** The pipeline stage (0 without pipeline parallelism). */
  readonly stage: number;
  /** The data-parallel rank within the stage (with context parallelism, the rank in the engine's dp · cp group). */
  readonly dpRank: number;
  /** The rank's peak over the steady step. */
  readonly peak: Dim;
  /** What the rank keeps between steps: its parameters, gradients and optimizer state. */
  readonly parameters: Dim;
  readonly gradients: Dim;
  readonly optimizer: Dim;
  /** The rank's whole estimate (breakdown, timeline as the options ask); under DDP and ZeRO-3, rank 0's for every rank. */
  readonly estimate: Estimate;
}

/**
 * The options' plan, checked before any rank is estimated: the options as estimate checks them, a
 * plan there, no rank or stage of its own (every one is listed), and at most LIMITS.ranks ranks.
 */
function checkRanksPlan(options: EstimateOptions): ParallelPlan {
  validate(options, estimateOptions);
  const plan: ParallelPlan | undefined = options.parallel;
  if (plan === undefined)
    fail('bad-option', 'every rank needs a data-parallel plan', { path: ['parallel'], expected: '{ engine, dp }', received: 'undefined' });
  for (const key of ['rank', 'stage'] as const) {
    if (plan[key] !== undefined)
      fail('bad-option', `estimateRanks lists every ${key}: leave out parallel.${key}`, {
        path: ['parallel', key],
        expected: 'absent',
        received: String(plan[key]),
      });
  }
  const sizes = { dp: plan.dp, cp: plan.cp ?? 1, pp: plan.pp ?? 1 };
  const ranks = sizes.dp * sizes.cp * sizes.pp;
  if (ranks > LIMITS.ranks) {
    const widest = (Object.keys(sizes) as (keyof typeof sizes)[]).reduce((a, b) => (sizes[b] > sizes[a] ? b : a));
    fail('too-many-ranks', `a job of ${ranks} ranks (dp · cp · pp) is more than estimateRanks lists; estimate the ranks you need with parallel.rank`, {
      path: ['parallel', widest],
      expected: `at most ${LIMITS.ranks} ranks`,
      received: `${sizes.dp} · ${sizes.cp} · ${sizes.pp}`,
    });
  }
  return plan;
}

/**
 * Every rank of a data-parallel (and pipeline-parallel) job, each estimated as
 * `estimate(model, { ...options, parallel: { ...plan, rank, stage } })` would: pipeline stages hold
 * different layers and different numbers of micro-batches in flight. Ranks differ where the engine shards unevenly: FSDP2's
 * padded last chunks, ZeroRedundancyOptimizer's greedy partition. DDP keeps the same bytes on
 * every rank (measured: worlds 2-8, first and last ranks), and DeepSpeed ZeRO-3 cuts every
 * parameter into equal (padded) partitions, so their ranks share one estimate; ZeRO-1/2's
 * gradient partitions hold whole parameters and differ by rank. The plan names no `rank` or
 * `stage` (every one is listed), and a job of more than 1,024 ranks (`LIMITS.ranks`) is a
 * VramError at its widest size rather than minutes of estimates.
 *
 * @example
 * ```ts
 * import { estimateRanks, seq, linear, relu } from 'vram-ts';
 * const model = seq(linear({ out: 256 }), relu(), linear({ out: 10 }));
 * const ranks = estimateRanks(model, { input: [8, 1000], optimizer: 'adam', parallel: { engine: 'zero-redundancy', dp: 2 } });
 * console.log(ranks.map((r) => r.optimizer)); // [ 2048000, 22608 ]
 * ```
 */
export function estimateRanks(model: Layer, options: EstimateOptions): readonly RankFigures[] {
  return withTraces(() => ranksOf(model, options));
}

function ranksOf(model: Layer, options: EstimateOptions): readonly RankFigures[] {
  const plan = checkRanksPlan(options);
  const stages = plan.pp ?? 1;
  // One device, DDP, ZeRO-3 (every rank the same ⌈n/N⌉ of each parameter, the last one's padded): the engine's record says.
  const shared = plan.engine === undefined || engineNamed(plan.engine).sameOnEveryRank(plan);
  // Context-parallel ranks are in the engine's group (dp · cp ranks; the model is one CP rank's).
  const ranks = plan.dp * (plan.cp ?? 1);
  return Array.from({ length: stages }, (_, stage) => {
    const at = (dpRank: number) => estimate(model, { ...options, parallel: { ...plan, rank: dpRank, ...(stages > 1 ? { stage } : {}) } });
    const first = at(0);
    return Array.from({ length: ranks }, (_, dpRank): RankFigures => {
      const r = dpRank === 0 || shared ? first : at(dpRank);
      return {
        rank: stage * ranks + dpRank,
        stage,
        dpRank,
        peak: r.bytes.peak,
        parameters: r.bytes.parameters,
        gradients: r.bytes.gradients,
        optimizer: r.bytes.optimizer,
        estimate: r,
      };
    });
  }).flat();
}

/**
 * Every rank's peak of the plan's group from one run where the engine can stand for them all
 * (EngineEnv.family), else rank 0's own estimate (what the run was, or is run again when the
 * family broke). The plan's `rank` is not read.
 */
export function groupPeaks(model: Layer, options: EstimateOptions): { readonly peaks: readonly number[] } | { readonly first: Estimate } {
  const ranked = options.parallel === undefined ? options : { ...options, parallel: { ...options.parallel, rank: 0 } };
  const result = estimateFamily(model, ranked);
  const program = result.steps.steady?.program;
  if (program?.ranks === undefined) return { first: result };
  return program.ranks.broken === undefined ? { peaks: familyPeaks(program) } : { first: estimate(model, ranked) };
}

/** One rank's peak in {@link rankPeaks}. */
export interface RankPeak {
  readonly rank: number;
  readonly peak: number;
}

/**
 * The peak of every rank of a concrete job, as {@link estimateRanks} gives them, for a search that
 * reads only the peaks (plan): ranks the engine's `rankKey` says have equal figures are estimated
 * once (FSDP2's full chunks, ZeroRedundancyOptimizer's equal partitions), every ZeRO-1/2 rank comes
 * from one run standing for the whole group (each rank's own blocks on top), and with `budget` the
 * ranks after the first one past it are not estimated (the layout does not fit; the peaks
 * listed then stop there).
 */
export function rankPeaks(model: Layer, options: EstimateOptions, budget = Number.POSITIVE_INFINITY): readonly RankPeak[] {
  return withTraces(() => peaksOf(model, options, budget));
}

function peaksOf(model: Layer, options: EstimateOptions, budget: number): readonly RankPeak[] {
  const plan = checkRanksPlan(options);
  const stages = plan.pp ?? 1;
  const engine = plan.engine === undefined ? undefined : engineNamed(plan.engine);
  const shared = engine === undefined || engine.sameOnEveryRank(plan);
  const ranks = plan.dp * (plan.cp ?? 1);
  const peaks: RankPeak[] = [];
  // One run for every rank where the engine can stand for them all (ZeRO-1/2).
  const group = stages === 1 && !shared && engine?.family?.(plan as never) === true ? groupPeaks(model, options) : undefined;
  if (group !== undefined && 'peaks' in group) {
    for (const [rank, peak] of group.peaks.entries()) {
      peaks.push({ rank, peak });
      if (peak > budget) break;
    }
    return peaks;
  }
  for (let stage = 0; stage < stages; stage += 1) {
    const at = (dpRank: number) => estimate(model, { ...options, parallel: { ...plan, rank: dpRank, ...(stages > 1 ? { stage } : {}) } });
    const first = group?.first ?? at(0);
    const keyOf = engine?.rankKey === undefined ? undefined : (dpRank: number) => engine.rankKey!(plan as never, ranks, dpRank, first.ir);
    const byKey = new Map<string, number>();
    for (let dpRank = 0; dpRank < ranks; dpRank += 1) {
      let peak: number;
      if (dpRank === 0 || shared) peak = first.bytes.peak as number;
      else if (keyOf === undefined) peak = at(dpRank).bytes.peak as number;
      else {
        const key = keyOf(dpRank);
        peak = byKey.get(key) ?? (at(dpRank).bytes.peak as number);
        byKey.set(key, peak);
      }
      if (dpRank === 0 && keyOf !== undefined) byKey.set(keyOf(0), peak);
      peaks.push({ rank: stage * ranks + dpRank, peak });
      if (peak > budget) return peaks;
    }
  }
  return peaks;
}
