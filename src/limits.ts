/** Limits past which an input is refused up front (a VramError naming the limit) rather than computed for minutes or crashing. */
export const LIMITS = Object.freeze({
  /** Micro-batches of gradient accumulation per optimizer step. */
  microBatches: 1_000_000,
  /** Decoder layers of a config. */
  layers: 10_000,
  /** Layers one `repeat` makes (a sequence's children are traced one by one). */
  repeat: 100_000,
  /**
   * Ranks of one job that estimateRanks lists and plan lays out (its `gpus`): ranks that differ
   * (FSDP2's shards, ZeRO-1/2's partitions) are estimated one by one, milliseconds each, and a plan
   * weighs every rank of every layout it tries, so a count past this would run for minutes (or out
   * of memory) rather than answer. 1,024 GPUs lists in seconds; for more, estimate the ranks you
   * need one at a time with `parallel.rank`.
   */
  ranks: 1024,
  /**
   * Rank estimates one plan may make (each layout's ranks, where they differ, times the checkpointing
   * choices), counted before the search starts: each is milliseconds, so 4,096 is seconds to a
   * minute; past it the search is refused with what to narrow (gpus, engines, pipelines).
   */
  planRanks: 4096,
  /** Samples of plan's global batch (the CLI's --global-batch allows as many): its divisors are found by trial division up to the square root. */
  globalBatch: 1_000_000_000,
  /** Nesting depth of a model's layers (sequences in sequences, modules around modules). */
  depth: 500,
});
