import type { Dim } from '../../sym/expr.js';
import { specBytes, tensor } from '../../tensor/spec.js';
import type { DType } from '../../tensor/dtype.js';
import { positiveInt } from '../check.js';
import type { OpRule } from '../types.js';

const bytes = (shape: readonly Dim[], dtype: DType): Dim => specBytes(tensor(shape, dtype));

/** Attributes of {@link expertParallelRouterOp}. */
export interface ExpertParallelRouterAttrs {
  /** Experts per rank (E/e). */
  readonly localExperts: number;
  /** This rank of the expert-parallel group. */
  readonly rank: number;
}

/**
 * transformers 5.x's expert-parallel router hook (`RouterParallel`, `distributed/
 * tensor_parallel.py:700-727`): the router's weights [T, k] and global expert ids → the weights
 * with the other ranks' experts' slots zeroed (`masked_fill`, its bool mask [T, k] saved) and
 * the local ids (`fmod` by E/e, the other ranks' slots set to the sentinel E/e). Every rank
 * keeps every token: the experts then run on all T·k pairs, and their output is all-reduced in
 * place (no allocation).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { expertParallelRouterOp } from 'vram-ts/internals';
 * const r = expertParallelRouterOp.apply([tensor([32, 2], 'float32'), tensor([32, 2], 'int64')], { localExperts: 4, rank: 1 }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'float32', path: [] });
 * console.log(r.outputs.map((o) => o.dtype)); // [ 'float32', 'int64' ]
 * ```
 */
export const expertParallelRouterOp: OpRule<ExpertParallelRouterAttrs> = {
  name: 'moe_ep_router',
  arity: 2,
  apply([weights, _indices], attrs, ctx) {
    positiveInt(attrs.localExperts, 'localExperts', ctx);
    const [tokens, k] = weights!.shape as [Dim, Dim];
    const ids = bytes([tokens, k], 'int64');
    return {
      outputs: [tensor([tokens, k], weights!.dtype), tensor([tokens, k], 'int64')],
      nonDifferentiableOutputs: [1],
      saves: (needs) => (needs.inputs[0] ? [{ extra: tensor([tokens, k], 'bool'), label: "other ranks' slots" }] : []),
      // `ids // (E/e) != rank`, then the weights masked; `ids.masked_fill(-1)`, `fmod`, `== -1`,
      // `masked_fill(E/e)`: the local ids.
      forwardSteps: [
        { alloc: 'ids // local experts', bytes: ids },
        { free: 'ids // local experts' },
        { alloc: 'masked ids', bytes: ids },
        { alloc: 'fmod', bytes: ids },
        { free: 'masked ids' },
        { alloc: 'sentinel slots', bytes: bytes([tokens, k], 'bool') },
        { results: 'outputs' },
        { free: 'sentinel slots' },
        { free: 'fmod' },
      ],
      backward: () => ({ inputGrads: ['new', 'none'] }),
    };
  },
};
