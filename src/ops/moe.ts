import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { add, ceilDiv, floorDiv, mul } from '../sym/ops.js';
import { specBytes, tensor } from '../tensor/spec.js';
import type { DType } from '../tensor/dtype.js';
import { concreteDim, positiveInt } from './check.js';
import type { TensorSpec } from '../tensor/spec.js';
import type { KernelStep, OpRule, OwnedTensor, SavedRef } from './types.js';

/** How a mixture-of-experts router scores and picks experts. */
export interface RouterAttrs {
  readonly experts: number;
  /** Experts per token (`num_experts_per_tok`). */
  readonly k: number;
  /**
   * `softmax`: softmax(float) → topk (Mixtral, Qwen-MoE, DeepSeek-V2 greedy); `sigmoid`:
   * DeepSeek-V3's sigmoid scores, bias-corrected group-limited selection, then a gather of the
   * chosen scores.
   */
  readonly score: 'softmax' | 'sigmoid';
  /** Divide the top-k weights by their sum (Mixtral always; Qwen/DeepSeek when `norm_topk_prob`). */
  readonly renorm: boolean;
  /** DeepSeek's `routed_scaling_factor` multiply (out of place: a new [T, k]). */
  readonly scaled?: boolean;
}

/**
 * A router after its gate Linear: logits [T, E] → routing weights [T, k] and expert indices
 * [T, k] (int64). Saves what the real code's autograd keeps: the softmax result [T, E] (fp32),
 * topk's indices, and with renormalisation the clone and the sum that the in-place division
 * keeps (Mixtral `modeling_mixtral.py` 4.40.2 :843-882, 5.18 `MixtralTopKRouter` :96-111). With
 * `sigmoid` (DeepSeek-V3 `modeling_deepseek_v3.py:131-169`): the sigmoid result [T, E] and the
 * gather's int64 index [T, k]; the selection branch's saves (bias add, group top-2, masked_fill)
 * die in the forward.
 *
 * @example
 * ```ts
 * import { estimate, graph, linear, routerRule } from 'vram-ts';
 * const r = graph((g, [x]) => g.call(routerRule, [g.apply(linear({ out: 8, bias: false, name: 'gate' }), x!)], { experts: 8, k: 2, score: 'softmax', renorm: true })[0]!);
 * console.log(estimate(r, { input: [32, 16], loss: 'none' }).bytes.activations); // 3968
 * ```
 */
export const routerRule: OpRule<RouterAttrs> = {
  name: 'moe_router',
  arity: 1,
  apply([logits], attrs, ctx) {
    const experts = positiveInt(attrs.experts, 'experts', ctx);
    const k = positiveInt(attrs.k, 'k', ctx);
    if (k > experts)
      fail('bad-attribute', 'a router picks at most its number of experts', { path: [...ctx.path, 'k'], expected: `<= ${experts}`, received: String(k) });
    if (logits!.shape.length !== 2)
      fail('bad-rank', 'router logits are [tokens, experts]', { path: ctx.path, expected: 'rank 2', received: `rank ${logits!.shape.length}` });
    const tokens = logits!.shape[0]!;
    const weights = tensor([tokens, k], logits!.dtype);
    return {
      outputs: [weights, tensor([tokens, k], 'int64')],
      nonDifferentiableOutputs: [1],
      saves: (needs) => {
        if (!needs.inputs[0]) return [];
        const saved: SavedRef[] = [
          { extra: tensor([tokens, experts], 'float32'), label: attrs.score === 'softmax' ? 'softmax result' : 'sigmoid result' },
          { output: 1 },
        ];
        if (attrs.renorm)
          saved.push(
            { extra: tensor([tokens, k], 'float32'), label: 'weights before division' },
            { extra: tensor([tokens, 1], 'float32'), label: 'weights sum' },
          );
        if (attrs.scaled === true) saved.push({ extra: tensor([], 'float64'), label: 'scaling factor' });
        return saved;
      },
      // The scores [T, E] and (sigmoid routing) the bias-corrected copy exist while the top-k runs.
      forwardSteps: [{ alloc: 'scores', bytes: mul(tokens, experts * 8) }, { results: 'outputs' }, { free: 'scores' }],
      forwardStepsUnrecorded: [{ alloc: 'scores', bytes: mul(tokens, experts * 8) }, { results: 'outputs' }, { free: 'scores' }],
      backward: () => ({
        inputGrads: ['new'],
        steps: [{ alloc: 'score grads', bytes: mul(tokens, experts * 4) }, { results: 'inputGrads' }, { free: 'score grads' }],
      }),
    };
  },
};

/**
 * How the routed experts run: `loop` is transformers 4.x's ModuleList loop over the experts
 * (`torch.where`, index, the expert MLP, `index_add_`); `eager` is transformers 5.x's fused
 * experts (3-D `gate_up_proj` / `down_proj`) looped over the experts hit; `grouped_mm` is 5.x's
 * default (`integrations/moe.py`: sort, one `aten::_grouped_mm` per projection over [T·k, ·]).
 */
export type ExpertsImpl = 'loop' | 'eager' | 'grouped_mm';

/**
 * Balanced routing: T·k pairs spread over the experts as evenly as possible (expert e gets
 * ⌊(T·k + E − 1 − e) / E⌋), exact for symbolic T.
 *
 * @example
 * ```ts
 * import { balancedCounts } from 'vram-ts';
 * console.log(balancedCounts(10, 4).join(' ')); // "3 3 2 2"
 * ```
 */
export function balancedCounts(pairs: Dim, experts: number): Dim[] {
  return Array.from({ length: experts }, (_, e) => floorDiv(add(pairs, experts - 1 - e), experts));
}

/**
 * The per-expert counts a capacity factor allows: min(count, ⌈factor · T·k / E⌉), or that
 * capacity for every expert when no counts are given (a padded dispatch buffer).
 *
 * @example
 * ```ts
 * import { capacityCounts } from 'vram-ts';
 * console.log(capacityCounts(64, 4, 1.25, [40, 12, 8, 4]).join(' ')); // "20 12 8 4"
 * ```
 */
export function capacityCounts(pairs: Dim, experts: number, factor: number, counts?: readonly Dim[]): Dim[] {
  if (typeof pairs !== 'number') {
    // ⌈factor·P/E⌉ with the factor to three decimals.
    const capacity = ceilDiv(mul(pairs, Math.round(factor * 1000)), experts * 1000);
    return Array.from({ length: experts }, () => capacity);
  }
  const capacity = Math.ceil((factor * pairs) / experts);
  return Array.from({ length: experts }, (_, e) => {
    const c = counts?.[e];
    return c === undefined ? capacity : typeof c === 'number' ? Math.min(c, capacity) : c;
  });
}

const bytes = (shape: readonly Dim[], dtype: DType): Dim => specBytes(tensor(shape, dtype));

/** Attributes of {@link expertMaskRule}. */
export interface ExpertMaskAttrs {
  readonly experts: number;
}

/**
 * `one_hot(selected_experts, E).permute(2, 1, 0)`: the int64 [E, k, T] mask the expert loops
 * read (no gradient).
 *
 * @example
 * ```ts
 * import { expertMaskRule } from 'vram-ts';
 * console.log(expertMaskRule.name); // moe_expert_mask
 * ```
 */
export const expertMaskRule: OpRule<ExpertMaskAttrs> = {
  name: 'moe_expert_mask',
  arity: 1,
  apply([indices], attrs, ctx) {
    const experts = positiveInt(attrs.experts, 'experts', ctx);
    const [tokens, k] = indices!.shape as [Dim, Dim];
    return { outputs: [tensor([experts, k, tokens], 'int64')], nonDifferentiableOutputs: [0], saves: () => [] };
  },
};

/** Attributes of {@link expertRule}. */
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
 * import { expertRule } from 'vram-ts';
 * console.log(expertRule.name); // moe_expert
 * ```
 */
export const expertRule: OpRule<ExpertAttrs> = {
  name: 'moe_expert',
  arity: 'variadic',
  apply(inputs, attrs, ctx) {
    if (inputs.length !== 3 && inputs.length !== 4)
      fail('bad-arity', 'an expert takes hidden, weights, mask and optionally the running sum', {
        path: ctx.path,
        expected: '3 or 4',
        received: String(inputs.length),
      });
    const [x, weights] = inputs as [TensorSpec, TensorSpec];
    const inner = positiveInt(attrs.intermediate, 'intermediate', ctx);
    if (x.shape.length !== 2)
      fail('bad-rank', 'experts take hidden states [tokens, hidden]', { path: ctx.path, expected: 'rank 2', received: `rank ${x.shape.length}` });
    const hidden = concreteDim(x.shape[1]!, 'hidden size', ctx);
    const tokens = x.shape[0]!;
    const k = weights.shape[1]!;
    const n = attrs.count;
    const dt = x.dtype;
    const p = ctx.paramDtype;
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
    const items: { spec: TensorSpec; label: string }[] = [
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
    const temp = items.reduce<Dim>((s, i) => add(s, specBytes(i.spec)), 0);
    // Without autograd each temporary goes once the next line has read it; the rows and the
    // `torch.where` indices stay for the whole iteration.
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
    const unrecorded: KernelStep[] = [
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
    const first = inputs.length === 3;
    const inputGrads = first ? (['new', 'new', 'none'] as const) : (['new', 'new', 'none', 'alias'] as const);
    // Backward: the gradients of the expert's intermediates, the [T, H] and [T, k] the index
    // backwards scatter into.
    const backTemp = add(temp, add(bytes([tokens, hidden], dt), bytes([tokens, k], dt)));
    // 5.x eager: the chain's gradients ([n, 2I] cat of the two halves, [n, I] × 2, [n, H] × 2),
    // then gate_up's slice gradient [2I, H] with the full [E, 2I, H] SelectBackward0 makes
    // (the owner's is the parameter's gradient; the others' are summed into it and freed).
    const chain = add(add(bytes([n, 2 * inner], dt), bytes([n, 2 * inner], dt)), bytes([n, 2 * hidden], dt));
    const slice = bytes([2 * inner, hidden], p);
    const full = attrs.experts === undefined ? 0 : bytes([attrs.experts, 2 * inner, hidden], p);
    const eagerSteps: KernelStep[] = [
      { alloc: 'expert grads', bytes: chain },
      { alloc: 'slice gradient', bytes: slice },
      ...(attrs.owner === true ? [{ results: 'paramGrads' } as const] : [{ alloc: 'full-size gradient', bytes: full }, { free: 'full-size gradient' }]),
      { free: 'slice gradient' },
      { free: 'expert grads' },
      { results: 'inputGrads' },
    ];
    return {
      outputs: [tensor([tokens, hidden], dt)],
      params,
      saves: (needs) => (needs.inputs[1] || needs.inputs[0] || needs.params ? items.map((i) => ({ extra: i.spec, label: i.label })) : []),
      forwardSteps: [{ results: 'outputs' }],
      forwardStepsUnrecorded: unrecorded,
      backward: () => ({
        inputGrads,
        steps:
          attrs.impl === 'eager'
            ? eagerSteps
            : [{ alloc: 'expert grads', bytes: backTemp }, { results: 'paramGrads' }, { free: 'expert grads' }, { results: 'inputGrads' }],
      }),
      macs: () => mul(n, 3 * hidden * inner),
    };
  },
};

/** Attributes of {@link groupedGateUpRule} and {@link groupedDownRule}. */
export interface GroupedExpertsAttrs {
  /** The experts this rank holds (all of them, or E/e under expert parallelism). */
  readonly experts: number;
  readonly intermediate: number;
  /** {@link groupedDownRule}: the hidden size it projects back to. */
  readonly hidden?: number;
  /**
   * Expert parallelism (transformers 5.x `grouped_mm` with sentinel ids, `integrations/moe.py:
   * 431-481`): the pairs routed to other ranks' experts keep their rows, zeroed by masks — a
   * saved [T·k, 1] bool mask, an out-of-place `masked_fill` of each grouped_mm output (forward)
   * and a new gradient per mask (backward).
   */
  readonly sentinel?: boolean;
}

/**
 * The first part of transformers 5.x's default `grouped_mm` experts (`integrations/moe.py:388-497`):
 * hidden [T, H] and expert indices [T, k] → the gate_up output [T·k, 2I] and the int32 group
 * offsets [E]. Sorts the T·k expert ids, gathers `hidden[perm // k]` ([T·k, H]), `histc` +
 * `cumsum` offsets, one `aten::_grouped_mm` against the fused `gate_up_proj` [E, 2I, H]. Saves
 * (whatever the split over experts): two int64 [T·k] orders, the offsets and the gathered rows;
 * {@link gluRule} follows.
 *
 * @example
 * ```ts
 * import { estimate, gluRule, graph, groupedDownRule, groupedGateUpRule, linear, routerRule } from 'vram-ts';
 * const moe = graph((g, [x]) => {
 *   const [w, idx] = g.call(routerRule, [g.apply(linear({ out: 4, bias: false, name: 'gate' }), x!)], { experts: 4, k: 2, score: 'softmax', renorm: true });
 *   const [gateUp, offs] = g.call(groupedGateUpRule, [x!, idx!], { experts: 4, intermediate: 16 });
 *   const prod = g.call(gluRule, [gateUp!], {})[0]!;
 *   return g.call(groupedDownRule, [prod, w!, offs!], { experts: 4, intermediate: 16, hidden: 8 })[0]!;
 * });
 * console.log(estimate(moe, { input: [16, 8], loss: 'none' }).params.total); // 1568
 * ```
 */
export const groupedGateUpRule: OpRule<GroupedExpertsAttrs> = {
  name: 'moe_grouped_gate_up',
  arity: 2,
  apply([x, indices], attrs, ctx) {
    const experts = positiveInt(attrs.experts, 'experts', ctx);
    const inner = positiveInt(attrs.intermediate, 'intermediate', ctx);
    if (x!.shape.length !== 2)
      fail('bad-rank', 'experts take hidden states [tokens, hidden]', { path: ctx.path, expected: 'rank 2', received: `rank ${x!.shape.length}` });
    const hidden = concreteDim(x!.shape[1]!, 'hidden size', ctx);
    const tokens = x!.shape[0]!;
    const n = mul(tokens, indices!.shape[1]!);
    const dt = x!.dtype;
    const items: { spec: TensorSpec; label: string }[] = [
      { spec: tensor([n], 'int64'), label: 'sorted expert order' },
      { spec: tensor([n], 'int64'), label: 'token of each row' },
    ];
    const rowsH = bytes([n, hidden], dt);
    const sentinel = attrs.sentinel === true;
    // Expert parallelism: `ids_g >= E/e` [T·k, 1] bool, saved once for the three masks.
    if (sentinel) items.push({ spec: tensor([n, 1], 'bool'), label: 'sentinel mask' });
    const fused = bytes([n, 2 * inner], dt);
    return {
      // The gathered rows are output 2: the Python local `selected_hidden_states_g` lives until the function returns.
      outputs: [tensor([n, 2 * inner], dt), tensor([experts], 'int32'), tensor([n, hidden], dt)],
      nonDifferentiableOutputs: [1, 2],
      params: [{ name: 'gate_up_proj', spec: tensor([experts, 2 * inner, hidden], ctx.paramDtype) }],
      saves: (needs) => (needs.inputs[0] || needs.params ? [...items.map((i) => ({ extra: i.spec, label: i.label })), { output: 1 }, { output: 2 }] : []),
      // Sentinels: the grouped_mm output, then its masked_fill (the output); the former freed.
      ...(sentinel
        ? { forwardSteps: [{ alloc: 'grouped_mm output', bytes: fused }, { results: 'outputs' }, { free: 'grouped_mm output' }] satisfies KernelStep[] }
        : {}),
      backward: () => ({
        inputGrads: ['new', 'none'],
        // The rows' gradient [T·k, H], the weight's, then the [T, H] scatter. Sentinels
        // (measured, 5.18): the post-mask's gradient [T·k, 2I] first (the incoming one then
        // goes), the grouped_mm's weight then rows gradients, the pre-mask's [T·k, H].
        steps: sentinel
          ? [
              { alloc: 'post-mask grad', bytes: fused },
              { release: 'incomingGrads' },
              { results: 'paramGrads' },
              { alloc: 'rows grad', bytes: rowsH },
              { free: 'post-mask grad' },
              { alloc: 'pre-mask grad', bytes: rowsH },
              { free: 'rows grad' },
              { results: 'inputGrads' },
              { free: 'pre-mask grad' },
            ]
          : [{ results: 'paramGrads' }, { alloc: 'rows grad', bytes: rowsH }, { release: 'incomingGrads' }, { results: 'inputGrads' }, { free: 'rows grad' }],
      }),
      macs: () => mul(n, 2 * hidden * inner),
    };
  },
};

/**
 * `act(gate) * up` on the two halves of a fused [N, 2I] gate_up output (5.x's experts: `chunk(2)`
 * views): saves the whole fused storage (SiluBackward0 keeps the gate half, MulBackward0 the up
 * half) and the activation [N, I]; backward makes the three [N, I] gradients and their [N, 2I] cat.
 *
 * @example
 * ```ts
 * import { estimate, graph, gluRule } from 'vram-ts';
 * const glu = graph((g, [x]) => g.call(gluRule, [x!], {})[0]!);
 * console.log(estimate(glu, { input: [4, 8], loss: 'none' }).bytes.activations); // 0
 * ```
 */
export const gluRule: OpRule<Record<string, never>> = {
  name: 'glu_halves',
  arity: 1,
  apply([x], _attrs, ctx) {
    const last = concreteDim(x!.shape[x!.shape.length - 1]!, 'fused width', ctx);
    if (last % 2 !== 0) fail('shape-mismatch', 'a fused gate_up output has an even width', { path: ctx.path, received: String(last) });
    const half = tensor([...x!.shape.slice(0, -1), last / 2], x!.dtype);
    const halfBytes = specBytes(half);
    return {
      outputs: [half],
      saves: (needs) => (needs.inputs[0] ? [{ input: 0 }, { extra: half, label: 'activation' }] : []),
      forwardStepsUnrecorded: [{ alloc: 'activation', bytes: halfBytes }, { results: 'outputs' }, { free: 'activation' }],
      // MulBackward0's two gradients (the incoming one then goes), SiluBackward0's (the
      // activation's gradient then goes, and with both nodes run their saved tensors), then
      // SplitBackward0's [N, 2I] cat of the gate and up gradients.
      backward: () => ({
        inputGrads: ['new'],
        steps: [
          { alloc: 'activation grad', bytes: halfBytes },
          { alloc: 'up grad', bytes: halfBytes },
          { release: 'incomingGrads' },
          { alloc: 'gate grad', bytes: halfBytes },
          { free: 'activation grad' },
          { release: 'saved' },
          { results: 'inputGrads' },
          { free: 'gate grad' },
          { free: 'up grad' },
        ],
      }),
    };
  },
};

/**
 * The second half of 5.x's `grouped_mm` experts: the product [T·k, I], routing weights [T, k]
 * and the offsets → [T, H]: one `aten::_grouped_mm` against `down_proj` [E, H, I], `*` the
 * sorted weights, the inverse-order gather and `view(T, k, H).sum(1)`. Saves the product, the
 * offsets, the weights [T·k, 1], the down output [T·k, H] and the int64 inverse order.
 *
 * @example
 * ```ts
 * import { groupedDownRule } from 'vram-ts';
 * console.log(groupedDownRule.name); // moe_grouped_down
 * ```
 */
export const groupedDownRule: OpRule<GroupedExpertsAttrs> = {
  name: 'moe_grouped_down',
  arity: 3,
  apply([product, weights], attrs, ctx) {
    const experts = positiveInt(attrs.experts, 'experts', ctx);
    const inner = positiveInt(attrs.intermediate, 'intermediate', ctx);
    const hidden = positiveInt(attrs.hidden, 'hidden', ctx);
    const n = product!.shape[0]!;
    const tokens = weights!.shape[0]!;
    const dt = product!.dtype;
    const rowsH = bytes([n, hidden], dt);
    return {
      outputs: [tensor([tokens, hidden], dt)],
      params: [{ name: 'down_proj', spec: tensor([experts, hidden, inner], ctx.paramDtype) }],
      saves: (needs) =>
        needs.inputs[0] || needs.inputs[1] || needs.params
          ? [
              { input: 0 },
              { input: 2 },
              { extra: tensor([n, 1], dt), label: 'row weights' },
              { extra: tensor([n, hidden], dt), label: 'down output' },
              { extra: tensor([n], 'int64'), label: 'inverse order' },
            ]
          : [],
      // The weighted rows [T·k, H] and their inverse-order copy before the sum.
      forwardSteps: [
        { alloc: 'weighted rows', bytes: rowsH },
        { alloc: 'reordered rows', bytes: rowsH },
        { free: 'weighted rows' },
        { results: 'outputs' },
        { free: 'reordered rows' },
      ],
      // `proj_out` (the down output) lives until the function returns; the weighted rows until their inverse-order copy is made.
      forwardStepsUnrecorded: [
        { alloc: 'down output', bytes: rowsH },
        { alloc: 'weighted rows', bytes: rowsH },
        { alloc: 'reordered rows', bytes: rowsH },
        { free: 'weighted rows' },
        { results: 'outputs' },
        { free: 'reordered rows' },
        { free: 'down output' },
      ],
      backward: () => ({
        inputGrads: ['new', 'new', 'none'],
        // The nodes in turn (measured, 5.18): the sum's expanded [T·k, H] gradient, the inverse
        // gather's zeros + index_put, the product's two [T·k, H] gradients (the weights' [T·k, 1]
        // sum of one), (sentinels: the post-mask's masked_fill gradient), the grouped_mm's.
        steps: [
          { alloc: 'expanded grad', bytes: rowsH },
          { alloc: 'reordered grad', bytes: rowsH },
          { free: 'expanded grad' },
          { alloc: 'down output grad', bytes: rowsH },
          { alloc: 'weighted rows grad', bytes: rowsH },
          { free: 'reordered grad' },
          { free: 'weighted rows grad' },
          ...(attrs.sentinel === true ? ([{ alloc: 'post-mask grad', bytes: rowsH }, { free: 'down output grad' }] satisfies KernelStep[]) : []),
          { results: 'paramGrads' },
          { results: 'inputGrads' },
          { free: attrs.sentinel === true ? 'post-mask grad' : 'down output grad' },
        ],
      }),
      macs: () => mul(n, hidden * inner),
    };
  },
};

/** Attributes of {@link expertParallelRouterRule}. */
export interface ExpertParallelRouterAttrs {
  /** Experts per rank (E/e). */
  readonly localExperts: number;
  /** This rank of the expert-parallel group. */
  readonly rank: number;
}

/**
 * transformers 5.x's expert-parallel router hook (`RouterParallel`, `distributed/
 * tensor_parallel.py:700-727`): the router's weights [T, k] and global expert ids → the weights
 * with the other ranks' experts' slots zeroed (`masked_fill`, its bool mask [T, k] saved) and
 * the local ids (`fmod` by E/e, the other ranks' slots set to the sentinel E/e). Every rank
 * keeps every token: the experts then run on all T·k pairs, and their output is all-reduced in
 * place (no allocation).
 *
 * @example
 * ```ts
 * import { expertParallelRouterRule, tensor } from 'vram-ts';
 * const r = expertParallelRouterRule.apply([tensor([32, 2], 'float32'), tensor([32, 2], 'int64')], { localExperts: 4, rank: 1 }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'float32', path: [] });
 * console.log(r.outputs.map((o) => o.dtype)); // [ 'float32', 'int64' ]
 * ```
 */
export const expertParallelRouterRule: OpRule<ExpertParallelRouterAttrs> = {
  name: 'moe_ep_router',
  arity: 2,
  apply([weights, indices], attrs, ctx) {
    positiveInt(attrs.localExperts, 'localExperts', ctx);
    const [tokens, k] = weights!.shape as [Dim, Dim];
    const ids = bytes([tokens, k], 'int64');
    return {
      outputs: [tensor([tokens, k], weights!.dtype), tensor([tokens, k], 'int64')],
      nonDifferentiableOutputs: [1],
      saves: (needs) => (needs.inputs[0] ? [{ extra: tensor([tokens, k], 'bool'), label: "other ranks' slots" }] : []),
      // `ids // (E/e) != rank`, then the weights masked; `ids.masked_fill(-1)`, `fmod`, `== -1`,
      // `masked_fill(E/e)`: the local ids.
      forwardSteps: [
        { alloc: 'ids // local experts', bytes: ids },
        { free: 'ids // local experts' },
        { alloc: 'masked ids', bytes: ids },
        { alloc: 'fmod', bytes: ids },
        { free: 'masked ids' },
        { alloc: 'sentinel slots', bytes: bytes([tokens, k], 'bool') },
        { results: 'outputs' },
        { free: 'sentinel slots' },
        { free: 'fmod' },
      ],
      backward: () => ({ inputGrads: ['new', 'none'] }),
    };
  },
};
