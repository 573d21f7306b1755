import { fail } from '../errors.js';
import { mul, product } from '../sym/ops.js';
import { tensor } from '../tensor/spec.js';
import { concreteDim, expectRank, positiveInt } from './check.js';
import type { OpRule, SavedRef } from './types.js';

/** Attributes of torch.nn.Linear. */
export interface LinearAttrs {
  readonly out: number;
  readonly bias?: boolean;
  /** Expected input features; inferred when omitted. */
  readonly in?: number;
  /** Use an already traced parameter as the weight (tied embeddings), by its key. */
  readonly tiedWeight?: string;
  /** Hugging Face's Conv1D stores the weight as [in, out]. */
  readonly transposedWeight?: boolean;
}

/**
 * Linear: y = x·Wᵀ + b over the last dimension. It runs as addmm/mm/matmul, whose
 * autograd saves the input only when the weight needs a gradient (mat1 is kept for
 * mat2's gradient) and the weight only when the input needs one.
 */
export const linearRule: OpRule<LinearAttrs> = {
  name: 'linear',
  arity: 1,
  apply([input], attrs, ctx) {
    const rank = input!.shape.length;
    if (rank < 1) expectRank(input!, [2, 3], ctx, 'linear');
    const features = concreteDim(input!.shape[rank - 1]!, 'linear input features', ctx);
    if (attrs.in !== undefined && attrs.in !== features) {
      fail('channel-mismatch', 'linear input features differ from the declared in', { path: ctx.path, expected: String(attrs.in), received: String(features) });
    }
    const out = positiveInt(attrs.out, 'out', ctx);
    const weight = tensor(attrs.transposedWeight ? [features, out] : [out, features], ctx.paramDtype);
    const params = [attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight }];
    if (attrs.bias ?? true) params.push({ name: 'bias', spec: tensor([out], ctx.paramDtype) });
    const lead = input!.shape.slice(0, -1);
    return {
      outputs: [tensor([...lead, out], input!.dtype)],
      params,
      saves: (needs) => {
        const saved: SavedRef[] = [];
        if (needs.params) saved.push({ input: 0 });
        if (needs.inputs[0]) saved.push({ param: 'weight' });
        return saved;
      },
      macs: mul(product(lead), out * features),
    };
  },
};
