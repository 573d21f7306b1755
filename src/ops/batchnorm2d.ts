import { fail } from '../errors.js';
import { numel, specBytes, tensor } from '../tensor/spec.js';
import { concreteDim, expectRank } from './check.js';
import type { Dim } from '../sym/expr.js';
import { boolean, integer, number } from '../validate.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { KernelStep, OpRule, SavedRef } from './types.js';

/** Attributes of torch.nn.BatchNorm2d. */
export interface BatchNorm2dAttrs {
  readonly eps?: number;
  readonly momentum?: number;
  readonly affine?: boolean;
  readonly trackRunningStats?: boolean;
  /** Expected channels; inferred when omitted. */
  readonly channels?: number;
}

/** BatchNorm2d's attributes: eps >= 0, momentum in [0, 1] (the running statistics' update weight), channels >= 1. */
export const BATCH_NORM2D_SCHEMA: AttrSchema = {
  fields: { eps: number(0), momentum: number(0, 1), affine: boolean, trackRunningStats: boolean, channels: integer(1) },
};

const batchNormAttrs = attrsGuard(BATCH_NORM2D_SCHEMA, true);

/**
 * BatchNorm2d. Training: autograd keeps the input, the running statistics buffers and
 * the per-channel batch mean and inverse std (native_batch_norm's save_mean/save_invstd).
 * Eval: the input and the running statistics (the batch statistics are empty tensors).
 * Measured: ../shared/reference/pytorch_saved_per_op.json.
 */
export const batchNorm2dOp: OpRule<BatchNorm2dAttrs> = {
  name: 'batch_norm',
  arity: 1,
  apply([input], attrs, ctx) {
    batchNormAttrs(attrs, ctx);
    expectRank(input!, [4], ctx, 'bn');
    const channels = concreteDim(input!.shape[1]!, 'bn channels', ctx);
    if (attrs.channels !== undefined && attrs.channels !== channels) {
      fail('channel-mismatch', 'bn channels differ from the declared channels', {
        path: [...ctx.path, 'channels'],
        expected: String(attrs.channels),
        received: String(channels),
      });
    }
    const affine = attrs.affine ?? true;
    const tracked = attrs.trackRunningStats ?? true;
    const perChannel = tensor([channels], 'float32');
    const params = affine
      ? [
          { name: 'weight', spec: tensor([channels], ctx.paramDtype) },
          { name: 'bias', spec: tensor([channels], ctx.paramDtype) },
        ]
      : [];
    const buffers = tracked
      ? [
          { name: 'running_mean', spec: perChannel },
          { name: 'running_var', spec: perChannel },
          { name: 'num_batches_tracked', spec: tensor([], 'int64') },
        ]
      : [];
    // Batch statistics are used in training, and in eval when no running stats are tracked.
    const batchStats = ctx.training || !tracked;
    return {
      outputs: [tensor(input!.shape, input!.dtype)],
      params,
      buffers,
      saves: () => {
        const saved: SavedRef[] = [{ input: 0 }];
        if (affine) saved.push({ param: 'weight' });
        if (tracked) saved.push({ buffer: 'running_mean' }, { buffer: 'running_var' });
        if (batchStats) saved.push({ extra: perChannel, label: 'save_mean' }, { extra: perChannel, label: 'save_invstd' });
        return saved;
      },
      macs: () => numel(input!),
      // PyTorch 1.13's CPU kernel: in training the batch statistics come with two more [C]
      // temporaries first; after the output, a per-channel scale and shift ([C] each) live for
      // the normalization (measured: eval and training, with and without autograd).
      ...(ctx.device === 'cpu' ? cpuForward(specBytes(perChannel), batchStats) : {}),
      // PyTorch 1.13's CPU batch_norm_backward computes through one more input-sized buffer.
      // Both backends' backward kernels take a contiguous grad_output.
      backward: () => ({
        ...(ctx.device === 'cpu'
          ? {
              steps: [
                { results: 'inputGrads' as const },
                { results: 'paramGrads' as const },
                { alloc: 'workspace', bytes: specBytes(input!) },
                { free: 'workspace' },
              ],
            }
          : {}),
        contiguousGradOutput: true,
      }),
    };
  },
};

/** The CPU kernel's forward allocations besides the output (and, recorded in training, the saved statistics). */
function cpuForward(channelBytes: Dim, batchStats: boolean): { forwardSteps: KernelStep[]; forwardStepsUnrecorded: KernelStep[] } {
  const affineSteps: KernelStep[] = [{ alloc: 'alpha', bytes: channelBytes }, { alloc: 'beta', bytes: channelBytes }, { free: 'alpha' }, { free: 'beta' }];
  if (!batchStats) {
    const steps: KernelStep[] = [{ results: 'outputs' }, ...affineSteps];
    return { forwardSteps: steps, forwardStepsUnrecorded: steps };
  }
  const temps: KernelStep[] = [
    { alloc: 'mean temp', bytes: channelBytes },
    { alloc: 'var temp', bytes: channelBytes },
    { free: 'mean temp' },
    { free: 'var temp' },
  ];
  return {
    forwardSteps: [...temps, { results: 'outputs' }, ...affineSteps],
    forwardStepsUnrecorded: [
      { alloc: 'save_mean', bytes: channelBytes },
      { alloc: 'save_invstd', bytes: channelBytes },
      ...temps,
      { results: 'outputs' },
      ...affineSteps,
      { free: 'save_mean' },
      { free: 'save_invstd' },
    ],
  };
}
