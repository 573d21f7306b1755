import { fail } from '../errors.js';
import { tensor } from '../tensor/spec.js';
import { integer, string } from '../validate.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of torch.nn.Embedding. */
export interface EmbeddingAttrs {
  readonly num: number;
  readonly dim: number;
  /** Use an already traced parameter as the table (tied weights), by key. */
  readonly tiedWeight?: string;
}

/** Embedding's attributes: num (rows) and dim >= 1, both required (torch.nn.Embedding(num_embeddings, embedding_dim)). */
export const EMBEDDING_SCHEMA: AttrSchema = { fields: { num: integer(1), dim: integer(1), tiedWeight: string }, required: ['num', 'dim'] };

const embeddingAttrs = attrsGuard(EMBEDDING_SCHEMA, true);

/**
 * Embedding lookup: ids (int64) → [..., dim] in the parameter dtype. Saves the ids for the
 * weight's gradient, which embedding_dense_backward makes as a full [num, dim] tensor.
 */
export const embeddingOp: OpRule<EmbeddingAttrs> = {
  name: 'embedding',
  arity: 1,
  apply([ids], attrs, ctx) {
    embeddingAttrs(attrs, ctx);
    if (ids!.dtype !== 'int64' && ids!.dtype !== 'int32')
      fail('bad-dtype', 'embedding takes integer ids', { path: ctx.path, expected: 'int64', received: ids!.dtype });
    const { num, dim } = attrs;
    const weight = tensor([num, dim], ctx.paramDtype);
    return {
      outputs: [tensor([...ids!.shape, dim], ctx.paramDtype)],
      params: [attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight }],
      saves: (needs) => (needs.params ? [{ input: 0 }] : []),
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};
