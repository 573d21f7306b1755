import { specBytes, tensor } from '../tensor/spec.js';
import { boolean, number } from '../validate.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of torch.nn.Dropout. */
export interface DropoutAttrs {
  readonly p?: number;
  readonly inplace?: boolean;
}

/** Dropout's attributes: p in [0, 1] (torch.nn.Dropout: "dropout probability has to be between 0 and 1"). */
export const DROPOUT_SCHEMA: AttrSchema = { fields: { p: number(0, 1), inplace: boolean } };

const dropoutAttrs = attrsGuard(DROPOUT_SCHEMA, true);

/**
 * Dropout. In eval mode or with p = 0 it returns its input. In training, CUDA's fused
 * native_dropout (out of place) saves a bool mask (1 byte per element); the in-place
 * path and every CPU path multiply by a noise tensor of the input's dtype and save that.
 * Under no_grad in train mode the mask is still made, and freed once the output exists.
 */
export const dropoutOp: OpRule<DropoutAttrs> = {
  name: 'dropout',
  arity: 1,
  apply([input], attrs, ctx) {
    dropoutAttrs(attrs, ctx);
    const p = attrs.p ?? 0.5;
    const inplace = attrs.inplace ?? false;
    const active = ctx.training && p > 0;
    if (!active) return { outputs: [input!], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
    const fused = ctx.device === 'cuda' && !inplace && p < 1;
    const mask = tensor(input!.shape, fused ? 'bool' : input!.dtype);
    return {
      outputs: [tensor(input!.shape, input!.dtype)],
      ...(inplace ? { alias: 'inplace' as const } : {}),
      saves: () => [{ extra: mask, label: 'mask' }],
      // Under no_grad the kernel still draws the mask (CPU: the noise tensor first), then drops it.
      forwardStepsUnrecorded: [{ alloc: 'mask', bytes: specBytes(mask) }, { results: 'outputs' }, { free: 'mask' }],
    };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
