import { func, validate } from '../validate.js';
import { checkOptions } from './op.js';
import type { GraphBuilder, GraphLayer, LayerOptions, TensorRef } from './types.js';

/**
 * Custom data flow: `build` receives a builder and the input tensors and wires
 * modules and functional ops freely (attention, gates). Not a module itself: wrap it
 * in {@link module} to name it.
 *
 * @example
 * ```ts
 * import { estimate, graph, linear, mulOp, sigmoid } from 'vram-ts';
 * const glu = graph((g, [x]) => {
 *   const gate = g.apply(sigmoid({ name: 'gate' }), g.apply(linear({ out: 8, name: 'proj' }), x!));
 *   return g.call(mulOp, [x!, gate], {})[0]!;
 * });
 * console.log(estimate(glu, { input: [2, 8] }).params.total); // 72
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function graph(build: (g: GraphBuilder, inputs: readonly TensorRef[]) => TensorRef | readonly TensorRef[], options: LayerOptions = {}): GraphLayer {
  validate(build, func, ['graph', 'build']);
  checkOptions(options, {}, 'graph');
  return Object.freeze({ kind: 'graph', build, ...(options.name !== undefined ? { name: options.name } : {}) });
}
