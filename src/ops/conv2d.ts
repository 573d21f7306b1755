import { fail } from '../errors.js';
import { add, floorDiv, mul, product, sub } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor, type TensorSpec } from '../tensor/spec.js';
import { anyOf, boolean, integer, intOrPair, oneOf, type Check } from '../validate.js';
import { concreteDim, expectAtLeast, expectRank, intPair, positiveInt } from './check.js';
import { attrsGuard, pairOf, type AcrossReport, type AttrSchema } from './attrs.js';
import { channelsLastSteps, eitherSteps, mkldnnFactor, mkldnnSteps, slowSteps, type ConvGeometry, type ConvSteps } from './conv2d-cpu.js';
import type { KernelStep, OpContext, OpResult, OpRule } from './types.js';

/** Attributes of a 2-D convolution, as torch.nn.Conv2d takes them. */
export interface Conv2dAttrs {
  readonly out: number;
  readonly kernel: number | readonly [number, number];
  readonly stride?: number | readonly [number, number];
  readonly padding?: number | readonly [number, number] | 'same' | 'valid';
  readonly dilation?: number | readonly [number, number];
  readonly groups?: number;
  readonly bias?: boolean;
  /** Expected input channels; inferred from the input when omitted. */
  readonly in?: number;
  /**
   * The input arrives channels-last (a permuted NHWC tensor: ConvNeXt's convolutions after a
   * LayerNorm2d or a CNBlock). On CPU, oneDNN then convolves in NHWC (no blocked copies) and the
   * slow path copies the weight channels-last first. Default false.
   */
  readonly channelsLast?: boolean;
}

/** A padding: an integer >= 0 (or a pair of them, with `pair`), or 'same' | 'valid'. */
export function convPadding(pair: boolean): Check {
  const size = pair ? intOrPair(0) : integer(0);
  return anyOf([size, oneOf(['same', 'valid'], 'padding')], `${pair ? 'an integer >= 0 or a pair of them' : 'an integer >= 0'}, 'same' or 'valid'`);
}

/**
 * torch's _ConvNd checks: groups divide the output channels (and the declared input channels),
 * "padding='same' is not supported for strided convolutions".
 */
export function convAcross(attrs: Record<string, unknown>, report: AcrossReport): void {
  const groups = (attrs.groups as number | undefined) ?? 1;
  const out = attrs.out as number;
  if (out % groups !== 0) report('groups', 'groups must divide the output channels (out)', `a divisor of ${out}`, groups);
  const declared = attrs.in as number | undefined;
  if (declared !== undefined && declared % groups !== 0) report('groups', 'groups must divide the input channels (in)', `a divisor of ${declared}`, groups);
  if (attrs.padding === 'same' && pairOf(attrs.stride, 1).some((s) => s !== 1))
    report('padding', "padding 'same' is not supported for strided convolutions", 'stride 1', attrs.padding);
}

/** Conv2d's attributes, as torch.nn.Conv2d checks them: sizes >= 1 (padding >= 0), groups dividing the channels. */
export const CONV2D_SCHEMA: AttrSchema = {
  fields: {
    out: integer(1),
    kernel: intOrPair(1),
    stride: intOrPair(1),
    padding: convPadding(true),
    dilation: intOrPair(1),
    groups: integer(1),
    bias: boolean,
    in: integer(1),
    channelsLast: boolean,
  },
  required: ['out', 'kernel'],
  across: convAcross,
};

const conv2dAttrs = attrsGuard(CONV2D_SCHEMA, true);

/** Output length of a convolution or pooling window along one axis. */
export function windowOutput(size: Dim, kernel: number, stride: number, padBefore: number, padAfter: number, dilation: number): Dim {
  // floor((L + pad_before + pad_after - dilation·(k - 1) - 1) / stride) + 1, as torch computes it.
  return add(floorDiv(sub(add(size, padBefore + padAfter), dilation * (kernel - 1) + 1), stride), 1);
}

/** The checked channels: input (from the shape), output and groups. */
function convChannels(cIn: Dim, attrs: Conv2dAttrs, ctx: OpContext): [inChannels: number, out: number, groups: number] {
  const inChannels = concreteDim(cIn, 'conv2d input channels', ctx);
  const out = positiveInt(attrs.out, 'out', ctx);
  const groups = positiveInt(attrs.groups ?? 1, 'groups', ctx);
  if (attrs.in !== undefined && attrs.in !== inChannels) {
    fail('channel-mismatch', 'conv2d input channels differ from the declared in', {
      path: [...ctx.path, 'in'],
      expected: String(attrs.in),
      received: String(inChannels),
    });
  }
  if (inChannels % groups !== 0 || out % groups !== 0) {
    fail('bad-groups', 'groups must divide both input and output channels', {
      path: ctx.path,
      expected: `divisor of ${inChannels} and ${out}`,
      received: String(groups),
    });
  }
  return [inChannels, out, groups];
}

/** The four pads (top, bottom, left, right) and, for an odd 'same', the explicitly padded input. */
function convPads(
  input: TensorSpec,
  attrs: Conv2dAttrs,
  [kh, kw]: readonly [number, number],
  [sh, sw]: readonly [number, number],
  [dh, dw]: readonly [number, number],
  ctx: OpContext,
): { pads: [number, number, number, number]; padded: TensorSpec | null } {
  const [n, cIn, h, w] = input.shape as [Dim, Dim, Dim, Dim];
  const padding = attrs.padding ?? 0;
  if (padding === 'same') {
    if (sh !== 1 || sw !== 1) fail('bad-attribute', "padding 'same' needs stride 1", { path: ctx.path, received: `stride ${sh}x${sw}` });
    const th = dh * (kh - 1);
    const tw = dw * (kw - 1);
    // 'same' with an odd total pads the input explicitly first (constant_pad_nd): the conv
    // then sees, and saves, a padded copy one row/column larger.
    const padded = th % 2 === 1 || tw % 2 === 1 ? tensor([n, cIn, add(h, th % 2), add(w, tw % 2)], input.dtype) : null;
    return { pads: [Math.floor(th / 2), th - Math.floor(th / 2), Math.floor(tw / 2), tw - Math.floor(tw / 2)], padded };
  }
  if (padding === 'valid') return { pads: [0, 0, 0, 0], padded: null };
  const [ph, pw] = intPair(padding, 'padding', ctx, 0);
  return { pads: [ph, ph, pw, pw], padded: null };
}

/** PyTorch 1.13's CPU kernels for fp32: oneDNN, the slow path, or both weighted by the backend choice. */
function cpuKernels(geometry: ConvGeometry, channelsLast: boolean, weight: TensorSpec): ConvSteps {
  const { cIn: inChannels, groups, kh, kw } = geometry;
  const factor = mkldnnFactor(geometry);
  const dnnSteps = channelsLast ? channelsLastSteps : mkldnnSteps;
  // The slow path on a channels-last input first copies the weight into the input's
  // (channels-last) format, kept until the convolution returns (measured: 384→768
  // channels, 2×2 stride 2; a [O, 1, kh, kw] or 1×1 weight is channels-last already).
  const slowOf = (geo: ConvGeometry) => {
    const plain = slowSteps(geo);
    if (!channelsLast || inChannels / groups === 1 || kh * kw === 1) return plain;
    return {
      forward: [{ alloc: 'weight (channels-last)', bytes: specBytes(weight) }, ...plain.forward, { free: 'weight (channels-last)' }] as KernelStep[],
      backward: plain.backward,
    };
  };
  if (factor === 1) return dnnSteps(geometry);
  if (factor === 0) return slowOf(geometry);
  const [dnn, slow] = [dnnSteps(geometry), slowOf(geometry)];
  return {
    forward: eitherSteps(factor, dnn.forward, slow.forward),
    backward: (inputGrad: boolean, weightGrad: boolean) => eitherSteps(factor, dnn.backward(inputGrad, weightGrad), slow.backward(inputGrad, weightGrad)),
  };
}

// PyTorch pads (constant_pad_nd) and then convolves: two autograd nodes. The conv's
// backward makes the padded input's gradient and frees its grad_output; the pad's backward
// then copies the unpadded gradient out and frees the padded one.
function padSteps(padded: TensorSpec | null, steps: readonly KernelStep[], needsInput: boolean): KernelStep[] {
  return padded === null || !needsInput
    ? [...steps]
    : [
        ...steps.map((s): KernelStep => ('results' in s && s.results === 'inputGrads' ? { alloc: 'grad of padded input', bytes: specBytes(padded) } : s)),
        { release: 'incomingGrads' },
        { results: 'inputGrads' },
        { free: 'grad of padded input' },
      ];
}

// Unrecorded (no_grad, or nothing needs a gradient) the padded copy is still made, and
// dropped after the conv; recorded, it is the saved extra made with the outputs.
function unrecorded(padded: TensorSpec | null, steps: readonly KernelStep[]): { forwardStepsUnrecorded?: KernelStep[] } {
  return padded === null ? {} : { forwardStepsUnrecorded: [{ alloc: 'padded input', bytes: specBytes(padded) }, ...steps, { free: 'padded input' }] };
}

/**
 * Conv2d: weight [out, in/groups, kh, kw] (+ bias). autograd's convolution node uses one
 * formula for input, weight and bias, so it saves the input and the weight whenever it
 * is recorded (derivatives.yaml: convolution).
 */
export const conv2dOp: OpRule<Conv2dAttrs> = {
  name: 'conv2d',
  arity: 1,
  apply(inputs, attrs, ctx) {
    conv2dAttrs(attrs, ctx);
    return convolve2d(inputs, attrs, ctx);
  },
};

/** {@link conv2dOp}'s rule on attributes already checked (conv1d's, which it builds itself). */
export function convolve2d([input]: readonly TensorSpec[], attrs: Conv2dAttrs, ctx: OpContext): OpResult {
  expectRank(input!, [4], ctx, 'conv2d');
  const [n, cIn, h, w] = input!.shape as [Dim, Dim, Dim, Dim];
  const [inChannels, out, groups] = convChannels(cIn, attrs, ctx);
  const [kh, kw] = intPair(attrs.kernel, 'kernel', ctx, 1);
  const [sh, sw] = intPair(attrs.stride ?? 1, 'stride', ctx, 1);
  const [dh, dw] = intPair(attrs.dilation ?? 1, 'dilation', ctx, 1);
  const { pads, padded } = convPads(input!, attrs, [kh, kw], [sh, sw], [dh, dw], ctx);
  const spanH = dh * (kh - 1) + 1;
  const spanW = dw * (kw - 1) + 1;
  expectAtLeast(add(h, pads[0] + pads[1]), spanH, ctx, 'conv2d kernel is larger than the padded input height');
  expectAtLeast(add(w, pads[2] + pads[3]), spanW, ctx, 'conv2d kernel is larger than the padded input width');
  const ho = windowOutput(h, kh, sh, pads[0], pads[1], dh);
  const wo = windowOutput(w, kw, sw, pads[2], pads[3], dw);
  const dtype = input!.dtype;
  const weight = tensor([out, inChannels / groups, kh, kw], ctx.paramDtype);
  const params = [{ name: 'weight', spec: weight }];
  if (attrs.bias ?? true) params.push({ name: 'bias', spec: tensor([out], ctx.paramDtype) });
  const geometry: ConvGeometry = {
    n,
    cIn: inChannels,
    h: padded?.shape[2] ?? h,
    w: padded?.shape[3] ?? w,
    out,
    ho,
    wo,
    kh,
    kw,
    groups,
    elementBytes: 4,
    strided: sh !== 1 || sw !== 1,
    stride: [sh, sw],
    dilated: dh !== 1 || dw !== 1,
    padded: pads.some((p) => p !== 0),
  };
  const kernels = ctx.device === 'cpu' && dtype === 'float32' ? cpuKernels(geometry, attrs.channelsLast === true, weight) : null;
  return {
    outputs: [tensor([n, out, ho, wo], dtype)],
    params,
    saves: () => [padded === null ? { input: 0 } : { extra: padded, label: 'padded input' }, { param: 'weight' }],
    macs: () => mul(product([n, ho, wo]), out * (inChannels / groups) * kh * kw),
    // CUDA: cuDNN's workspace is a runtime line; the kernels allocate nothing else.
    ...(kernels ? { forwardSteps: kernels.forward } : {}),
    ...unrecorded(padded, kernels?.forward ?? [{ results: 'outputs' }]),
    backward: (needs) => ({
      steps: padSteps(
        padded,
        kernels?.backward(needs.inputs[0] ?? false, needs.params) ?? [{ results: 'inputGrads' }, { results: 'paramGrads' }],
        needs.inputs[0] ?? false,
      ),
      contiguousGradOutput: true,
    }),
  };
}
