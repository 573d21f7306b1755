import { fail } from '../errors.js';
import { dimKey, type Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import { mul, product } from '../sym/ops.js';
import { tensor } from '../tensor/spec.js';
import { broadcastShape } from './merge.js';
import { noAttrs } from './attrs.js';
import type { OpRule, SavedRef } from './types.js';

/**
 * Batched `a @ b` ([..., n, k] @ [..., k, p]). Runs as bmm, whose derivative formulas use the
 * other operand: a is saved when b needs a gradient and b when a does. (Operands that cannot
 * be reshaped as a view are copied first; graph builders make those copies explicit.)
 */
export const matmulOp: OpRule<Record<string, never>> = {
  name: 'matmul',
  arity: 2,
  apply([a, b], attrs, ctx) {
    noAttrs(attrs, ctx);
    if (a!.shape.length < 2 || b!.shape.length < 2) fail('bad-rank', 'matmul operands need at least 2 dimensions', { path: ctx.path });
    const [n, k1] = a!.shape.slice(-2) as [Dim, Dim];
    const [k2, p] = b!.shape.slice(-2) as [Dim, Dim];
    if (dimKey(k1) !== dimKey(k2))
      fail('shape-mismatch', 'matmul inner dimensions differ', { path: ctx.path, expected: formatDim(k1), received: formatDim(k2) });
    const batch = broadcastShape(a!.shape.slice(0, -2), b!.shape.slice(0, -2), ctx);
    return {
      outputs: [tensor([...batch, n, p], a!.dtype)],
      saves: (needs) => {
        const saved: SavedRef[] = [];
        if (needs.inputs[1]) saved.push({ input: 0 });
        if (needs.inputs[0]) saved.push({ input: 1 });
        return saved;
      },
      macs: () => mul(product([...batch, n, p]), k1),
    };
  },
};
