import type { OpLayer } from './types.js';

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
  return Object.freeze({ ...layer, className: null });
}
