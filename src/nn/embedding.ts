import { embeddingOp, type EmbeddingAttrs, EMBEDDING_SCHEMA } from '../ops/embedding.js';
import { frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * A token (or position) embedding table, torch.nn.Embedding: int64 ids → vectors.
 *
 * @example
 * ```ts
 * import { embedding, estimate } from 'vram-ts';
 * const r = estimate(embedding({ num: 1000, dim: 64 }), { input: [2, 16], inputDtype: 'int64', loss: 'none' });
 * console.log(r.params.total, r.bytes.activations); // 64000 256
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function embedding(options: EmbeddingAttrs & LayerOptions): OpLayer<EmbeddingAttrs> {
  const [attrs, layer] = splitOptions(options, EMBEDDING_SCHEMA.fields, 'embedding', EMBEDDING_SCHEMA.required);
  return opLayer(embeddingOp, 'Embedding', frozenAttrs(attrs), layer);
}
