import { add, ceilDiv, max, product, sub } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { expectAtLeast, expectRank, intPair } from './check.js';
import { boolean, intOrPair } from '../validate.js';
import { windowOutput } from './conv2d.js';
import { attrsGuard, pairOf, type AcrossReport, type AttrSchema } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of avg/max pooling windows (torch.nn.AvgPool2d / MaxPool2d). */
export interface Pool2dAttrs {
  readonly kernel: number | readonly [number, number];
  readonly stride?: number | readonly [number, number];
  readonly padding?: number | readonly [number, number];
  readonly dilation?: number | readonly [number, number];
  /**
   * `ceil_mode`: the output length rounds up, keeping a last partial window when it starts
   * inside the input or its left padding (torch's pooling_output_shape). Default false.
   */
  readonly ceilMode?: boolean;
}

/** aten's pooling_output_shape: "pad should be at most half of effective kernel size" ((k − 1)·d + 1, halved down). */
function poolAcross(attrs: Record<string, unknown>, report: AcrossReport): void {
  const [kh, kw] = pairOf(attrs.kernel, 1);
  const [ph, pw] = pairOf(attrs.padding, 0);
  const [dh, dw] = pairOf(attrs.dilation, 1);
  const [mh, mw] = [Math.trunc(((kh - 1) * dh + 1) / 2), Math.trunc(((kw - 1) * dw + 1) / 2)];
  if (ph > mh || pw > mw) report('padding', 'pad should be at most half of effective kernel size', `<= ${mh}x${mw}`, attrs.padding);
}

/** MaxPool2d's attributes: kernel (required), stride and dilation >= 1, padding >= 0 and at most half the (dilated) window. */
export const MAX_POOL2D_SCHEMA: AttrSchema = {
  fields: { kernel: intOrPair(1), stride: intOrPair(1), padding: intOrPair(0), dilation: intOrPair(1), ceilMode: boolean },
  required: ['kernel'],
  across: poolAcross,
};

/** AvgPool2d's attributes: MaxPool2d's but dilation (torch.nn.AvgPool2d takes none). */
export const AVG_POOL2D_SCHEMA: AttrSchema = {
  fields: { kernel: intOrPair(1), stride: intOrPair(1), padding: intOrPair(0), ceilMode: boolean },
  required: ['kernel'],
  across: poolAcross,
};

/** An adaptive pool's attribute: the output size, an integer >= 1 or a pair. */
export const ADAPTIVE_POOL2D_SCHEMA: AttrSchema = { fields: { output: intOrPair(1) } };

const maxPoolAttrs = attrsGuard(MAX_POOL2D_SCHEMA, true);
const avgPoolAttrs = attrsGuard(AVG_POOL2D_SCHEMA, true);
const adaptiveAttrs = attrsGuard(ADAPTIVE_POOL2D_SCHEMA, true);

/**
 * Output length of a pooling window along one axis, as torch's `pooling_output_shape`: floor
 * mode is `windowOutput`'s ⌊(L + 2p − span)/s⌋ + 1; ceil mode is ⌈(L + 2p − span)/s⌉ + 1, less one when that last
 * window would start at or past L + p, i.e. min(⌈(L + 2p − span)/s⌉, ⌈(L + p)/s⌉ − 1) + 1.
 *
 * @example
 * ```ts
 * import { poolOutput } from 'vram-ts/internals';
 * // kernel 3, stride 2, no padding: 56 → 27 in floor mode, 28 in ceil mode
 * console.log(poolOutput(56, 3, 2, 0, 1, false), poolOutput(56, 3, 2, 0, 1, true)); // 27 28
 * ```
 */
export function poolOutput(size: Dim, kernel: number, stride: number, pad: number, dilation: number, ceilMode: boolean): Dim {
  if (!ceilMode) return windowOutput(size, kernel, stride, pad, pad, dilation);
  const span = dilation * (kernel - 1) + 1;
  const rounded = ceilDiv(sub(add(size, 2 * pad), span), stride);
  // When the span less the left pad covers a stride, the last window always starts inside.
  if (span - pad >= stride && typeof size !== 'number') return add(rounded, 1);
  const starts = sub(ceilDiv(add(size, pad), stride), 1);
  // min(a, b) = a + b − max(a, b)
  return add(sub(add(rounded, starts), max(rounded, starts)), 1);
}

function poolShape(shape: readonly Dim[], attrs: Pool2dAttrs, ctx: Parameters<OpRule<Pool2dAttrs>['apply']>[2]) {
  const [kh, kw] = intPair(attrs.kernel, 'kernel', ctx, 1);
  const [sh, sw] = intPair(attrs.stride ?? attrs.kernel, 'stride', ctx, 1);
  const [ph, pw] = intPair(attrs.padding ?? 0, 'padding', ctx, 0);
  const [dh, dw] = intPair(attrs.dilation ?? 1, 'dilation', ctx, 1);
  const [n, c, h, w] = shape as [Dim, Dim, Dim, Dim];
  expectAtLeast(add(h, 2 * ph), dh * (kh - 1) + 1, ctx, 'pooling window is larger than the padded input height');
  expectAtLeast(add(w, 2 * pw), dw * (kw - 1) + 1, ctx, 'pooling window is larger than the padded input width');
  const ceil = attrs.ceilMode ?? false;
  return [n, c, poolOutput(h, kh, sh, ph, dh, ceil), poolOutput(w, kw, sw, pw, dw, ceil)] as const;
}

/** avg_pool2d saves its input (derivatives.yaml: avg_pool2d_backward(grad, self, ...)). */
export const avgPool2dOp: OpRule<Pool2dAttrs> = {
  name: 'avg_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    avgPoolAttrs(attrs, ctx);
    expectRank(input!, [4], ctx, 'avgPool2d');
    const shape = poolShape(input!.shape, attrs, ctx);
    return { outputs: [tensor(shape, input!.dtype)], saves: () => [{ input: 0 }], backward: () => ({ contiguousGradOutput: true }) };
  },
};

/**
 * max_pool2d_with_indices saves its input and the int64 indices of the maxima. On CUDA
 * `max_pool2d` always runs the with-indices kernel, so a no-grad forward still allocates the
 * indices and drops them (measured on PyTorch 2.11); so does PyTorch 1.13's CPU `max_pool2d`
 * (measured: the output, then the int64 indices, freed when it returns); 2.x on CPU runs a kernel
 * without them.
 */
export const maxPool2dOp: OpRule<Pool2dAttrs> = {
  name: 'max_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    maxPoolAttrs(attrs, ctx);
    expectRank(input!, [4], ctx, 'maxPool2d');
    const shape = poolShape(input!.shape, attrs, ctx);
    const indices = tensor(shape, 'int64');
    return {
      outputs: [tensor(shape, input!.dtype)],
      saves: () => [{ input: 0 }, { extra: indices, label: 'indices' }],
      backward: () => ({ contiguousGradOutput: true }),
      ...(ctx.device === 'cuda' || ctx.framework === 'torch-1.13'
        ? { forwardStepsUnrecorded: [{ results: 'outputs' }, { alloc: 'indices', bytes: specBytes(indices) }] }
        : {}),
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
export const adaptiveAvgPool2dOp: OpRule<AdaptiveAvgPool2dAttrs> = {
  name: 'adaptive_avg_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    adaptiveAttrs(attrs, ctx);
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

/** Attributes of torch.nn.AdaptiveMaxPool2d. */
export interface AdaptiveMaxPool2dAttrs {
  readonly output?: number | readonly [number, number];
}

/**
 * adaptive_max_pool2d returns the maxima and their int64 indices; autograd keeps the input and
 * the indices (derivatives.yaml: `adaptive_max_pool2d_backward(grad, self, result1)`). Without
 * autograd the kernel still makes the indices, dropped when it returns.
 *
 * @example
 * ```ts
 * import { estimate, graph } from 'vram-ts';
 * import { adaptiveMaxPool2dOp } from 'vram-ts/internals';
 * const pool = graph((g, [x]) => g.call(adaptiveMaxPool2dOp, [x!], { output: 2 })[0]!);
 * // the input (1·4·8·8·4 B) and the int64 indices (1·4·2·2·8 B)
 * console.log(estimate(pool, { input: [1, 4, 8, 8], inputRequiresGrad: true }).bytes.activations); // 1024 + 128
 * ```
 */
export const adaptiveMaxPool2dOp: OpRule<AdaptiveMaxPool2dAttrs> = {
  name: 'adaptive_max_pool2d',
  arity: 1,
  apply([input], attrs, ctx) {
    adaptiveAttrs(attrs, ctx);
    expectRank(input!, [4], ctx, 'adaptiveMaxPool2d');
    const [oh, ow] = intPair(attrs.output ?? 1, 'output', ctx, 1);
    const [n, c] = input!.shape as [Dim, Dim];
    const indices = tensor([n, c, oh, ow], 'int64');
    return {
      outputs: [tensor([n, c, oh, ow], input!.dtype)],
      saves: () => [{ input: 0 }, { extra: indices, label: 'indices' }],
      backward: () => ({ contiguousGradOutput: true }),
      forwardStepsUnrecorded: [{ results: 'outputs' }, { alloc: 'indices', bytes: specBytes(indices) }, { free: 'indices' }],
      macs: () => product(input!.shape),
    };
  },
};
