import { fail } from '../../errors.js';
import type { Dim } from '../../sym/expr.js';
import { add, ceilDiv, floorDiv, mul } from '../../sym/ops.js';
import { tensor } from '../../tensor/spec.js';
import { positiveInt } from '../check.js';
import type { OpRule, SavedRef } from '../types.js';

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
  /**
   * DeepSeek-V3's selection bias, a buffer [E] of the gate (`gate.e_score_correction_bias`):
   * float32 where the release keeps it so (5.x: `_keep_in_fp32_modules_strict`), else in the
   * parameters' dtype (4.57 casts it with the model).
   */
  readonly correctionBias?: { readonly name: string; readonly fp32: boolean };
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
 * import { estimate, graph, linear } from 'vram-ts';
 * import { routerOp } from 'vram-ts/internals';
 * const r = graph((g, [x]) => g.call(routerOp, [g.apply(linear({ out: 8, bias: false, name: 'gate' }), x!)], { experts: 8, k: 2, score: 'softmax', renorm: true })[0]!);
 * console.log(estimate(r, { input: [32, 16], loss: 'none' }).bytes.activations); // 3968
 * ```
 */
export const routerOp: OpRule<RouterAttrs> = {
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
    const bias = attrs.correctionBias;
    return {
      outputs: [weights, tensor([tokens, k], 'int64')],
      ...(bias !== undefined ? { buffers: [{ name: bias.name, spec: tensor([experts], bias.fp32 ? 'float32' : ctx.paramDtype) }] } : {}),
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
 * Balanced routing: T·k pairs spread over the experts as evenly as possible (expert e gets
 * ⌊(T·k + E − 1 − e) / E⌋), exact for symbolic T.
 *
 * @example
 * ```ts
 * import { balancedCounts } from 'vram-ts/internals';
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
 * import { capacityCounts } from 'vram-ts/internals';
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
