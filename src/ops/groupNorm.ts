import { fail } from '../errors.js';
import { numel, specBytes, tensor } from '../tensor/spec.js';
import { boolean, integer, number } from '../validate.js';
import { concreteDim } from './check.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { KernelStep, OpRule, SavedRef } from './types.js';

/** Attributes of torch.nn.GroupNorm. */
export interface GroupNormAttrs {
  /** `num_groups`: channels are split into this many groups, each normalized over (C/G)·H·W. */
  readonly groups: number;
  readonly eps?: number;
  /** Learnable per-channel weight and bias (default true). */
  readonly affine?: boolean;
  /** Expected channels; inferred when omitted. */
  readonly channels?: number;
}

/**
 * GroupNorm's attributes: groups >= 1 (required), eps >= 0, and with declared channels, groups
 * dividing them (torch.nn.GroupNorm: "num_channels must be divisible by num_groups").
 */
export const GROUP_NORM_SCHEMA: AttrSchema = {
  fields: { groups: integer(1), eps: number(0), affine: boolean, channels: integer(1) },
  required: ['groups'],
  across: ({ groups, channels }, report) => {
    if (channels !== undefined && (channels as number) % (groups as number) !== 0)
      report('groups', 'num_channels must be divisible by num_groups', `a divisor of ${channels as number}`, groups);
  },
};

const groupNormAttrs = attrsGuard(GROUP_NORM_SCHEMA, true);

/**
 * native_group_norm: the output and the per-(sample, group) mean and rstd ([N, G] each, kept for
 * backward with the input and the weight: derivatives.yaml). PyTorch 1.13's CPU backward adds two
 * [N, C] scratch tensors (ds, db) before the gradients.
 *
 * @example
 * ```ts
 * import { estimate, graph } from 'vram-ts';
 * import { groupNormOp } from 'vram-ts/internals';
 * const gn = graph((g, [x]) => g.call(groupNormOp, [x!], { groups: 2 })[0]!);
 * // the input (2·4·3·3·4 B) and mean and rstd ([2, 2] each)
 * console.log(estimate(gn, { input: [2, 4, 3, 3], inputRequiresGrad: true }).bytes.activations); // 288 + 32
 * ```
 */
export const groupNormOp: OpRule<GroupNormAttrs> = {
  name: 'group_norm',
  arity: 1,
  apply([x], attrs, ctx) {
    groupNormAttrs(attrs, ctx);
    if (x!.shape.length < 2)
      fail('bad-rank', 'groupNorm needs an input [N, C, …]', { path: ctx.path, expected: 'rank >= 2', received: String(x!.shape.length) });
    const channels = concreteDim(x!.shape[1]!, 'groupNorm channels', ctx);
    const groups = attrs.groups;
    if (channels % groups !== 0)
      fail('bad-groups', 'groupNorm groups must divide the channels', {
        path: [...ctx.path, 'groups'],
        expected: `a divisor of ${channels}`,
        received: String(groups),
      });
    if (attrs.channels !== undefined && attrs.channels !== channels)
      fail('channel-mismatch', 'groupNorm channels differ from the declared channels', {
        path: [...ctx.path, 'channels'],
        expected: String(attrs.channels),
        received: String(channels),
      });
    const affine = attrs.affine ?? true;
    const n = x!.shape[0]!;
    const stats = tensor([n, groups], x!.dtype);
    const params = affine
      ? [
          { name: 'weight', spec: tensor([channels], ctx.paramDtype) },
          { name: 'bias', spec: tensor([channels], ctx.paramDtype) },
        ]
      : [];
    const scratch = specBytes(tensor([n, channels], x!.dtype));
    const cpuBackward: KernelStep[] = [
      { alloc: 'ds', bytes: scratch },
      { alloc: 'db', bytes: scratch },
      { results: 'inputGrads' },
      { results: 'paramGrads' },
      { free: 'db' },
      { free: 'ds' },
    ];
    return {
      outputs: [tensor(x!.shape, x!.dtype)],
      params,
      saves: () => {
        const saved: SavedRef[] = [{ input: 0 }, { extra: stats, label: 'mean' }, { extra: stats, label: 'rstd' }];
        if (affine) saved.push({ param: 'weight' });
        return saved;
      },
      // Without autograd the kernel still computes the statistics, dropped when it returns.
      forwardStepsUnrecorded: [
        { results: 'outputs' },
        { alloc: 'mean', bytes: specBytes(stats) },
        { alloc: 'rstd', bytes: specBytes(stats) },
        { free: 'rstd' },
        { free: 'mean' },
      ],
      macs: () => numel(x!),
      backward: () => ({ contiguousGradOutput: true, ...(ctx.device === 'cpu' ? { steps: cpuBackward } : {}) }),
    };
  },
};
