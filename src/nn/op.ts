import { frozenAttrs } from '../ops/attrs.js';
import type { OpRule } from '../ops/types.js';
import { object, show, validate, type Check } from '../validate.js';
import type { LayerOptions, OpLayer } from './types.js';

/** A builder's schema: each option's check (`name` is added to every builder's). */
export type Fields = Readonly<Record<string, Check>>;

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
  return Object.freeze({ kind: 'op', rule, attrs: frozenAttrs(attrs), className, ...(options.name !== undefined ? { name: options.name } : {}) });
}

/**
 * Splits the layer options (name) from an attribute object, after checking it against the
 * builder's schema: an object whose keys are all the builder's (a misspelt `stirde` is an error
 * naming `stride`), each value of its type and range, the required ones present.
 */
export function splitOptions<T extends LayerOptions>(
  input: T,
  fields: Fields,
  builder: string,
  required: readonly string[] = [],
): [Omit<T, 'name'>, LayerOptions] {
  checkOptions(input, fields, builder, required);
  const { name, ...attrs } = input;
  return [attrs, name !== undefined ? { name } : {}];
}

/**
 * A child's name: a non-empty string, or a dotted path of non-empty names (`h.0`, a module two
 * levels down as torch's named_modules() writes it); the dot joins module paths, so no empty part.
 */
export const moduleName: Check = (value, path, issues) => {
  if (typeof value !== 'string' || value.split('.').includes(''))
    issues.push({
      path,
      code: 'bad-option',
      message: 'a module name is a non-empty string (dotted parts non-empty)',
      expected: 'string',
      received: show(value),
    });
};

/** A VramError (every problem, each with its path under `builder`) unless `options` passes the builder's schema. */
export function checkOptions(options: unknown, fields: Fields, builder: string, required: readonly string[] = []): void {
  validate(options, object({ fields: { name: moduleName, ...fields }, required }), [builder]);
}
