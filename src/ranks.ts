import { estimate, type Estimate, type EstimateOptions } from './estimate.js';
import { fail } from './errors.js';
import type { ParallelPlan } from './memory/residency/parallel.js';
import type { Layer } from './nn/types.js';
import type { Dim } from './sym/expr.js';

/** One rank's figures in {@link estimateRanks}. */
export interface RankFigures {
  readonly rank: number;
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
 * Every rank of a data-parallel job, each estimated as `estimate(model, { ...options,
 * parallel: { ...plan, rank } })` would. Ranks differ where the engine shards unevenly: FSDP2's
 * padded last chunks, ZeroRedundancyOptimizer's greedy partition. DDP keeps the same bytes on
 * every rank (measured: worlds 2-8, first and last ranks), and DeepSpeed ZeRO-3 cuts every
 * parameter into equal (padded) partitions, so their ranks share one estimate; ZeRO-1/2's
 * gradient partitions hold whole parameters and differ by rank.
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
  const plan: ParallelPlan | undefined = options.parallel;
  if (plan === undefined) fail('bad-option', 'every rank needs a data-parallel plan', { path: ['parallel'], expected: "{ engine, dp }", received: 'undefined' });
  const figures = (rank: number, r: Estimate): RankFigures => ({ rank, peak: r.bytes.peak, parameters: r.bytes.parameters, gradients: r.bytes.gradients, optimizer: r.bytes.optimizer, estimate: r });
  const at = (rank: number) => estimate(model, { ...options, parallel: { ...plan, rank } });
  // ZeRO-3 gives every rank the same ⌈n/N⌉ of each parameter (the last one's padded).
  if (plan.engine === 'ddp' || (plan.engine === 'deepspeed' && plan.zero === 3)) {
    const shared = at(0);
    return Array.from({ length: plan.dp }, (_, rank) => figures(rank, shared));
  }
  return Array.from({ length: plan.dp }, (_, rank) => figures(rank, at(rank)));
}
