import type { Layer, LayerOptions, SeqLayer } from './types.js';
import { checkKeys } from './op.js';

/**
 * Runs layers in order, like torch.nn.Sequential: children are named `0`, `1`, …
 * unless they carry a name.
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, hardswish, seq } from 'vram-ts';
 * const model = seq(conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }), bn(), hardswish({ inplace: true }));
 * console.log(estimate(model, { input: [1, 3, 224, 224] }).modules.map((m) => m.path.join('.')));
 * // [ '', '0', '1', '2' ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function seq(...children: readonly Layer[]): SeqLayer {
  return Object.freeze({ kind: 'seq', className: 'Sequential', isSequential: true, children: Object.freeze([...children]) });
}

/** Options of {@link sequential}. */
export interface SequentialOptions extends LayerOptions {
  /** Class shown in reports (default `Sequential`). */
  readonly className?: string;
  /** False when the torch class is a plain nn.Module running children in order (MobileNetV3 itself). */
  readonly isSequential?: boolean;
}

/**
 * {@link seq} with a name and options, for sequences that are children of other modules.
 *
 * @example
 * ```ts
 * import { linear, relu, sequential } from 'vram-ts';
 * const classifier = sequential({ name: 'classifier' }, linear({ out: 64 }), relu(), linear({ out: 10 }));
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function sequential(options: SequentialOptions, ...children: readonly Layer[]): SeqLayer {
  checkKeys(options, ['className', 'isSequential'], 'sequential');
  return Object.freeze({
    kind: 'seq',
    className: options.className ?? 'Sequential',
    isSequential: options.isSequential ?? true,
    children: Object.freeze([...children]),
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
