import type { Layer, LayerOptions, SeqLayer } from './types.js';
import { arrayOf, boolean, string, validate } from '../validate.js';
import { frozenLayer, layerCheck } from './layer-check.js';
import { checkOptions } from './op.js';

/** Options of {@link seq}, given as its first argument. */
export interface SeqOptions extends LayerOptions {
  /** Class shown in reports (default `Sequential`). */
  readonly className?: string;
  /** False when the torch class is a plain nn.Module running children in order (MobileNetV3 itself). */
  readonly isSequential?: boolean;
}

/**
 * Runs layers in order, like torch.nn.Sequential: children are named `0`, `1`, …
 * unless they carry a name. A first argument that is a plain object, not a layer (layers carry a
 * `kind`), is the sequence's {@link SeqOptions}: its name, class and whether torch runs it as an
 * nn.Sequential.
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, hardswish, seq } from 'vram-ts';
 * const model = seq(conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }), bn(), hardswish({ inplace: true }));
 * console.log(estimate(model, { input: [1, 3, 224, 224] }).modules.map((m) => m.path.join('.')));
 * // [ '', '0', '1', '2' ]
 * ```
 *
 * @example
 * ```ts
 * import { estimate, linear, relu, seq } from 'vram-ts';
 * const classifier = seq({ name: 'classifier' }, linear({ out: 64 }), relu(), linear({ out: 10 }));
 * console.log(estimate(seq(classifier), { input: [2, 32] }).modules.map((m) => m.path.join('.')));
 * // [ '', 'classifier', 'classifier.0', 'classifier.1', 'classifier.2' ]
 * ```
 */
export function seq(...children: readonly Layer[]): SeqLayer;
export function seq(options: SeqOptions, ...children: readonly Layer[]): SeqLayer;
/* @__NO_SIDE_EFFECTS__ */
export function seq(...args: readonly (SeqOptions | Layer)[]): SeqLayer {
  const first = args[0];
  const given = typeof first === 'object' && first !== null && !('kind' in first);
  const options: SeqOptions = given ? first : {};
  if (given) checkOptions(options, { className: string, isSequential: boolean }, 'seq');
  const children = given ? args.slice(1) : args;
  validate(children, arrayOf(layerCheck), ['seq']);
  return Object.freeze({
    kind: 'seq',
    className: options.className ?? 'Sequential',
    isSequential: options.isSequential ?? true,
    children: Object.freeze((children as Layer[]).map((child) => frozenLayer(child))),
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
