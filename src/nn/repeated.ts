import { fail } from '../errors.js';
import type { Layer, ModuleLayer, RepeatedBlocks } from './types.js';

/**
 * Declares a model's identical blocks for {@link ModuleLayer.repeated}: `count` blocks keyed
 * `${prefix}${i}` in `body` (the model's body: a copy of the model with another body is not
 * what the declaration describes, and estimate then traces it whole), how to build the
 * same model with another count (each count built once), and optionally one pipeline stage of
 * it (blocks [start, end), see {@link RepeatedBlocks.stage}).
 *
 * @example
 * ```ts
 * import { repeatedBlocks } from 'vram-ts';
 * const body = { kind: 'seq', className: 'Sequential', isSequential: true, children: [] } as const;
 * const blocks = repeatedBlocks(32, 'model.layers.', body, (count) => ({ kind: 'module', className: `Net${count}`, body: { kind: 'seq', className: 'Sequential', isSequential: true, children: [] } }));
 * console.log(blocks.count, blocks.withCount(3).className); // 32 Net3
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function repeatedBlocks(
  count: number,
  prefix: string,
  body: Layer,
  build: (count: number) => ModuleLayer,
  stage?: (start: number, end: number) => ModuleLayer,
): RepeatedBlocks {
  if (!Number.isSafeInteger(count) || count < 0)
    fail('bad-attribute', 'a whole number of blocks', { path: ['repeated', 'count'], expected: 'integer >= 0', received: String(count) });
  const built = new Map<number, ModuleLayer>();
  return Object.freeze({
    count,
    prefix,
    body,
    ...(stage !== undefined ? { stage } : {}),
    withCount: (n: number) => {
      let model = built.get(n);
      if (model === undefined) {
        model = build(n);
        built.set(n, model);
      }
      return model;
    },
  });
}
