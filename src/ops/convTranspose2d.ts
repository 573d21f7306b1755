import { fail } from '../errors.js';
import { add, mul, product, sub } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { boolean, integer, intOrPair } from '../validate.js';
import { concreteDim, expectRank, intPair, positiveInt } from './check.js';
import { attrsGuard, pairOf, type AttrSchema } from './attrs.js';
import type { KernelStep, OpRule } from './types.js';

/** Attributes of a transposed 2-D convolution, as torch.nn.ConvTranspose2d takes them. */
export interface ConvTranspose2dAttrs {
  readonly out: number;
  readonly kernel: number | readonly [number, number];
  readonly stride?: number | readonly [number, number];
  readonly padding?: number | readonly [number, number];
  readonly outputPadding?: number | readonly [number, number];
  readonly dilation?: number | readonly [number, number];
  readonly groups?: number;
  readonly bias?: boolean;
}

/**
 * ConvTranspose2d's attributes, as torch checks them: sizes >= 1 (paddings >= 0), groups dividing
 * `out` (_ConvNd), and "output padding must be smaller than either stride or dilation" (aten).
 */
export const CONV_TRANSPOSE2D_SCHEMA: AttrSchema = {
  fields: {
    out: integer(1),
    kernel: intOrPair(1),
    stride: intOrPair(1),
    padding: intOrPair(0),
    outputPadding: intOrPair(0),
    dilation: intOrPair(1),
    groups: integer(1),
    bias: boolean,
  },
  required: ['out', 'kernel'],
  across: (attrs, report) => {
    const groups = (attrs.groups as number | undefined) ?? 1;
    const out = attrs.out as number;
    if (out % groups !== 0) report('groups', 'groups must divide the output channels (out)', `a divisor of ${out}`, groups);
    const [oh, ow] = pairOf(attrs.outputPadding, 0);
    const [sh, sw] = pairOf(attrs.stride, 1);
    const [dh, dw] = pairOf(attrs.dilation, 1);
    if (oh >= Math.max(sh, dh) || ow >= Math.max(sw, dw))
      report(
        'outputPadding',
        'output padding must be smaller than either stride or dilation',
        `< max(stride, dilation) = ${Math.max(sh, dh)}x${Math.max(sw, dw)}`,
        attrs.outputPadding,
      );
  },
};

const convTranspose2dAttrs = attrsGuard(CONV_TRANSPOSE2D_SCHEMA, true);

/** (L − 1)·s − 2p + d·(k − 1) + output_padding + 1, as torch computes a transposed convolution's output. */
function transposedLength(size: Dim, kernel: number, stride: number, pad: number, dilation: number, outputPadding: number): Dim {
  return add(mul(sub(size, 1), stride), dilation * (kernel - 1) + outputPadding + 1 - 2 * pad);
}

/**
 * ConvTranspose2d: weight [in, out/groups, kh, kw] (+ bias); autograd keeps the input and the
 * weight, as for a convolution. PyTorch 1.13 on CPU runs `slow_conv_transpose2d` (measured at
 * batch 1 and 2, strides 2, kernels 2–4): the forward allocates per image a columns buffer
 * [out·kh·kw, H·W] and, with a bias, a row of ones [Ho·Wo]; backward builds the columns again for
 * the input's gradient and for the weight's.
 */
export const convTranspose2dOp: OpRule<ConvTranspose2dAttrs> = {
  name: 'conv_transpose2d',
  arity: 1,
  apply([input], attrs, ctx) {
    convTranspose2dAttrs(attrs, ctx);
    expectRank(input!, [4], ctx, 'convTranspose2d');
    const [n, cIn, h, w] = input!.shape as [Dim, Dim, Dim, Dim];
    const inChannels = concreteDim(cIn, 'convTranspose2d input channels', ctx);
    const out = positiveInt(attrs.out, 'out', ctx);
    const groups = positiveInt(attrs.groups ?? 1, 'groups', ctx);
    if (inChannels % groups !== 0 || out % groups !== 0)
      fail('bad-groups', 'groups must divide both input and output channels', {
        path: ctx.path,
        expected: `divisor of ${inChannels} and ${out}`,
        received: String(groups),
      });
    const [kh, kw] = intPair(attrs.kernel, 'kernel', ctx, 1);
    const [sh, sw] = intPair(attrs.stride ?? 1, 'stride', ctx, 1);
    const [ph, pw] = intPair(attrs.padding ?? 0, 'padding', ctx, 0);
    const [oh, ow] = intPair(attrs.outputPadding ?? 0, 'outputPadding', ctx, 0);
    const [dh, dw] = intPair(attrs.dilation ?? 1, 'dilation', ctx, 1);
    if (oh >= Math.max(sh, dh) || ow >= Math.max(sw, dw))
      fail('bad-attribute', 'outputPadding must be smaller than stride or dilation', {
        path: [...ctx.path, 'outputPadding'],
        expected: `< max(stride, dilation)`,
        received: `${oh}x${ow}`,
      });
    const ho = transposedLength(h, kh, sh, ph, dh, oh);
    const wo = transposedLength(w, kw, sw, pw, dw, ow);
    const dtype = input!.dtype;
    const bias = attrs.bias ?? true;
    const params = [{ name: 'weight', spec: tensor([inChannels, out / groups, kh, kw], ctx.paramDtype) }];
    if (bias) params.push({ name: 'bias', spec: tensor([out], ctx.paramDtype) });
    const slow = ctx.device === 'cpu' && groups === 1;
    const columns = specBytes(tensor([out * kh * kw, h, w], dtype));
    const ones = specBytes(tensor([ho, wo], dtype));
    const forward: KernelStep[] = slow
      ? [
          { results: 'outputs' },
          { alloc: 'columns', bytes: columns },
          ...(bias ? ([{ alloc: 'ones', bytes: ones }, { free: 'ones' }] as KernelStep[]) : []),
          { free: 'columns' },
        ]
      : [{ results: 'outputs' }];
    return {
      outputs: [tensor([n, out, ho, wo], dtype)],
      params,
      saves: () => [{ input: 0 }, { param: 'weight' }],
      forwardSteps: forward,
      macs: () => mul(product([n, h, w]), inChannels * (out / groups) * kh * kw),
      backward: (needs) => ({
        contiguousGradOutput: true,
        ...(slow
          ? {
              steps: [
                ...(needs.inputs[0]
                  ? ([{ results: 'inputGrads' }, { alloc: 'grad columns', bytes: columns }, { free: 'grad columns' }] as KernelStep[])
                  : [{ results: 'inputGrads' } as KernelStep]),
                ...(needs.params
                  ? ([{ results: 'paramGrads' }, { alloc: 'columns', bytes: columns }, { free: 'columns' }] as KernelStep[])
                  : [{ results: 'paramGrads' } as KernelStep]),
              ],
            }
          : {}),
      }),
    };
  },
};
