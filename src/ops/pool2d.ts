import { add, product } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { expectAtLeast, expectRank, intPair } from './check.js';
import { windowOutput } from './conv2d.js';
import type { OpRule } from './types.js';

/** Attributes of avg/max pooling windows (torch.nn.AvgPool2d / MaxPool2d). */
export interface Pool2dAttrs {
  readonly kernel: number | readonly [number, number];
  readonly stride?: number | readonly [number, number];
  readonly padding?: number | readonly [number, number];
  readonly dilation?: number | readonly [number, number];
}

function poolShape(shape: readonly Dim[], attrs: Pool2dAttrs, ctx: Parameters<OpRule<Pool2dAttrs>['apply']>[2]) {
  const [kh, kw] = intPair(attrs.kernel, 'kernel', ctx, 1);
  const [sh, sw] = intPair(attrs.stride ?? attrs.kernel, 'stride', ctx, 1);
  const [ph, pw] = intPair(attrs.padding ?? 0, 'padding', ctx, 0);
  const [dh, dw] = intPair(attrs.dilation ?? 1, 'dilation', ctx, 1);
  const [n, c, h, w] = shape as [Dim, Dim, Dim, Dim];
  expectAtLeast(add(h, 2 * ph), dh * (kh - 1) + 1, ctx, 'pooling window is larger than the padded input height');
  expectAtLeast(add(w, 2 * pw), dw * (kw - 1) + 1, ctx, 'pooling window is larger than the padded input width');
  return [n, c, windowOutput(h, kh, sh, ph, ph, dh), windowOutput(w, kw, sw, pw, pw, dw)] as const;
}

/** avg_pool2d saves its input (derivatives.yaml: avg_pool2d_backward(grad, self, ...)). */
export const avgPool2dRule: OpRule<Pool2dAttrs> = {
  name: 'avg_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    expectRank(input!, [4], ctx, 'avgPool2d');
    const shape = poolShape(input!.shape, attrs, ctx);
    return { outputs: [tensor(shape, input!.dtype)], saves: () => [{ input: 0 }], backward: () => ({ contiguousGradOutput: true }) };
  },
};

/**
 * max_pool2d_with_indices saves its input and the int64 indices of the maxima. On CUDA
 * `max_pool2d` always runs the with-indices kernel, so a no-grad forward still allocates the
 * indices and drops them (measured on PyTorch 2.11); on CPU it then runs a kernel without.
 */
export const maxPool2dRule: OpRule<Pool2dAttrs> = {
  name: 'max_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    expectRank(input!, [4], ctx, 'maxPool2d');
    const shape = poolShape(input!.shape, attrs, ctx);
    const indices = tensor(shape, 'int64');
    return {
      outputs: [tensor(shape, input!.dtype)],
      saves: () => [{ input: 0 }, { extra: indices, label: 'indices' }],
      backward: () => ({ contiguousGradOutput: true }),
      ...(ctx.device === 'cuda' ? { forwardStepsUnrecorded: [{ results: 'outputs' }, { alloc: 'indices', bytes: specBytes(indices) }] } : {}),
    };
  },
};

/** Attributes of torch.nn.AdaptiveAvgPool2d. */
export interface AdaptiveAvgPool2dAttrs {
  readonly output?: number | readonly [number, number];
}

/**
 * adaptive_avg_pool2d: `_adaptive_avg_pool2d_backward(grad, self)` keeps the input, except
 * for a 1×1 output, which ATen computes as `input.mean((-1, -2), keepdim=True)`: that keeps
 * the input on PyTorch 1.13 (MeanBackward1.self) and only its sizes on 2.x (measured on both).
 */
export const adaptiveAvgPool2dRule: OpRule<AdaptiveAvgPool2dAttrs> = {
  name: 'adaptive_avg_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    expectRank(input!, [4], ctx, 'adaptiveAvgPool2d');
    const [oh, ow] = intPair(attrs.output ?? 1, 'output', ctx, 1);
    const [n, c] = input!.shape as [Dim, Dim];
    return {
      outputs: [tensor([n, c, oh, ow], input!.dtype)],
      saves: () => (oh === 1 && ow === 1 && ctx.framework !== 'torch-1.13' ? [] : [{ input: 0 }]),
      // The mean's backward expands any gradient; the pooling kernel wants it contiguous.
      backward: () => ({ contiguousGradOutput: oh !== 1 || ow !== 1 }),
      macs: () => product(input!.shape),
    };
  },
};
