import type { Dim } from '../sym/expr.js';
import { tensor } from '../tensor/spec.js';
import { boolean, integer } from '../validate.js';
import { expectRank } from './check.js';
import { convAcross, convolve2d, convPadding } from './conv2d.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule } from './types.js';

/** Attributes of a 1-D convolution, as torch.nn.Conv1d takes them. */
export interface Conv1dAttrs {
  readonly out: number;
  readonly kernel: number;
  readonly stride?: number;
  readonly padding?: number | 'same' | 'valid';
  readonly dilation?: number;
  readonly groups?: number;
  readonly bias?: boolean;
  /** Expected input channels; inferred from the input when omitted. */
  readonly in?: number;
}

/** Conv1d's attributes, as torch.nn.Conv1d checks them: one integer per size, groups dividing the channels. */
export const CONV1D_SCHEMA: AttrSchema = {
  fields: {
    out: integer(1),
    kernel: integer(1),
    stride: integer(1),
    padding: convPadding(false),
    dilation: integer(1),
    groups: integer(1),
    bias: boolean,
    in: integer(1),
  },
  required: ['out', 'kernel'],
  across: convAcross,
};

const conv1dAttrs = attrsGuard(CONV1D_SCHEMA, true);

/**
 * Conv1d: PyTorch runs a 1-D convolution as a 2-D one over [N, C, 1, L] with a [1, k] kernel
 * (the same backends, the same allocations: measured on 1.13 CPU), and views the result back as
 * [N, out, L']. Weight [out, in/groups, k].
 */
export const conv1dOp: OpRule<Conv1dAttrs> = {
  name: 'conv1d',
  arity: 1,
  apply([input], attrs, ctx) {
    conv1dAttrs(attrs, ctx);
    expectRank(input!, [3], ctx, 'conv1d');
    const [n, c, l] = input!.shape as [Dim, Dim, Dim];
    const padding = attrs.padding ?? 0;
    const result = convolve2d(
      [tensor([n, c, 1, l], input!.dtype)],
      {
        out: attrs.out,
        kernel: [1, attrs.kernel],
        stride: [1, attrs.stride ?? 1],
        padding: padding === 'same' || padding === 'valid' ? padding : [0, padding],
        dilation: [1, attrs.dilation ?? 1],
        groups: attrs.groups ?? 1,
        bias: attrs.bias ?? true,
        ...(attrs.in !== undefined ? { in: attrs.in } : {}),
      },
      ctx,
    );
    const out = result.outputs[0]!;
    const weight = result.params![0]!.spec;
    return {
      ...result,
      outputs: [tensor([out.shape[0]!, out.shape[1]!, out.shape[3]!], out.dtype)],
      params: result.params!.map((p) =>
        p.name === 'weight' ? { ...p, spec: tensor([weight.shape[0]!, weight.shape[1]!, weight.shape[3]!], weight.dtype) } : p,
      ),
    };
  },
};
