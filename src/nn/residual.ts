import type { Layer, LayerOptions, ResidualLayer } from './types.js';
import { checkKeys } from './op.js';

/** Options of {@link residual}. */
export interface ResidualOptions extends LayerOptions {
  /** `out = body(x); out += x` (torchvision's InvertedResidual) rather than `body(x) + x`. */
  readonly inplace?: boolean;
  /** A layer applied to x before the sum (a projection shortcut). */
  readonly shortcut?: Layer;
}

/**
 * `body(x) + x`. Not a module of its own: the body's modules sit in the enclosing module.
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, residual, seq } from 'vram-ts';
 * // out += x is valid here: bn's output is not saved by anyone (after relu() it would be, and PyTorch would fail)
 * const block = residual(seq(conv2d({ out: 8, kernel: 3, padding: 1 }), bn()), { inplace: true });
 * console.log(estimate(block, { input: [1, 8, 16, 16] }).params.total); // 584 + 16
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function residual(body: Layer, options: ResidualOptions = {}): ResidualLayer {
  checkKeys(options, ['inplace', 'shortcut'], 'residual');
  return Object.freeze({
    kind: 'residual',
    body,
    inplace: options.inplace ?? false,
    ...(options.shortcut !== undefined ? { shortcut: options.shortcut } : {}),
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
