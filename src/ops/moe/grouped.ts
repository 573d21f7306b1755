import { fail } from '../../errors.js';
import type { Dim } from '../../sym/expr.js';
import { mul } from '../../sym/ops.js';
import { specBytes, tensor, type TensorSpec } from '../../tensor/spec.js';
import type { DType } from '../../tensor/dtype.js';
import { concreteDim, positiveInt } from '../check.js';
import type { KernelStep, OpRule } from '../types.js';

const bytes = (shape: readonly Dim[], dtype: DType): Dim => specBytes(tensor(shape, dtype));

/** Attributes of {@link groupedGateUpOp} and {@link groupedDownOp}. */
export interface GroupedExpertsAttrs {
  /** The experts this rank holds (all of them, or E/e under expert parallelism). */
  readonly experts: number;
  readonly intermediate: number;
  /** {@link groupedDownOp}: the hidden size it projects back to. */
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
 * {@link gluOp} follows.
 *
 * @example
 * ```ts
 * import { estimate, graph, linear } from 'vram-ts';
 * import { gluOp, groupedDownOp, groupedGateUpOp, routerOp } from 'vram-ts/internals';
 * const moe = graph((g, [x]) => {
 *   const [w, idx] = g.call(routerOp, [g.apply(linear({ out: 4, bias: false, name: 'gate' }), x!)], { experts: 4, k: 2, score: 'softmax', renorm: true });
 *   const [gateUp, offs] = g.call(groupedGateUpOp, [x!, idx!], { experts: 4, intermediate: 16 });
 *   const prod = g.call(gluOp, [gateUp!], {})[0]!;
 *   return g.call(groupedDownOp, [prod, w!, offs!], { experts: 4, intermediate: 16, hidden: 8 })[0]!;
 * });
 * console.log(estimate(moe, { input: [16, 8], loss: 'none' }).params.total); // 1568
 * ```
 */
export const groupedGateUpOp: OpRule<GroupedExpertsAttrs> = {
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
    // `perm` (output 3) is saved by the weights' gather; `perm // k` by the rows' gather.
    const items: { spec: TensorSpec; label: string }[] = [{ spec: tensor([n], 'int64'), label: 'token of each row' }];
    const rowsH = bytes([n, hidden], dt);
    const sentinel = attrs.sentinel === true;
    // Expert parallelism: `ids_g >= E/e` [T·k, 1] bool, saved once for the three masks.
    if (sentinel) items.push({ spec: tensor([n, 1], 'bool'), label: 'sentinel mask' });
    const fused = bytes([n, 2 * inner], dt);
    return {
      // Outputs 2-6 are Python locals that live until the function returns: the gathered rows
      // `selected_hidden_states_g`, `perm`, the sorted ids `expert_ids_g`, their float copy for
      // `histc` (CPU) and `tokens_per_expert`.
      outputs: [
        tensor([n, 2 * inner], dt),
        tensor([experts], 'int32'),
        tensor([n, hidden], dt),
        tensor([n], 'int64'),
        tensor([n], 'int64'),
        tensor([n], 'float32'),
        tensor([experts], 'float32'),
      ],
      nonDifferentiableOutputs: [1, 2, 3, 4, 5, 6],
      params: [{ name: 'gate_up_proj', spec: tensor([experts, 2 * inner, hidden], ctx.paramDtype) }],
      saves: (needs) =>
        needs.inputs[0] || needs.params ? [{ output: 3 }, ...items.map((i) => ({ extra: i.spec, label: i.label })), { output: 1 }, { output: 2 }] : [],
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
 * import { estimate, graph } from 'vram-ts';
 * import { gluOp } from 'vram-ts/internals';
 * const glu = graph((g, [x]) => g.call(gluOp, [x!], {})[0]!);
 * console.log(estimate(glu, { input: [4, 8], loss: 'none' }).bytes.activations); // 0
 * ```
 */
export const gluOp: OpRule<Record<string, never>> = {
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
 * import { groupedDownOp } from 'vram-ts/internals';
 * console.log(groupedDownOp.name); // moe_grouped_down
 * ```
 */
export const groupedDownOp: OpRule<GroupedExpertsAttrs> = {
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
      // `proj_out` rebound to the down output lets the product go; the down output lives until
      // the function returns, the weighted rows until their inverse-order copy is made.
      // The sorted weights `sample_weights_g` [T·k] and `inv_perm` are locals to the end too.
      forwardStepsUnrecorded: [
        { alloc: 'sorted weights', bytes: bytes([n], dt) },
        { alloc: 'down output', bytes: rowsH },
        { releaseInput: 0 },
        { alloc: 'weighted rows', bytes: rowsH },
        { alloc: 'inverse order', bytes: bytes([n], 'int64') },
        { alloc: 'reordered rows', bytes: rowsH },
        { free: 'weighted rows' },
        { results: 'outputs' },
        { free: 'reordered rows' },
        { free: 'down output' },
        { free: 'inverse order' },
        { free: 'sorted weights' },
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
