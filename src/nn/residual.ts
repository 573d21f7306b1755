import type { Layer, LayerOptions, ResidualLayer } from './types.js';
import { fail } from '../errors.js';
import { boolean, validate } from '../validate.js';
import { frozenLayer, layerCheck } from './layer-check.js';
import { checkOptions } from './op.js';

/** Options of {@link residual}. */
export interface ResidualOptions extends LayerOptions {
  /** `out = body(x); out += x` (torchvision's InvertedResidual) rather than `body(x) + x`. */
  readonly inplace?: boolean;
  /** A layer applied to x before the body (a projection shortcut run first). */
  readonly shortcut?: Layer;
  /**
   * A layer applied to x after the body, as torchvision's ResNet blocks run `downsample`
   * (`out = body(x); identity = self.downsample(x); out += identity`). Name it `downsample`.
   */
  readonly downsample?: Layer;
  /**
   * Trace a sequence body's children in the enclosing module rather than in a Sequential node of
   * their own (BasicBlock's conv1, bn1, … are its own children). Default false.
   */
  readonly inline?: boolean;
}

/**
 * `body(x) + x`. Not a module of its own: the body's modules sit in the enclosing module.
 * With `inline` a sequence body's children do too, and `downsample` runs after the body, so
 * torchvision's BasicBlock is `module(name, 'BasicBlock', seq(residual(seq(conv1, bn1, relu,
 * conv2, bn2), { inline: true, inplace: true, downsample }), relu))` with the same `relu` object.
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, residual, seq } from 'vram-ts';
 * // out += x is valid here: bn's output is not saved by anyone (after relu() it would be, and PyTorch would fail)
 * const block = residual(seq(conv2d({ out: 8, kernel: 3, padding: 1 }), bn()), { inplace: true });
 * console.log(estimate(block, { input: [1, 8, 16, 16] }).params.total); // 584 + 16
 * ```
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, module, relu, residual, seq } from 'vram-ts';
 * // torchvision's BasicBlock with a projection: module paths conv1, bn1, relu, conv2, bn2, downsample.0/1
 * const act = relu({ inplace: true, name: 'relu' });
 * const body = seq(conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false, name: 'conv1' }), bn({ name: 'bn1' }), act,
 *   conv2d({ out: 16, kernel: 3, padding: 1, bias: false, name: 'conv2' }), bn({ name: 'bn2' }));
 * const downsample = seq({ name: 'downsample' }, conv2d({ out: 16, kernel: 1, stride: 2, bias: false }), bn());
 * const block = module('0', 'BasicBlock', seq(residual(body, { inline: true, inplace: true, downsample }), act));
 * console.log(estimate(seq(block), { input: [1, 8, 16, 16] }).modules.map((m) => m.path.join('.')).slice(2));
 * // [ '0.conv1', '0.bn1', '0.relu', '0.conv2', '0.bn2', '0.downsample', '0.downsample.0', '0.downsample.1', '0.relu' ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function residual(body: Layer, options: ResidualOptions = {}): ResidualLayer {
  validate(body, layerCheck, ['residual', 'body']);
  checkOptions(options, { inplace: boolean, shortcut: layerCheck, downsample: layerCheck, inline: boolean }, 'residual');
  if (options.shortcut !== undefined && options.downsample !== undefined) {
    fail('bad-attribute', 'a residual takes a shortcut (run before the body) or a downsample (run after it), not both', {
      path: ['residual', 'downsample'],
      expected: 'one of shortcut, downsample',
    });
  }
  return Object.freeze({
    kind: 'residual',
    body: frozenLayer(body),
    inplace: options.inplace ?? false,
    ...(options.shortcut !== undefined ? { shortcut: frozenLayer(options.shortcut) } : {}),
    ...(options.downsample !== undefined ? { downsample: frozenLayer(options.downsample) } : {}),
    ...(options.inline === true ? { inline: true } : {}),
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
