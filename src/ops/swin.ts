import type { Dim } from '../sym/expr.js';

import { specBytes, tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/** Attributes of {@link padOp}: the padded shape. */
export interface PadAttrs {
  readonly shape: readonly Dim[];
}

/**
 * `F.pad(x, …)` with zeros (constant_pad_nd): a new tensor of the padded shape, even when every
 * pad is 0 (measured on 1.13: a copy); nothing saved; its backward narrows the gradient (a new tensor).
 */
export const padOp: OpRule<PadAttrs> = {
  name: 'constant_pad_nd',
  arity: 1,
  apply([x], attrs) {
    return { outputs: [tensor(attrs.shape, x!.dtype)], saves: () => [], backward: () => ({ inputGrads: ['new'] }) };
  },
};

/** Attributes of {@link rollOp}. */
export interface RollAttrs {
  /** How many dimensions are rolled (torch rolls one dimension at a time, each a new tensor). */
  readonly dims: number;
}

/**
 * `torch.roll(x, shifts, dims)`: each rolled dimension is a new tensor (the intermediate ones
 * freed); nothing saved; the backward rolls the gradient back the same way.
 */
export const rollOp: OpRule<RollAttrs> = {
  name: 'roll',
  arity: 1,
  apply([x], attrs) {
    const bytes = specBytes(tensor(x!.shape, x!.dtype));
    const steps: KernelStep[] = [];
    for (let i = 1; i < attrs.dims; i += 1) steps.push({ alloc: `rolled ${i}`, bytes });
    const fwd: KernelStep[] = [...steps, { results: 'outputs' }, ...steps.map((s) => ({ free: (s as { alloc: string }).alloc }))];
    const bwd: KernelStep[] = [...steps, { results: 'inputGrads' }, ...steps.map((s) => ({ free: (s as { alloc: string }).alloc }))];
    return { outputs: [tensor(x!.shape, x!.dtype)], saves: () => [], forwardSteps: fwd, backward: () => ({ inputGrads: ['new'], steps: bwd }) };
  },
};

/** Attributes of {@link relativePositionBiasOp}. */
export interface RelativePositionBiasAttrs {
  readonly window: number;
  readonly heads: number;
}

/**
 * torchvision's `relative_position_bias_table[relative_position_index]` (a [(2w-1)², h]
 * parameter gathered by a registered int64 [w⁴] buffer): the gathered [w⁴, h] result; IndexBackward
 * keeps the index buffer and scatters into a new table-sized gradient. The input is only the
 * op's anchor (no gradient flows to it).
 */
export const relativePositionBiasOp: OpRule<RelativePositionBiasAttrs> = {
  name: 'index',
  arity: 1,
  apply([x], attrs, ctx) {
    const w = attrs.window;
    return {
      outputs: [tensor([w * w * w * w, attrs.heads], x!.dtype)],
      params: [{ name: 'relative_position_bias_table', spec: tensor([(2 * w - 1) * (2 * w - 1), attrs.heads], ctx.paramDtype) }],
      buffers: [{ name: 'relative_position_index', spec: tensor([w * w * w * w], 'int64') }],
      saves: (needs) => (needs.params ? [{ buffer: 'relative_position_index' }] : []),
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of {@link shiftMaskOp}. */
export interface ShiftMaskAttrs {
  readonly padH: number;
  readonly padW: number;
  readonly window: number;
}

/**
 * The shifted windows' attention mask built inside `shifted_window_attention` (no gradient):
 * `new_zeros((pH, pW))`, the window partition's copy [nW, w²], the pairwise difference
 * [nW, w², w²], `!= 0` (bool), masked_fill, `== 0` (bool), masked_fill: the result [nW, w², w²].
 * The input only anchors the op.
 */
export const shiftMaskOp: OpRule<ShiftMaskAttrs> = {
  name: 'shift_mask',
  arity: 1,
  apply([x], attrs) {
    const w2 = attrs.window * attrs.window;
    const nW = (attrs.padH / attrs.window) * (attrs.padW / attrs.window);
    const f = (dims: Dim[]) => specBytes(tensor(dims, x!.dtype));
    const b = (dims: Dim[]) => specBytes(tensor(dims, 'bool'));
    const steps: KernelStep[] = [
      { alloc: 'zeros', bytes: f([attrs.padH, attrs.padW]) },
      { alloc: 'windows', bytes: f([nW, w2]) },
      { free: 'zeros' },
      { alloc: 'difference', bytes: f([nW, w2, w2]) },
      { free: 'windows' },
      { alloc: '!= 0', bytes: b([nW, w2, w2]) },
      { alloc: 'filled', bytes: f([nW, w2, w2]) },
      { free: '!= 0' },
      { free: 'difference' },
      { alloc: '== 0', bytes: b([nW, w2, w2]) },
      { results: 'outputs' },
      { free: '== 0' },
      { free: 'filled' },
    ];
    return {
      outputs: [tensor([nW, w2, w2], x!.dtype)],
      nonDifferentiableOutputs: [0],
      saves: () => [],
      forwardSteps: steps,
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of {@link stridedSliceOp}: `x[..., a::2, b::2, :]` of an even [.., H, W, C]. */
export interface StridedSliceAttrs {
  readonly shape: readonly Dim[];
}

/** A strided slice (a view); its backward scatters into a new zero tensor of the input's size. */
export const stridedSliceOp: OpRule<StridedSliceAttrs> = {
  name: 'slice',
  arity: 1,
  apply([x], attrs) {
    return { outputs: [tensor(attrs.shape, x!.dtype)], alias: 'view', saves: () => [] };
  },
};
