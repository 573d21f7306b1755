import { fail } from '../../errors.js';
import type { Dim } from '../../sym/expr.js';
import { mul } from '../../sym/ops.js';
import { specBytes, tensor, type TensorSpec } from '../../tensor/spec.js';
import type { DType } from '../../tensor/dtype.js';
import { concreteDim, positiveInt } from '../check.js';
import type { Framework, KernelStep, OpContext, OpRule, OwnedTensor } from '../types.js';

/**
 * How the routed experts run: `loop` is transformers 4.x's ModuleList loop over the experts
 * (`torch.where`, index, the expert MLP, `index_add_`); `eager` is transformers 5.x's fused
 * experts (3-D `gate_up_proj` / `down_proj`) looped over the experts hit; `grouped_mm` is 5.x's
 * default (`integrations/moe.py`: sort, one `aten::_grouped_mm` per projection over [T·k, ·]).
 */
export type ExpertsImpl = 'loop' | 'eager' | 'grouped_mm';

const bytes = (shape: readonly Dim[], dtype: DType): Dim => specBytes(tensor(shape, dtype));

/** Attributes of {@link expertMaskOp}. */
export interface ExpertMaskAttrs {
  readonly experts: number;
}

/**
 * `one_hot(selected_experts, E).permute(2, 1, 0)`: the int64 [E, k, T] mask the expert loops
 * read (no gradient).
 *
 * @example
 * ```ts
 * import { expertMaskOp } from 'vram-ts/internals';
 * console.log(expertMaskOp.name); // moe_expert_mask
 * ```
 */
export const expertMaskOp: OpRule<ExpertMaskAttrs> = {
  name: 'moe_expert_mask',
  arity: 1,
  apply([indices], attrs, ctx) {
    const experts = positiveInt(attrs.experts, 'experts', ctx);
    const [tokens, k] = indices!.shape as [Dim, Dim];
    return { outputs: [tensor([experts, k, tokens], 'int64')], nonDifferentiableOutputs: [0], saves: () => [] };
  },
};

/** Attributes of {@link expertOp}. */
export interface ExpertAttrs {
  readonly impl: 'loop' | 'eager';
  /** The routed expert's MLP width. */
  readonly intermediate: number;
  /** (token, k) pairs this expert gets. */
  readonly count: Dim;
  /** `loop`: the expert's projections gate / up / down (Mixtral: w1, w3, w2). */
  readonly names?: readonly [string, string, string];
  /** `eager`: the number of experts of the fused 3-D parameters. */
  readonly experts?: number;
  /**
   * `eager`: whether this expert's op holds the fused parameters (the last expert run: its
   * gradient is the first autograd makes, the buffer the others' full-size gradients are
   * summed into in place).
   */
  readonly owner?: boolean;
  /** `loop`: an expert the forward skips (no token chose it): it owns its parameters, nothing more. */
  readonly unused?: boolean;
}

/**
 * A looped expert's backward as autograd runs its nodes, one after the other (measured on
 * transformers 4.57.6's Mixtral loop, torch 2.13 CPU, and 4.40.2's, torch 1.13): index_add's
 * gradient gathered [n, H], the routing product's two gradients (and its [n, H] product before
 * the sum), down_proj's weight gradient and input gradient [n, I], the gated product's two [n, I]
 * gradients, up_proj's weight gradient and input gradient [n, H], SiLU's, gate_proj's, the two
 * input gradients summed, then the index's [T, H]. Each node lets go of what it saved as it
 * finishes (the weighted rows at index_add's, the weights and the down output at the product's,
 * ...; the rows at gate_proj's, the `torch.where` indices last): the saved tensors are released
 * at the start and what is still held is carried as temporaries, so that they go node by node.
 * torch 2 adds gate_proj's input gradient into up_proj's in place (InputBuffer, once the node let
 * go of its saved rows); torch 1.13 sums the two into a new tensor. The weight gradients are
 * made one by one (held as temporaries until the op's gradients are placed).
 */
function loopBackwardSteps(shape: ExpertShape, framework: Framework): KernelStep[] {
  const { n, hidden, inner, dt, p } = shape;
  const nH = bytes([n, hidden], dt);
  const nI = bytes([n, inner], dt);
  const weight = bytes([hidden, inner], p);
  // The gradient of up_proj's input that gate_proj's is summed with.
  const rowsGrad: KernelStep[] =
    framework === 'torch-2' ? [{ free: 'gate input grad' }] : [{ alloc: 'input grad sum', bytes: nH }, { free: 'gate input grad' }, { free: 'up input grad' }];
  return [
    // What forward saved, from here on let go node by node.
    { release: 'saved' },
    ...expertSaved(shape).map(({ spec, label }): KernelStep => ({ alloc: `saved ${label}`, bytes: specBytes(spec) })),
    // IndexAddBackward0
    { alloc: 'gathered grad', bytes: nH },
    { free: 'saved weighted rows' },
    // MulBackward0: the expert output's gradient, the weights' (the product summed to [n, 1])
    { alloc: 'expert output grad', bytes: nH },
    { alloc: 'weighted product', bytes: nH },
    { alloc: 'row weights grad', bytes: bytes([n, 1], dt) },
    { free: 'weighted product' },
    { free: 'gathered grad' },
    { free: 'saved row weights' },
    { free: 'saved down output' },
    // IndexBackward0 of the weights (its [T, k] is placed with the op's input gradients)
    { free: 'row weights grad' },
    // MmBackward0 (down_proj)
    { alloc: 'down weight grad', bytes: weight },
    { alloc: 'down input grad', bytes: nI },
    { free: 'expert output grad' },
    { free: 'saved product' },
    // MulBackward0 (act(gate) * up)
    { alloc: 'act grad', bytes: nI },
    { alloc: 'up grad', bytes: nI },
    { free: 'down input grad' },
    { free: 'saved up output' },
    { free: 'saved activation' },
    // MmBackward0 (up_proj)
    { alloc: 'up weight grad', bytes: weight },
    { alloc: 'up input grad', bytes: nH },
    { free: 'up grad' },
    // SiluBackward0
    { alloc: 'silu grad', bytes: nI },
    { free: 'act grad' },
    { free: 'saved gate output' },
    // MmBackward0 (gate_proj)
    { alloc: 'gate weight grad', bytes: weight },
    { alloc: 'gate input grad', bytes: nH },
    { free: 'silu grad' },
    { free: 'saved gathered rows' },
    ...rowsGrad,
    { free: 'down weight grad' },
    { free: 'up weight grad' },
    { free: 'gate weight grad' },
    { results: 'paramGrads' },
    // IndexBackward0 of the rows: the [T, H] (and the weights' [T, k])
    { results: 'inputGrads' },
    { free: framework === 'torch-2' ? 'up input grad' : 'input grad sum' },
    { free: 'saved torch.where indices' },
  ];
}

/** One expert's sizes: n (token, k) pairs through hidden → intermediate → hidden. */
interface ExpertShape {
  readonly attrs: ExpertAttrs;
  readonly n: Dim;
  readonly hidden: number;
  readonly inner: number;
  /** The activations' dtype and the parameters'. */
  readonly dt: DType;
  readonly p: DType;
}

/** `loop`: the expert's three Linear weights; `eager`: the fused 3-D pair, on the owner only. */
function expertParams({ attrs, hidden, inner, p }: ExpertShape, ctx: OpContext): OwnedTensor[] {
  const params: OwnedTensor[] = [];
  if (attrs.impl === 'loop') {
    const [gate, up, down] = attrs.names ?? ['gate_proj', 'up_proj', 'down_proj'];
    // __init__ order: Mixtral's MixtralBlockSparseTop2MLP registers w1, w2, w3; Qwen2MoeMLP gate, up, down.
    const order: [string, number, number][] =
      gate === 'w1'
        ? [
            [gate, inner, hidden],
            [down, hidden, inner],
            [up, inner, hidden],
          ]
        : [
            [gate, inner, hidden],
            [up, inner, hidden],
            [down, hidden, inner],
          ];
    for (const [name, o, i] of order) params.push({ name: `${name}.weight`, spec: tensor([o, i], p) });
  } else {
    const experts = positiveInt(attrs.experts, 'experts', ctx);
    if (attrs.owner === true)
      params.push({ name: 'gate_up_proj', spec: tensor([experts, 2 * inner, hidden], p) }, { name: 'down_proj', spec: tensor([experts, hidden, inner], p) });
  }
  return params;
}

/** What autograd keeps of one expert's iteration. */
function expertSaved({ attrs, n, hidden, inner, dt }: ExpertShape): { spec: TensorSpec; label: string }[] {
  return [
    { spec: tensor([n, 2], 'int64'), label: 'torch.where indices' },
    { spec: tensor([n, hidden], dt), label: 'gathered rows' },
    ...(attrs.impl === 'loop'
      ? [
          { spec: tensor([n, inner], dt), label: 'gate output' },
          { spec: tensor([n, inner], dt), label: 'up output' },
        ]
      : [{ spec: tensor([n, 2 * inner], dt), label: 'gate_up output' }]),
    { spec: tensor([n, inner], dt), label: 'activation' },
    { spec: tensor([n, inner], dt), label: 'product' },
    { spec: tensor([n, hidden], dt), label: 'down output' },
    { spec: tensor([n, 1], dt), label: 'row weights' },
    { spec: tensor([n, hidden], dt), label: 'weighted rows' },
  ];
}

/**
 * Without autograd each temporary goes once the next line has read it; the rows and the
 * `torch.where` indices stay for the whole iteration.
 */
function expertUnrecordedSteps({ attrs, n, hidden, inner, dt }: ExpertShape): KernelStep[] {
  const rowsI = bytes([n, inner], dt);
  const rowsH = bytes([n, hidden], dt);
  const mlpSteps: KernelStep[] =
    attrs.impl === 'loop'
      ? [
          { alloc: 'gate', bytes: rowsI },
          { alloc: 'act', bytes: rowsI },
          { free: 'gate' },
          { alloc: 'up', bytes: rowsI },
          { alloc: 'product', bytes: rowsI },
          { free: 'act' },
          { free: 'up' },
        ]
      : [
          { alloc: 'gate_up', bytes: bytes([n, 2 * inner], dt) },
          { alloc: 'act', bytes: rowsI },
          { alloc: 'product', bytes: rowsI },
          { free: 'act' },
          { free: 'gate_up' },
        ];
  return [
    { alloc: 'indices', bytes: bytes([n, 2], 'int64') },
    { alloc: 'rows', bytes: rowsH },
    ...mlpSteps,
    { alloc: 'down', bytes: rowsH },
    { free: 'product' },
    { alloc: 'weighted', bytes: rowsH },
    { free: 'down' },
    { results: 'outputs' },
    { free: 'weighted' },
    { free: 'rows' },
    { free: 'indices' },
  ];
}

/**
 * 5.x eager: one expert's backward as autograd runs its nodes (measured on transformers 5.18's
 * Mixtral, torch 2.13 CPU): index_add's gradient gathered [n, H], the routing product's two
 * gradients (the weights' summed to [n, 1]), down_proj's weight-slice gradient [H, I] and input
 * gradient [n, I], then its SelectBackward0's full [E, H, I] (the owner's is the parameter's
 * gradient; the others' are summed into it and freed), the gated product's two [n, I] gradients,
 * SiLU's, the halves' cat [n, 2I], gate_up's slice gradient [2I, H] and input gradient [n, H]
 * with its full [E, 2I, H]. What forward saved is let go as these nodes finish with it: all but
 * the `torch.where` indices are gone before gate_up's slice gradient is made.
 */
function eagerBackwardSteps({ attrs, n, hidden, inner, dt, p }: ExpertShape): KernelStep[] {
  const nH = bytes([n, hidden], dt);
  const nI = bytes([n, inner], dt);
  const experts = attrs.experts ?? 0;
  const owner = attrs.owner === true;
  // SelectBackward0: the owner's full-size gradient is the parameter's; another expert's is
  // made, summed into it in place, and freed.
  const selectBackward = (name: string, full: Dim, slice: string): KernelStep[] =>
    owner ? [{ free: slice }] : [{ alloc: name, bytes: full }, { free: slice }, { free: name }];
  return [
    { alloc: 'gathered grad', bytes: nH },
    { alloc: 'down output grad', bytes: nH },
    { alloc: 'weights product', bytes: nH },
    { alloc: 'weights grad', bytes: bytes([n, 1], dt) },
    { free: 'weights product' },
    { free: 'gathered grad' },
    { free: 'weights grad' },
    { alloc: 'down slice grad', bytes: bytes([hidden, inner], p) },
    { alloc: 'product grad', bytes: nI },
    { free: 'down output grad' },
    // The owner's two parameter gradients: down_proj's made here, gate_up_proj's a few nodes on.
    ...(owner ? [{ results: 'paramGrads' } as const] : []),
    ...selectBackward('down full-size gradient', bytes([experts, hidden, inner], p), 'down slice grad'),
    { alloc: 'act grad', bytes: nI },
    { alloc: 'up grad', bytes: nI },
    { free: 'product grad' },
    { alloc: 'silu grad', bytes: nI },
    { free: 'act grad' },
    { alloc: 'gate_up grad', bytes: bytes([n, 2 * inner], dt) },
    { free: 'silu grad' },
    { free: 'up grad' },
    { release: 'saved' },
    { alloc: 'gate_up slice grad', bytes: bytes([2 * inner, hidden], p) },
    { alloc: 'rows grad', bytes: nH },
    { free: 'gate_up grad' },
    ...selectBackward('gate_up full-size gradient', bytes([experts, 2 * inner, hidden], p), 'gate_up slice grad'),
    { results: 'inputGrads' },
    { free: 'rows grad' },
  ];
}

/**
 * One routed expert of an expert loop, as one op: the running sum [T, H] (absent for the first
 * expert: the zeros it starts from), hidden [T, H], routing weights [T, k] and the expert mask
 * → the sum with this expert's weighted rows added (`index_add_`). Saves what the real code's
 * autograd keeps for n (token, k) pairs: the int64 `torch.where` result [n, 2] (saved by the
 * index, the weight gather and `index_add_`), the gathered rows [n, H], the gate and up outputs
 * (`loop`: two [n, I]; `eager`: the fused [n, 2I] storage both chunks view), the activation and
 * the product [n, I], the down output, the weights [n, 1] and the weighted rows [n, H]
 * (Mixtral 4.40.2 `modeling_mixtral.py:843-882`; 5.18 `MixtralExperts` `:56-93`).
 * `eager` experts slice one [E, 2I, H] / [E, H, I] pair of parameters: every expert's slice
 * backward makes a full-size gradient that autograd sums (modelled as the tie it is).
 *
 * @example
 * ```ts
 * import { expertOp } from 'vram-ts/internals';
 * console.log(expertOp.name); // moe_expert
 * ```
 */
export const expertOp: OpRule<ExpertAttrs> = {
  name: 'moe_expert',
  arity: 'variadic',
  apply(inputs, attrs, ctx) {
    if (inputs.length !== 3 && inputs.length !== 4)
      fail('bad-arity', 'an expert takes hidden, weights, mask and optionally the running sum', {
        path: ctx.path,
        expected: '3 or 4',
        received: String(inputs.length),
      });
    const [x] = inputs as [TensorSpec, TensorSpec];
    const inner = positiveInt(attrs.intermediate, 'intermediate', ctx);
    if (x.shape.length !== 2)
      fail('bad-rank', 'experts take hidden states [tokens, hidden]', { path: ctx.path, expected: 'rank 2', received: `rank ${x.shape.length}` });
    const hidden = concreteDim(x.shape[1]!, 'hidden size', ctx);
    const tokens = x.shape[0]!;
    const n = attrs.count;
    const dt = x.dtype;
    const shape: ExpertShape = { attrs, n, hidden, inner, dt, p: ctx.paramDtype };
    const params = expertParams(shape, ctx);
    // An expert the loop skipped: its module and parameters exist, nothing runs.
    if (attrs.unused === true) return { outputs: [tensor([0, hidden], dt)], params, saves: () => [], paramsUnused: true };
    const items = expertSaved(shape);
    const first = inputs.length === 3;
    const inputGrads = first ? (['new', 'new', 'none'] as const) : (['new', 'new', 'none', 'alias'] as const);
    // Backward: the gradients of the expert's intermediates, the [T, H] and [T, k] the index
    // backwards scatter into.
    const eagerSteps = eagerBackwardSteps(shape);
    return {
      outputs: [tensor([tokens, hidden], dt)],
      // `final_hidden_states.index_add_(...)`: after the first expert, the sum is added into in place.
      ...(first ? {} : { alias: 'inplace' as const, aliasInput: 3 }),
      params,
      saves: (needs) => (needs.inputs[1] || needs.inputs[0] || needs.params ? items.map((i) => ({ extra: i.spec, label: i.label })) : []),
      forwardSteps: [{ results: 'outputs' }],
      forwardStepsUnrecorded: expertUnrecordedSteps(shape),
      backward: () => ({
        inputGrads,
        steps: attrs.impl === 'eager' ? eagerSteps : loopBackwardSteps(shape, ctx.framework),
      }),
      macs: () => mul(n, 3 * hidden * inner),
    };
  },
};
