import type { BranchLayer, Layer, LayerOptions, Merge } from './types.js';
import { arrayOf, boolean, oneOf, string, validate } from '../validate.js';
import { frozenLayer, layerCheck } from './layer-check.js';
import { checkOptions } from './op.js';

/** Options of {@link branch}. */
export interface BranchOptions extends LayerOptions {
  /** How path outputs combine: elementwise `add` or `mul`, or `concat` along channels. */
  readonly merge: Merge;
  /** Module class shown in reports (default `Branch`). */
  readonly className?: string;
  /**
   * Trace the paths (a sequence's children) in the enclosing module, with no Branch node:
   * SqueezeNet's Fire runs expand1x1, its activation, expand3x3, its activation, then cat.
   */
  readonly inline?: boolean;
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
 *
 * @example
 * ```ts
 * import { branch, conv2d, estimate, module, relu, seq } from 'vram-ts';
 * // torchvision's SqueezeNet Fire: squeeze, then two expands concatenated, all children of Fire
 * const fire = module('3', 'Fire', seq(conv2d({ out: 16, kernel: 1, name: 'squeeze' }), relu({ inplace: true, name: 'squeeze_activation' }),
 *   branch([seq(conv2d({ out: 64, kernel: 1, name: 'expand1x1' }), relu({ inplace: true, name: 'expand1x1_activation' })),
 *           seq(conv2d({ out: 64, kernel: 3, padding: 1, name: 'expand3x3' }), relu({ inplace: true, name: 'expand3x3_activation' }))],
 *     { merge: 'concat', inline: true })));
 * console.log(estimate(seq(fire), { input: [1, 64, 8, 8] }).modules[1]?.outputShape); // [ 1, 128, 8, 8 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function branch(paths: readonly Layer[], options: BranchOptions): BranchLayer {
  validate(paths, arrayOf(layerCheck, { min: 1 }), ['branch', 'paths']);
  checkOptions(options, { merge: oneOf(['add', 'mul', 'concat'], 'merge'), className: string, inline: boolean }, 'branch', ['merge']);
  return Object.freeze({
    kind: 'branch',
    className: options.className ?? 'Branch',
    paths: Object.freeze(paths.map((path) => frozenLayer(path))),
    merge: options.merge,
    ...(options.inline === true ? { inline: true } : {}),
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
