import { show, validate, type Check } from '../validate.js';
import { frozenAttrs } from '../ops/attrs.js';
import { layerCheck } from './layer-check.js';
import { opLayer } from './op.js';
import type { OpLayer } from './types.js';

/** An op layer (a builder's, or opLayer's): functional() marks only those. */
const opLayerCheck: Check = (value, path, issues) => {
  const before = issues.length;
  layerCheck(value, path, issues);
  if (issues.length === before && (value as { kind: unknown }).kind !== 'op')
    issues.push({
      path,
      code: 'bad-layer',
      message: 'functional() takes an op layer (a module has no functional form)',
      expected: 'an op layer',
      received: show(value),
    });
};

/**
 * Marks an op as a functional call (`torch.flatten(x, 1)`) rather than a module:
 * reports show no row for it, as torchsummary shows none.
 *
 * @example
 * ```ts
 * import { flatten, functional } from 'vram-ts';
 * const flat = functional(flatten());
 * console.log(flat.className); // null
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function functional<A>(layer: OpLayer<A>): OpLayer<A> {
  validate(layer, opLayerCheck, ['functional', 'layer']);
  return opLayer(layer.rule, null, frozenAttrs(layer.attrs), layer.name !== undefined ? { name: layer.name } : {});
}
