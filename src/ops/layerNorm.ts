import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor, type TensorSpec } from '../tensor/spec.js';
import { boolean, integer, number, string } from '../validate.js';
import { concreteDim } from './check.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpContext, OpRule, SavedRef } from './types.js';

/** Attributes of torch.nn.LayerNorm over the last dimension. */
export interface LayerNormAttrs {
  readonly eps?: number;
  readonly elementwiseAffine?: boolean;
  readonly bias?: boolean;
  /** Expected size of the last dimension. */
  readonly size?: number;
}

/** LayerNorm's attributes: eps >= 0, size (the normalized last dimension) >= 1. */
export const LAYER_NORM_SCHEMA: AttrSchema = {
  fields: { eps: number(0), elementwiseAffine: boolean, bias: boolean, size: integer(1) },
};

const layerNormAttrs = attrsGuard(LAYER_NORM_SCHEMA, true);

/**
 * native_layer_norm: saves the input, the per-row mean and rstd ([..., 1], float32 for 16-bit
 * inputs since they accumulate in float) and the weight.
 */
export const layerNormOp: OpRule<LayerNormAttrs> = {
  name: 'layer_norm',
  arity: 1,
  apply([x], attrs, ctx) {
    layerNormAttrs(attrs, ctx);
    const size = concreteDim(x!.shape[x!.shape.length - 1]!, 'layer_norm features', ctx);
    if (attrs.size !== undefined && attrs.size !== size)
      fail('channel-mismatch', 'layer_norm size differs from the input features', {
        path: [...ctx.path, 'size'],
        expected: String(attrs.size),
        received: String(size),
      });
    const affine = attrs.elementwiseAffine ?? true;
    const statShape: Dim[] = [...x!.shape.slice(0, -1), 1];
    const statDtype = x!.dtype === 'float16' || x!.dtype === 'bfloat16' ? 'float32' : x!.dtype;
    const params = affine
      ? [{ name: 'weight', spec: tensor([size], ctx.paramDtype) }, ...((attrs.bias ?? true) ? [{ name: 'bias', spec: tensor([size], ctx.paramDtype) }] : [])]
      : [];
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      params,
      saves: () => {
        const saved: SavedRef[] = [
          { input: 0 },
          { extra: tensor(statShape, statDtype), label: 'mean' },
          { extra: tensor(statShape, statDtype), label: 'rstd' },
        ];
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

const scaleAttrs = attrsGuard({ fields: { size: integer(1) }, required: ['size'] });

/**
 * The declared size against the input's last dimension (RMSNorm's hidden size): a number that
 * differs is an error at `size`; a symbolic dimension passes.
 */
function checkScaleSize(x: TensorSpec, size: number, ctx: OpContext): void {
  const features = x.shape[x.shape.length - 1];
  if (typeof features === 'number' && features !== size)
    fail('channel-mismatch', 'the RMSNorm size differs from the input features (the last dimension)', {
      path: [...ctx.path, 'size'],
      expected: String(size),
      received: String(features),
    });
}

/** `weight * x` with a [size] parameter: saves x for the weight's gradient. */
export const scaleOp: OpRule<ScaleAttrs> = {
  name: 'scale',
  arity: 1,
  apply([x], attrs, ctx) {
    scaleAttrs(attrs, ctx);
    checkScaleSize(x!, attrs.size, ctx);
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      params: [{ name: 'weight', spec: tensor([attrs.size], ctx.paramDtype) }],
      saves: (needs) => [...(needs.params ? [{ input: 0 }] : []), ...(needs.inputs[0] ? [{ param: 'weight' }] : [])],
    };
  },
};

/**
 * Gemma's RMSNorm scale `x * (1.0 + weight.float())` with a [size] parameter: a new float32
 * [size] tensor `1 + weight` is made at every call, and mul keeps both operands (x for the
 * weight's gradient, `1 + weight` for x's). The output is float32 (x is the float32 normed
 * tensor); the weight's gradient is a full-size product summed over the leading dimensions.
 */
export const offsetScaleOp: OpRule<ScaleAttrs> = {
  name: 'offset_scale',
  arity: 1,
  apply([x], attrs, ctx) {
    scaleAttrs(attrs, ctx);
    concreteDim(x!.shape[x!.shape.length - 1]!, 'offset_scale features', ctx);
    checkScaleSize(x!, attrs.size, ctx);
    const out = tensor(x!.shape, x!.dtype === 'float64' ? 'float64' : 'float32');
    return {
      outputs: [out],
      params: [{ name: 'weight', spec: tensor([attrs.size], ctx.paramDtype) }],
      saves: (needs) => [
        ...(needs.params ? [{ input: 0 }] : []),
        ...(needs.inputs[0] ? [{ extra: tensor([attrs.size], 'float32'), label: '1 + weight' }] : []),
      ],
      backward: () => ({
        steps: [
          { results: 'inputGrads' },
          { alloc: 'grad * x (before sum)', bytes: specBytes(out) },
          { free: 'grad * x (before sum)' },
          { results: 'paramGrads' },
        ],
      }),
    };
  },
};

/** Attributes of {@link bufferScaleOp}. */
export interface BufferScaleAttrs {
  /** The 0-dim buffer's name (`embed_scale`). */
  readonly buffer: string;
}

const bufferScaleAttrs = attrsGuard({ fields: { buffer: string }, required: ['buffer'] }, true);

/**
 * `x * buffer` with a 0-dim float32 buffer the module owns (Gemma's scaled word embedding,
 * transformers 5.x: `embed_scale`): mul keeps the buffer when x needs a gradient.
 */
export const bufferScaleOp: OpRule<BufferScaleAttrs> = {
  name: 'buffer_scale',
  arity: 1,
  apply([x], attrs, ctx) {
    bufferScaleAttrs(attrs, ctx);
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      buffers: [{ name: attrs.buffer, spec: tensor([], 'float32') }],
      saves: (needs) => (needs.inputs[0] ? [{ buffer: attrs.buffer }] : []),
    };
  },
};
