/** Limits past which an input is refused up front (a VramError naming the limit) rather than computed for minutes or crashing. */
export const LIMITS = Object.freeze({
  /** Micro-batches of gradient accumulation per optimizer step. */
  microBatches: 1_000_000,
  /** Decoder layers of a config. */
  layers: 10_000,
  /** Nesting depth of a model's layers (sequences in sequences, modules around modules). */
  depth: 500,
});
