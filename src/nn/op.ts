import type { OpRule } from '../ops/types.js';
import type { LayerOptions, OpLayer } from './types.js';

/** Builds an op layer; shared by the one-line builders. */
/* @__NO_SIDE_EFFECTS__ */
export function opLayer<A>(rule: OpRule<A>, className: string | null, attrs: A, options: LayerOptions = {}): OpLayer<A> {
  return Object.freeze({ kind: 'op', rule, attrs, className, ...(options.name !== undefined ? { name: options.name } : {}) });
}

/** Splits the layer options (name) from an attribute object. */
export function splitOptions<T extends LayerOptions>(input: T): [Omit<T, 'name'>, LayerOptions] {
  const { name, ...attrs } = input;
  return [attrs, name !== undefined ? { name } : {}];
}
