import type { OpRule } from '../ops/types.js';
import { anything, object, string, validate } from '../validate.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Builds an op layer from a rule: a torch module of class `className`, or a functional call
 * when that is null. The one-line builders are this; so is any op rule a user wraps.
 *
 * @example
 * ```ts
 * import { estimate, permuteOp, seq, conv2d, layerNorm } from 'vram-ts';
 * import { opLayer } from 'vram-ts/internals';
 * // ConvNeXt's Permute([0, 2, 3, 1]) then LayerNorm over the channels
 * const toLast = opLayer(permuteOp, 'Permute', { dims: [0, 2, 3, 1] });
 * console.log(estimate(seq(conv2d({ out: 8, kernel: 1 }), toLast, layerNorm()), { input: [1, 3, 4, 4] }).modules[2]?.outputShape); // [ 1, 4, 4, 8 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function opLayer<A>(rule: OpRule<A>, className: string | null, attrs: A, options: LayerOptions = {}): OpLayer<A> {
  return Object.freeze({ kind: 'op', rule, attrs, className, ...(options.name !== undefined ? { name: options.name } : {}) });
}

/**
 * Splits the layer options (name) from an attribute object, after checking at run time that
 * it is an object whose keys are all the builder's (a misspelt `stirde` is an error naming
 * `stride`, not a silently ignored option). Values are checked by the op rule when traced.
 */
export function splitOptions<T extends LayerOptions>(input: T, keys: readonly string[], builder: string): [Omit<T, 'name'>, LayerOptions] {
  checkKeys(input, keys, builder);
  const { name, ...attrs } = input;
  return [attrs, name !== undefined ? { name } : {}];
}

/** A VramError unless `options` is an object with only these keys (and `name`); the values are checked where they are used. */
export function checkKeys(options: unknown, keys: readonly string[], builder: string): void {
  validate(options, object({ fields: { name: string, ...Object.fromEntries(keys.map((key) => [key, anything])) } }), [builder]);
}
