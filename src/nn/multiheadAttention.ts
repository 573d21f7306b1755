import { fail } from '../errors.js';
import { linearOp, type LinearAttrs } from '../ops/linear.js';
import { matmulOp } from '../ops/matmul.js';
import { dropoutOp } from '../ops/dropout.js';
import { mulScalarOp, softmaxOp } from '../ops/pointwise.js';
import { copyOp, copyUnlessOne, sliceOp, transposeOp, viewOp } from '../ops/view.js';
import type { KernelStep, OpRule, OwnedTensor, SavedRef } from '../ops/types.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { mul } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { graph } from './graph.js';
import { boolean, integer } from '../validate.js';
import { checkInput, fieldsOf, probability } from './block-schema.js';
import { checkOptions } from './op.js';
import type { LayerOptions, ModuleLayer, TensorRef } from './types.js';

/** Options of {@link multiheadAttention}: torch.nn.MultiheadAttention's arguments. */
export interface MultiheadAttentionOptions extends LayerOptions {
  /** `embed_dim` (the input's last dimension). */
  readonly embedDim: number;
  /** `num_heads`; must divide embedDim. */
  readonly heads: number;
  /** Attention-weights dropout (default 0). */
  readonly dropout?: number;
  /** `bias` of the packed in-projection and of out_proj (default true). */
  readonly bias?: boolean;
  /** Inputs are [N, L, E] (default false: [L, N, E], torch's default). */
  readonly batchFirst?: boolean;
  /**
   * `need_weights` of the forward call (torch's default true): the head-averaged attention
   * weights [N, L, S] are computed and returned as a second output. ViT passes false.
   */
  readonly needWeights?: boolean;
}

const MHA_FIELDS = { ...fieldsOf(['embedDim', 'heads'], integer(1)), ...fieldsOf(['bias', 'batchFirst', 'needWeights'], boolean), dropout: probability };

/** The schema, and torch's `assert self.head_dim * num_heads == self.embed_dim, "embed_dim must be divisible by num_heads"`. */
function checkMhaOptions(options: MultiheadAttentionOptions): void {
  checkOptions(options, MHA_FIELDS, 'multiheadAttention', ['embedDim', 'heads']);
  if (options.embedDim % options.heads !== 0)
    fail('bad-option', 'embed_dim must be divisible by num_heads', {
      path: ['multiheadAttention', 'heads'],
      expected: `a divisor of ${options.embedDim}`,
      received: String(options.heads),
    });
}

/** The linear rule with its parameters under other names (MultiheadAttention's `in_proj_weight`, `out_proj.weight`). */
function renamedLinear(weight: string, bias: string): OpRule<LinearAttrs> {
  const names: Readonly<Record<string, string>> = { weight, bias };
  return {
    name: 'linear',
    arity: 1,
    apply(inputs, attrs, ctx) {
      const result = linearOp.apply(inputs, attrs, ctx);
      return {
        ...result,
        params: (result.params ?? []).map((p) => ({ ...p, name: names[p.name] ?? p.name })),
        saves: (needs) => result.saves(needs).map((s): SavedRef => ('param' in s ? { param: names[s.param] ?? s.param } : s)),
      };
    },
  };
}

/** Attributes of {@link nativeMhaOp}. */
interface NativeMhaAttrs {
  readonly embedDim: number;
  readonly heads: number;
  readonly bias: boolean;
  readonly needWeights: boolean;
}

/**
 * `torch._native_multi_head_attention`, MultiheadAttention's fast path (eval, no autograd,
 * batch-first self-attention, an even number of heads, no dropout or masks), as PyTorch 1.13's CPU
 * kernel allocates (measured): the packed projection [N·L, 3E]; q, k, v rescaled into one
 * [3, N, h, L, d] buffer (the projection then freed); the scores [N, h, L, L], freed before the
 * context when the weights are not needed; the context [N, h, L, d]; the output [N, L, E]; with
 * `needWeights` the head-averaged weights [N, L, L] as a second output (the kernel makes them
 * after the output and frees the scores then; here they come with the output).
 */
const nativeMhaOp: OpRule<NativeMhaAttrs> = {
  name: 'native_multi_head_attention',
  arity: 1,
  apply([x], attrs, ctx) {
    const [n, l] = x!.shape as [Dim, Dim];
    const e = attrs.embedDim;
    const dtype = x!.dtype;
    const f = (dims: Dim[]) => specBytes(tensor(dims, dtype));
    const params: OwnedTensor[] = [{ name: 'in_proj_weight', spec: tensor([3 * e, e], ctx.paramDtype) }];
    if (attrs.bias) params.push({ name: 'in_proj_bias', spec: tensor([3 * e], ctx.paramDtype) });
    params.push({ name: 'out_proj.weight', spec: tensor([e, e], ctx.paramDtype) });
    if (attrs.bias) params.push({ name: 'out_proj.bias', spec: tensor([e], ctx.paramDtype) });
    const scores = f([n, attrs.heads, l, l]);
    const steps: KernelStep[] = [
      { alloc: 'qkv', bytes: f([n, l, 3 * e]) },
      { alloc: 'q, k, v', bytes: f([3, n, l, e]) },
      { free: 'qkv' },
      { alloc: 'scores', bytes: scores },
      ...(attrs.needWeights ? [] : [{ free: 'scores' } as KernelStep]),
      { alloc: 'context', bytes: f([n, l, e]) },
      { results: 'outputs' },
      { free: 'context' },
      ...(attrs.needWeights ? [{ free: 'scores' } as KernelStep] : []),
      { free: 'q, k, v' },
    ];
    return {
      outputs: attrs.needWeights ? [tensor([n, l, e], dtype), tensor([n, l, l], dtype)] : [tensor([n, l, e], dtype)],
      params,
      saves: () => [],
      forwardSteps: steps,
      forwardStepsUnrecorded: steps,
    };
  },
};

/**
 * torch.nn.MultiheadAttention called as self-attention (`attn(x, x, x)`), PyTorch 1.13's
 * `multi_head_attention_forward` op for op: the packed in-projection (`in_proj_weight`
 * [3E, E], `in_proj_bias`; a batch-first input of more than one sample is copied to be
 * reshaped), q, k and v as contiguous copies of its three chunks, `q / √d`, `q·kᵀ`, softmax,
 * dropout, `·v`, the heads transposed back (a copy), `out_proj` (a Linear's weight and bias,
 * called functionally), and with `needWeights` the head-averaged weights as a second output.
 * No attention mask, key padding mask, bias_k/bias_v or zero attention. In eval mode without
 * autograd, batch-first with an even number of heads and no dropout, torch takes its fast path,
 * `_native_multi_head_attention` (one kernel; see its rule), and so does the estimate.
 *
 * @example
 * ```ts
 * import { estimate, multiheadAttention } from 'vram-ts';
 * const attn = multiheadAttention({ embedDim: 64, heads: 4, batchFirst: true, needWeights: false });
 * console.log(estimate(attn, { input: [2, 10, 64] }).params.total); // 3 * 64 * 64 + 3 * 64 + 64 * 64 + 64
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function multiheadAttention(options: MultiheadAttentionOptions): ModuleLayer {
  checkMhaOptions(options);
  const { embedDim: e, heads } = options;
  const p = options.dropout ?? 0;
  const bias = options.bias ?? true;
  const batchFirst = options.batchFirst ?? false;
  const needWeights = options.needWeights ?? true;
  const d = e / heads;
  const inProj = renamedLinear('in_proj_weight', 'in_proj_bias');
  const outProj = renamedLinear('out_proj.weight', 'out_proj.bias');
  const body = graph((g, [input]) => {
    const x = input!;
    checkInput(g, x, [3, 3], ['multiheadAttention', 'embedDim', e]);
    const call = <A>(rule: OpRule<A>, args: TensorRef[], attrs: A): TensorRef => g.call(rule, args, attrs)[0]!;
    if (!g.training && !g.gradEnabled && batchFirst && heads % 2 === 0 && p === 0) {
      const outs = g.call(nativeMhaOp, [x], { embedDim: e, heads, bias, needWeights });
      return needWeights ? outs : outs[0]!;
    }
    // batch_first: query = key = value = query.transpose(1, 0)
    const [l, n] = batchFirst ? [x.shape[1]!, x.shape[0]!] : [x.shape[0]!, x.shape[1]!];
    let q0 = batchFirst ? call(transposeOp, [x], { dim0: 0, dim1: 1 }) : x;
    // linear on a transposed 3-D input runs as matmul, whose reshape copies it unless N = 1.
    if (batchFirst) q0 = call(copyOp, [q0], { when: copyUnlessOne(n) });
    const proj = call(inProj, [q0], { out: 3 * e, bias });
    // .chunk(3, -1), then each chunk's .contiguous().view(L, N·h, d).transpose(0, 1)
    const nh: Dim = mul(n, heads);
    const part = (i: number): TensorRef => {
      const chunk = call(sliceOp, [proj], { dim: -1, start: i * e, end: (i + 1) * e });
      const copy = call(copyOp, [chunk], {});
      return call(transposeOp, [call(viewOp, [copy], { shape: [l, nh, d] })], { dim0: 0, dim1: 1 });
    };
    const q = part(0);
    const k = part(1);
    const v = part(2);
    const scaled = call(mulScalarOp, [q], {});
    let weights = call(softmaxOp, [call(matmulOp, [scaled, call(transposeOp, [k], { dim0: -2, dim1: -1 })], {})], { dim: -1 });
    if (p > 0 && g.training) weights = call(dropoutOp, [weights], { p });
    // multi_head_attention_forward's locals q, k, v, q_scaled and attn_output_weights live until it
    // returns (measured under no_grad, where nothing saves them).
    for (const local of needWeights ? [q, k, v, scaled] : [q, k, v, scaled, weights]) g.hold(local);
    const context = call(matmulOp, [weights, v], {});
    // attn_output.transpose(0, 1).contiguous().view(L·N, E)
    const merged = call(copyOp, [call(transposeOp, [context], { dim0: 0, dim1: 1 })], { when: copyUnlessOne(nh) });
    const out2d = call(outProj, [call(viewOp, [merged], { shape: [mul(l, n), e] })], { out: e, bias });
    let out = call(viewOp, [out2d], { shape: [l, n, e] });
    if (batchFirst) out = call(transposeOp, [out], { dim0: 0, dim1: 1 });
    if (!needWeights) return out;
    // attn_output_weights.view(N, h, L, S).sum(dim=1) / num_heads
    const summed = call(copyOp, [call(viewOp, [weights], { shape: [n, heads, l, l] })], { shape: [n, l, l] });
    // `/ num_heads` by a Python int: nothing saved (measured).
    return [out, call(copyOp, [summed], {})];
  });
  return Object.freeze({
    kind: 'module',
    className: 'MultiheadAttention',
    body,
    idleChildren: Object.freeze(['out_proj']),
    ...(options.name !== undefined ? { name: options.name } : {}),
  });
}
