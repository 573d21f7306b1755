import { tensor } from '../tensor/spec.js';
import type { DType } from '../tensor/dtype.js';
import { dtype } from '../options.js';
import { attrsGuard } from './attrs.js';
import type { OpRule } from './types.js';

const castAttrs = attrsGuard({ fields: { dtype }, required: ['dtype'] });

/** Attributes of a dtype cast (`tensor.to(dtype)`). */
export interface CastAttrs {
  readonly dtype: DType;
}

/**
 * `x.to(dtype)`: a copy in the new dtype, nothing saved (ToCopyBackward only converts the
 * gradient back); the same tensor when the dtype already matches.
 */
export const castOp: OpRule<CastAttrs> = {
  name: 'to',
  arity: 1,
  apply([input], attrs, ctx) {
    castAttrs(attrs, ctx);
    if (input!.dtype === attrs.dtype) return { outputs: [input!], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
    return { outputs: [tensor(input!.shape, attrs.dtype)], saves: () => [] };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
