import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { boolean, integer, number } from '../validate.js';
import { concreteDim, expectRank } from './check.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule, SavedRef } from './types.js';

/** Attributes of a LayerNorm over the channels of [N, C, H, W] (torchvision's LayerNorm2d). */
export interface LayerNorm2dAttrs {
  readonly eps?: number;
  readonly elementwiseAffine?: boolean;
  /** Expected channels; inferred when omitted. */
  readonly channels?: number;
  /**
   * The input arrives channels-last (ConvNeXt's downsampling LayerNorm2d after a CNBlock): its
   * permute is then contiguous and neither forward nor backward copies it. Default false.
   */
  readonly channelsLast?: boolean;
}

/** LayerNorm2d's attributes: eps >= 0, channels >= 1. */
export const LAYER_NORM2D_SCHEMA: AttrSchema = {
  fields: { eps: number(0), elementwiseAffine: boolean, channels: integer(1), channelsLast: boolean },
};

const layerNorm2dAttrs = attrsGuard(LAYER_NORM2D_SCHEMA, true);

/**
 * torchvision's LayerNorm2d (ConvNeXt): `x.permute(0, 2, 3, 1)`, `F.layer_norm` over C, permute
 * back. The permuted input is not contiguous, so PyTorch 1.13's CPU `native_layer_norm` copies it
 * for the kernel (freed when it returns) and keeps the input itself, the [N, H, W, 1] mean and
 * rstd and the weight; its backward copies the incoming gradient and the input again, contiguous,
 * for the kernel (measured). The output is the [N, H, W, C] result seen as [N, C, H, W] (a
 * channels-last layout: a conv2d after it takes `channelsLast`, and so does a LayerNorm2d whose
 * input is channels-last, which then copies nothing).
 */
export const layerNorm2dOp: OpRule<LayerNorm2dAttrs> = {
  name: 'layer_norm',
  arity: 1,
  apply([x], attrs, ctx) {
    layerNorm2dAttrs(attrs, ctx);
    expectRank(x!, [4], ctx, 'layerNorm2d');
    const [n, c, h, w] = x!.shape as [Dim, Dim, Dim, Dim];
    const channels = concreteDim(c, 'layerNorm2d channels', ctx);
    if (attrs.channels !== undefined && attrs.channels !== channels)
      fail('channel-mismatch', 'layerNorm2d channels differ from the declared channels', {
        path: [...ctx.path, 'channels'],
        expected: String(attrs.channels),
        received: String(channels),
      });
    const affine = attrs.elementwiseAffine ?? true;
    const stat = tensor([n, h, w, 1], x!.dtype);
    // The permuted input needs a contiguous copy unless it is channels-last already, or has a
    // single position (an [N, C, 1, 1] input permutes to a contiguous one).
    const single = typeof h === 'number' && typeof w === 'number' && h * w === 1;
    const copies = attrs.channelsLast !== true && !single;
    const whole = copies ? specBytes(x!) : 0;
    const params = affine
      ? [
          { name: 'weight', spec: tensor([channels], ctx.paramDtype) },
          { name: 'bias', spec: tensor([channels], ctx.paramDtype) },
        ]
      : [];
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      params,
      saves: () => {
        const saved: SavedRef[] = [{ input: 0 }, { extra: stat, label: 'mean' }, { extra: stat, label: 'rstd' }];
        if (affine) saved.push({ param: 'weight' });
        return saved;
      },
      forwardSteps: copies ? [{ alloc: 'contiguous input', bytes: whole }, { results: 'outputs' }, { free: 'contiguous input' }] : [{ results: 'outputs' }],
      forwardStepsUnrecorded: [
        ...(copies ? [{ alloc: 'contiguous input', bytes: whole }] : []),
        { results: 'outputs' },
        { alloc: 'mean', bytes: specBytes(stat) },
        { alloc: 'rstd', bytes: specBytes(stat) },
        ...(copies ? [{ free: 'contiguous input' }] : []),
        { free: 'mean' },
        { free: 'rstd' },
      ],
      backward: () => ({
        steps: copies
          ? [
              { alloc: 'contiguous grad output', bytes: whole },
              { alloc: 'contiguous input', bytes: whole },
              { results: 'paramGrads' },
              { results: 'inputGrads' },
              { free: 'contiguous input' },
              { free: 'contiguous grad output' },
            ]
          : [{ results: 'paramGrads' }, { results: 'inputGrads' }],
      }),
    };
  },
};
