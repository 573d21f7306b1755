import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
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
export const layerNormOp: OpRule<LayerNormAttrs> = {
  name: 'layer_norm',
  arity: 1,
  apply([x], attrs, ctx) {
    const size = concreteDim(x!.shape[x!.shape.length - 1]!, 'layer_norm features', ctx);
    if (attrs.size !== undefined && attrs.size !== size)
      fail('channel-mismatch', 'layer_norm size differs from the input features', { path: ctx.path, expected: String(attrs.size), received: String(size) });
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

/** `weight * x` with a [size] parameter: saves x for the weight's gradient. */
export const scaleOp: OpRule<ScaleAttrs> = {
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
    const size = concreteDim(x!.shape[x!.shape.length - 1]!, 'offset_scale features', ctx);
    if (size !== attrs.size)
      fail('channel-mismatch', 'the scale size differs from the input features', { path: ctx.path, expected: String(attrs.size), received: String(size) });
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

/**
 * `x * buffer` with a 0-dim float32 buffer the module owns (Gemma's scaled word embedding,
 * transformers 5.x: `embed_scale`): mul keeps the buffer when x needs a gradient.
 */
export const bufferScaleOp: OpRule<BufferScaleAttrs> = {
  name: 'buffer_scale',
  arity: 1,
  apply([x], attrs) {
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      buffers: [{ name: attrs.buffer, spec: tensor([], 'float32') }],
      saves: (needs) => (needs.inputs[0] ? [{ buffer: attrs.buffer }] : []),
    };
  },
};
