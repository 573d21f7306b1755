import { fail } from '../errors.js';
import type { ContextParallelBuild, Layer } from '../nn/types.js';

/**
 * Context parallelism of a decoder as PyTorch runs it (`torch.distributed.tensor.experimental.
 * context_parallel`, torch 2.13; torchtitan's `--parallelism.context_parallel_degree`): every
 * rank holds s/c positions of every activation; input ids, labels and position ids are cut
 * along the sequence before the forward; sdpa runs as ring attention over the all-gathered
 * keys and values (the default all-gather rotation), merging in float32. The builder builds one
 * rank's model; estimate it with the whole sequence as input.
 */
export interface ContextParallelOptions {
  /** Ranks in the context-parallel group (c ≥ 2). */
  readonly size: number;
  /** Which rank (default 0): with load balancing, ranks differ in which ring steps compute half a chunk. */
  readonly rank?: number;
  /**
   * `_cp_options.enable_load_balance` (default true, torch's): the sequence is cut into 2c
   * pieces, rank r keeping pieces r and 2c − 1 − r, and every ring step computes. Without it,
   * rank r keeps the r-th of c pieces and skips the steps above the diagonal.
   */
  readonly loadBalance?: boolean;
}

/**
 * Checks context-parallel options and returns what the rank's model records.
 *
 * @example
 * ```ts
 * import { contextParallelBuild } from 'vram-ts/internals';
 * console.log(contextParallelBuild({ size: 4, rank: 3 })); // { size: 4, rank: 3, loadBalance: true }
 * ```
 */
export function contextParallelBuild(
  options: ContextParallelOptions,
  path: readonly (string | number)[] = ['options', 'contextParallel'],
): ContextParallelBuild {
  const size = options.size;
  if (!Number.isSafeInteger(size) || size < 2)
    fail('bad-option', 'a context-parallel group has at least 2 ranks (size 1 is no context parallelism: leave the option out)', {
      path: [...path, 'size'],
      expected: 'integer >= 2',
      received: String(size),
    });
  const rank = options.rank ?? 0;
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= size)
    fail('bad-option', 'the context-parallel rank must be below the size', { path: [...path, 'rank'], expected: `0 .. ${size - 1}`, received: String(rank) });
  return { size, rank, loadBalance: options.loadBalance ?? true };
}

/**
 * The context-parallel size a model was built for (1 when it was not).
 *
 * @example
 * ```ts
 * import { llm } from 'vram-ts';
 * import { builtContextParallel } from 'vram-ts/internals';
 * console.log(builtContextParallel(llm('Qwen2.5-0.5B', { attention: 'sdpa', contextParallel: { size: 4 } }))); // 4
 * ```
 */
export function builtContextParallel(model: Layer): number {
  return model.kind === 'module' ? (model.meta?.contextParallel?.size ?? 1) : 1;
}
