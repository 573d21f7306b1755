import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { tensor } from '../tensor/spec.js';
import { concreteDim } from './check.js';
import type { OpRule, SavedRef } from './types.js';

/** Attributes of torch.nn.LayerNorm over the last dimension. */
export interface LayerNormAttrs {
  readonly eps?: number;
  readonly elementwiseAffine?: boolean;
  readonly bias?: boolean;
  /** Expected size of the last dimension. */
  readonly size?: number;
}

/**
 * native_layer_norm: saves the input, the per-row mean and rstd ([..., 1], float32 for 16-bit
 * inputs since they accumulate in float) and the weight.
 */
export const layerNormRule: OpRule<LayerNormAttrs> = {
  name: 'layer_norm',
  arity: 1,
  apply([x], attrs, ctx) {
    const size = concreteDim(x!.shape[x!.shape.length - 1]!, 'layer_norm features', ctx);
    if (attrs.size !== undefined && attrs.size !== size) fail('channel-mismatch', 'layer_norm size differs from the input features', { path: ctx.path, expected: String(attrs.size), received: String(size) });
    const affine = attrs.elementwiseAffine ?? true;
    const statShape: Dim[] = [...x!.shape.slice(0, -1), 1];
    const statDtype = x!.dtype === 'float16' || x!.dtype === 'bfloat16' ? 'float32' : x!.dtype;
    const params = affine ? [{ name: 'weight', spec: tensor([size], ctx.paramDtype) }, ...((attrs.bias ?? true) ? [{ name: 'bias', spec: tensor([size], ctx.paramDtype) }] : [])] : [];
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      params,
      saves: () => {
        const saved: SavedRef[] = [{ input: 0 }, { extra: tensor(statShape, statDtype), label: 'mean' }, { extra: tensor(statShape, statDtype), label: 'rstd' }];
        if (affine) saved.push({ param: 'weight' });
        return saved;
      },
    };
  },
};

/** Attributes of a per-feature scale by a parameter (`weight * x`, RMSNorm's last step). */
export interface ScaleAttrs {
  readonly size: number;
}

/** `weight * x` with a [size] parameter: saves x for the weight's gradient. */
export const scaleRule: OpRule<ScaleAttrs> = {
  name: 'scale',
  arity: 1,
  apply([x], attrs, ctx) {
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      params: [{ name: 'weight', spec: tensor([attrs.size], ctx.paramDtype) }],
      saves: (needs) => [...(needs.params ? [{ input: 0 }] : []), ...(needs.inputs[0] ? [{ param: 'weight' }] : [])],
    };
  },
};
