import type { BranchLayer, Layer, LayerOptions, Merge } from './types.js';
import { checkKeys } from './op.js';

/** Options of {@link branch}. */
export interface BranchOptions extends LayerOptions {
  /** How path outputs combine: elementwise `add` or `mul`, or `concat` along channels. */
  readonly merge: Merge;
  /** Module class shown in reports (default `Branch`). */
  readonly className?: string;
}

/**
 * Runs every path on the same input and merges the results. The paths are children
 * `0`, `1`, … of a module of its own.
 *
 * @example
 * ```ts
 * import { branch, conv2d, estimate } from 'vram-ts';
 * const inception = branch([conv2d({ out: 8, kernel: 1 }), conv2d({ out: 8, kernel: 3, padding: 1 })], { merge: 'concat' });
 * console.log(estimate(inception, { input: [1, 4, 8, 8] }).modules[0]?.outputShape); // [ 1, 16, 8, 8 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function branch(paths: readonly Layer[], options: BranchOptions): BranchLayer {
  checkKeys(options, ['merge', 'className'], 'branch');
  return Object.freeze({
    kind: 'branch',
    className: options.className ?? 'Branch',
    paths: Object.freeze([...paths]),
    merge: options.merge,
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}

/**
 * Alias of {@link branch}.
 *
 * @example
 * ```ts
 * import { identity, parallel, sigmoid } from 'vram-ts';
 * const gate = parallel([identity(), sigmoid()], { merge: 'mul' });
 * ```
 */
export const parallel = branch;
