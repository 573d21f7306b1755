import { fail } from '../errors.js';
import { product } from '../sym/ops.js';
import { tensor } from '../tensor/spec.js';
import { anyInt, attrsGuard, noAttrs, type AttrSchema } from './attrs.js';
import { dimIndex } from './check.js';
import type { OpRule } from './types.js';

/** Attributes of flatten (torch.flatten / nn.Flatten). */
export interface FlattenAttrs {
  readonly startDim?: number;
  readonly endDim?: number;
}

/**
 * flatten's attributes: dimension indices; when both count from the same end, startDim must not
 * come after endDim (torch: "flatten() has invalid args: start_dim cannot come after end_dim").
 */
export const FLATTEN_SCHEMA: AttrSchema = {
  fields: { startDim: anyInt, endDim: anyInt },
  across: ({ startDim = 1, endDim = -1 }, report) => {
    const [start, end] = [startDim as number, endDim as number];
    if (start < 0 === end < 0 && start > end) report('startDim', 'start_dim cannot come after end_dim', `<= endDim (${end})`, start);
  },
};

const flattenAttrs = attrsGuard(FLATTEN_SCHEMA, true);

/** flatten of a contiguous tensor is a view: no new memory, nothing saved. */
export const flattenOp: OpRule<FlattenAttrs> = {
  name: 'flatten',
  arity: 1,
  apply([input], attrs, ctx) {
    flattenAttrs(attrs, ctx);
    const rank = input!.shape.length;
    const start = dimIndex(attrs.startDim ?? 1, rank, ctx, 'startDim');
    const end = dimIndex(attrs.endDim ?? -1, rank, ctx, 'endDim');
    if (start > end) {
      fail('bad-attribute', 'flatten dimensions out of range', { path: ctx.path, expected: `0 <= startDim <= endDim < ${rank}`, received: `${start}..${end}` });
    }
    const shape = [...input!.shape.slice(0, start), product(input!.shape.slice(start, end + 1)), ...input!.shape.slice(end + 1)];
    return { outputs: [tensor(shape, input!.dtype)], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
  },
};

/** nn.Identity returns its input tensor itself. */
export const identityOp: OpRule<Record<string, never>> = {
  name: 'identity',
  arity: 1,
  apply([input], attrs, ctx) {
    noAttrs(attrs, ctx);
    return { outputs: [input!], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
  },
};
