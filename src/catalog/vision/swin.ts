/**
 * torchvision 0.14's Swin Transformer (swin_t), module for module and op for op:
 * PatchMerging (`_patch_merging_pad`: F.pad, four strided slices, cat, LayerNorm, reduction),
 * SwinTransformerBlock (norm1, ShiftedWindowAttention, stochastic depth, norm2, MLP), and
 * `shifted_window_attention` as PyTorch 1.13 runs it: the relative position bias gathered from its
 * table and permuted into a contiguous copy, the pad to the window, torch.roll, the window
 * partition's copy, qkv (F.linear with the child's weight), the scaled q, bmm operands copied
 * where a reshape cannot view them, the shift mask built in forward, softmax, the heads merged
 * (a copy), proj, the windows reversed (a copy unless one window column), the roll back and the
 * unpadded `.contiguous()`.
 */
import { fail } from '../../errors.js';
import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { conv2d } from '../../nn/conv2d.js';
import { dropout } from '../../nn/dropout.js';
import { flatten } from '../../nn/flatten.js';
import { gelu } from '../../nn/gelu.js';
import { graph } from '../../nn/graph.js';
import { layerNorm } from '../../nn/layerNorm.js';
import { linear } from '../../nn/linear.js';
import { module } from '../../nn/module.js';
import { opLayer } from '../../nn/op.js';
import { seq } from '../../nn/seq.js';
import { stochasticDepth } from '../../nn/stochasticDepth.js';
import type { GraphBuilder, Layer, SeqLayer, TensorRef } from '../../nn/types.js';
import { addOp, catOp } from '../../ops/merge.js';
import { matmulOp } from '../../ops/matmul.js';
import { mulScalarOp, softmaxOp } from '../../ops/pointwise.js';
import { padOp, relativePositionBiasOp, rollOp, shiftMaskOp, stridedSliceOp } from '../../ops/swin.js';
import type { OpRule } from '../../ops/types.js';
import { copyOp, copyUnlessOne, permuteOp, selectOp, sliceOp, transposeOp, viewOp } from '../../ops/view.js';
import type { Dim } from '../../sym/expr.js';
import { mul } from '../../sym/ops.js';

const CONFIGS: Readonly<Record<string, { readonly dim: number; readonly depths: readonly number[]; readonly heads: readonly number[]; readonly sd: number }>> =
  Object.freeze({
    swin_t: { dim: 96, depths: [2, 2, 6, 2], heads: [3, 6, 12, 24], sd: 0.2 },
  });

/** The Swin names. */
export const SWIN_MODELS: readonly string[] = Object.freeze(Object.keys(CONFIGS));

/** The stochastic depth probability torchvision gives a variant. */
export function swinStochasticDepth(name: string): number {
  return CONFIGS[name]!.sd;
}

const WINDOW = 7;

function num(d: Dim | undefined, what: string): number {
  if (typeof d !== 'number') fail('symbolic-shape', `swin needs numeric ${what} (the shifted windows depend on it)`, { path: ['vision', 'swin'] });
  return d as number;
}

function call<A>(g: GraphBuilder, rule: OpRule<A>, args: TensorRef[], attrs: A): TensorRef {
  return g.call(rule, args, attrs)[0]!;
}

/** ShiftedWindowAttention: `shifted_window_attention` with the module's weights. */
function shiftedWindowAttention(dim: number, heads: number, shift: number): Layer {
  const qkv = linear({ out: 3 * dim, name: 'qkv' });
  const proj = linear({ out: dim, name: 'proj' });
  const body = graph((g, [input]) => {
    const x0 = input!;
    const b = x0.shape[0]!;
    const h = num(x0.shape[1], 'heights');
    const w = num(x0.shape[2], 'widths');
    const d = dim / heads;
    const n = WINDOW * WINDOW;
    // _get_relative_position_bias: table[index].view(N, N, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
    let bias = call(g, relativePositionBiasOp, [x0], { window: WINDOW, heads });
    bias = call(g, viewOp, [bias], { shape: [n, n, heads] });
    bias = call(g, copyOp, [call(g, permuteOp, [bias], { dims: [2, 0, 1] })], {});
    bias = call(g, viewOp, [bias], { shape: [1, heads, n, n] });
    // forward's local relative_position_bias lives until the attention returns
    g.hold(bias);
    const padR = (WINDOW - (w % WINDOW)) % WINDOW;
    const padB = (WINDOW - (h % WINDOW)) % WINDOW;
    const pH = h + padB;
    const pW = w + padR;
    let x = call(g, padOp, [x0], { shape: [b, pH, pW, dim] });
    const sH = WINDOW >= pH ? 0 : shift;
    const sW = WINDOW >= pW ? 0 : shift;
    const shifted = sH + sW > 0;
    if (shifted) x = call(g, rollOp, [x], { dims: 2 });
    const nh = pH / WINDOW;
    const nw = pW / WINDOW;
    const nW = nh * nw;
    const bw: Dim = mul(b, nW);
    // view, permute(0, 1, 3, 2, 4, 5), reshape(B·nW, w², C): a copy unless one window column
    x = call(g, viewOp, [x], { shape: [b, nh, WINDOW, nw, WINDOW, dim] });
    x = call(g, permuteOp, [x], { dims: [0, 1, 3, 2, 4, 5] });
    x = call(g, copyOp, [x], { when: copyUnlessOne(nw), shape: [bw, n, dim] });
    const qkvOut = g.apply(qkv, x);
    const parts = call(g, permuteOp, [call(g, viewOp, [qkvOut], { shape: [bw, n, 3, heads, d] })], { dims: [2, 0, 3, 1, 4] });
    const q = call(g, selectOp, [parts], { dim: 0, index: 0 });
    const k = call(g, selectOp, [parts], { dim: 0, index: 1 });
    const v = call(g, selectOp, [parts], { dim: 0, index: 2 });
    const qs = call(g, mulScalarOp, [q], {});
    // matmul's reshape to [B·nW·h, …] copies k and v unless B·nW is 1
    const kT = call(g, copyOp, [call(g, transposeOp, [k], { dim0: -2, dim1: -1 })], { when: copyUnlessOne(bw) });
    let attn = call(g, matmulOp, [qs, kT], {});
    attn = call(g, addOp, [attn, bias], {});
    if (shifted) {
      const mask = call(g, shiftMaskOp, [attn], { padH: pH, padW: pW, window: WINDOW });
      g.hold(mask);
      attn = call(g, viewOp, [attn], { shape: [b, nW, heads, n, n] });
      attn = call(g, addOp, [attn, call(g, viewOp, [mask], { shape: [1, nW, 1, n, n] })], {});
      attn = call(g, viewOp, [attn], { shape: [bw, heads, n, n] });
    }
    attn = call(g, softmaxOp, [attn], { dim: -1 });
    const vc = call(g, copyOp, [v], { when: copyUnlessOne(bw) });
    let out = call(g, matmulOp, [attn, vc], {});
    // .transpose(1, 2).reshape(B·nW, w², C): a copy
    out = call(g, copyOp, [call(g, transposeOp, [out], { dim0: 1, dim1: 2 })], { shape: [bw, n, dim] });
    out = g.apply(proj, out);
    // the locals qkv, q, k, v and attn live until the function returns
    for (const local of [qkvOut, q, k, v, qs, attn]) g.hold(local);
    out = call(g, viewOp, [out], { shape: [b, nh, nw, WINDOW, WINDOW, dim] });
    out = call(g, permuteOp, [out], { dims: [0, 1, 3, 2, 4, 5] });
    out = call(g, copyOp, [out], { when: copyUnlessOne(nw), shape: [b, pH, pW, dim] });
    if (shifted) out = call(g, rollOp, [out], { dims: 2 });
    if (padR > 0 || padB > 0) {
      out = call(g, sliceOp, [out], { dim: 1, start: 0, end: h });
      out = call(g, sliceOp, [out], { dim: 2, start: 0, end: w });
      out = call(g, copyOp, [out], { when: padR > 0 ? 1 : copyUnlessOne(b) });
    }
    return out;
  });
  return Object.freeze({ kind: 'module', className: 'ShiftedWindowAttention', body, name: 'attn', functionalChildren: Object.freeze(['qkv', 'proj']) });
}

/** SwinTransformerBlock: `x + sd(attn(norm1(x)))`, then `x + sd(mlp(norm2(x)))`. */
function swinBlock(name: string, dim: number, heads: number, shift: number, sdProb: number): Layer {
  const norm1 = layerNorm({ eps: 1e-5, name: 'norm1' });
  const attn = shiftedWindowAttention(dim, heads, shift);
  const sd = stochasticDepth({ p: sdProb, mode: 'row', name: 'stochastic_depth' });
  const norm2 = layerNorm({ eps: 1e-5, name: 'norm2' });
  const mlp = seq({ name: 'mlp', className: 'MLP' }, linear({ out: 4 * dim }), gelu(), dropout({ p: 0 }), linear({ out: dim }), dropout({ p: 0 }));
  const body = graph((g, [input]) => {
    let x = input!;
    x = call(g, addOp, [x, g.apply(sd, g.apply(attn, g.apply(norm1, x)))], {});
    x = call(g, addOp, [x, g.apply(sd, g.apply(mlp, g.apply(norm2, x)))], {});
    return x;
  });
  return module(name, 'SwinTransformerBlock', body);
}

/** PatchMerging: `_patch_merging_pad`, norm, reduction. */
function patchMerging(name: string, dim: number): Layer {
  const norm = layerNorm({ eps: 1e-5, name: 'norm' });
  const reduction = linear({ out: 2 * dim, bias: false, name: 'reduction' });
  const body = graph((g, [input]) => {
    const x0 = input!;
    const b = x0.shape[0]!;
    const h = num(x0.shape[1], 'heights');
    const w = num(x0.shape[2], 'widths');
    const pH = h + (h % 2);
    const pW = w + (w % 2);
    const x = call(g, padOp, [x0], { shape: [b, pH, pW, dim] });
    const quarter = [b, pH / 2, pW / 2, dim];
    const parts = [0, 1, 2, 3].map(() => call(g, stridedSliceOp, [x], { shape: quarter }));
    const merged = call(g, catOp, parts, { dim: -1 });
    return g.apply(reduction, g.apply(norm, merged));
  });
  return module(name, 'PatchMerging', body);
}

/**
 * torchvision's `swin_t(num_classes=…)`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('swin_t'), { input: [1, 3, 96, 96] }).params.total); // 28288354
 * ```
 */
export function buildSwin(name: string, numClasses: number, sdProb: number): SeqLayer {
  const { dim, depths, heads } = CONFIGS[name]!;
  const total = depths.reduce((a, c) => a + c, 0);
  let id = 0;
  const features: Layer[] = [
    seq(
      { name: '0' },
      conv2d({ out: dim, kernel: 4, stride: 4, bias: true }),
      opLayer(permuteOp, 'Permute', { dims: [0, 2, 3, 1] }, { name: '1' }),
      layerNorm({ eps: 1e-5 }),
    ),
  ];
  depths.forEach((depth, i) => {
    const c = dim * 2 ** i;
    const blocks: Layer[] = [];
    for (let j = 0; j < depth; j += 1) {
      blocks.push(swinBlock(String(j), c, heads[i]!, j % 2 === 0 ? 0 : Math.floor(WINDOW / 2), (sdProb * id) / (total - 1)));
      id += 1;
    }
    features.push(seq({ name: String(features.length) }, ...blocks));
    if (i + 1 < depths.length) features.push(patchMerging(String(features.length), c));
  });
  return seq(
    { className: 'SwinTransformer', isSequential: false },
    seq({ name: 'features' }, ...features),
    layerNorm({ eps: 1e-5, name: 'norm' }),
    opLayer(permuteOp, 'Permute', { dims: [0, 3, 1, 2] }, { name: 'permute' }),
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    flatten({ startDim: 1, name: 'flatten' }),
    linear({ out: numClasses, name: 'head' }),
  );
}
