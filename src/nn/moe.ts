import { VramError, fail, type VramIssue } from '../errors.js';
import { activationOp } from '../ops/activation.js';
import { addOp, mulOp } from '../ops/merge.js';
import {
  balancedCounts,
  capacityCounts,
  expertMaskOp,
  expertParallelRouterOp,
  expertOp,
  gluOp,
  groupedDownOp,
  groupedGateUpOp,
  routerOp,
  type ExpertsImpl,
} from '../ops/moe/index.js';
import { viewOp } from '../ops/view.js';
import { mul } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import { graph } from './graph.js';
import { module } from './module.js';
import { linear } from './linear.js';
import { gatedMlp } from './mlp.js';
import { activationName, checkInput, fieldsOf } from './block-schema.js';
import { checkOptions, moduleName, opLayer, type Fields } from './op.js';
import { arrayOf, boolean, integer, number, object, oneOf, show, string } from '../validate.js';
import type { GraphBuilder, Layer, LayerOptions, ModuleLayer, TensorRef } from './types.js';

/** How many (token, k) pairs each expert gets. */
export interface MoeRouting {
  /**
   * Tokens per expert for this block's forward (a measured imbalance; the counts add up to
   * tokens × k). Default: balanced, T·k spread as evenly as possible.
   */
  readonly counts?: readonly number[];
  /**
   * A capacity factor: each expert holds at most ⌈factor · T·k / E⌉ pairs (the rest dropped),
   * and without `counts` every expert is filled to that capacity (a padded dispatch buffer).
   */
  readonly capacityFactor?: number;
}

/** Options of {@link moeBlock}. */
export interface MoeBlockOptions extends LayerOptions, MoeRouting {
  readonly hidden: number;
  readonly experts: number;
  /** Experts per token (`num_experts_per_tok`). */
  readonly k: number;
  /** Each routed expert's MLP width (`intermediate_size` of Mixtral, `moe_intermediate_size` of the others). */
  readonly intermediate: number;
  /** See {@link ExpertsImpl}: `loop` (transformers 4.x), `eager` or `grouped_mm` (5.x). */
  readonly impl: ExpertsImpl;
  /** `softmax` (default) or DeepSeek-V3's `sigmoid` scores. */
  readonly score?: 'softmax' | 'sigmoid';
  /** Renormalise the top-k weights (Mixtral; `norm_topk_prob`). Default true. */
  readonly renorm?: boolean;
  /** DeepSeek's `routed_scaling_factor` multiply. */
  readonly scaled?: boolean;
  /** DeepSeek-V3's `gate.e_score_correction_bias` buffer [E]: `fp32` where the release keeps it in float32. */
  readonly correctionBias?: { readonly fp32: boolean };
  /** The block's forward keeps the router logits [T, E] until it returns (`_, w, idx = self.gate(h)`; 4.x Mixtral/Qwen's `router_logits`). */
  readonly holdLogits?: boolean;
  /** The gate's activation inside each expert (`hidden_act`, default `silu`). */
  readonly activation?: string;
  /** `loop`: each expert's projection names gate / up / down (Mixtral: w1, w3, w2). */
  readonly expertNames?: readonly [string, string, string];
  /** The block's class (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, DeepseekV3MoE). */
  readonly className?: string;
  /** The experts' class (5.x: MixtralExperts). */
  readonly expertsClassName?: string;
  /** `loop`: each expert's class (MixtralBlockSparseTop2MLP, Qwen2MoeMLP). */
  readonly expertClassName?: string;
  /** `loop`: run only the experts that got a token (transformers ≥ 4.41 reading of 4.57.6's `expert_hit`); 4.40 runs all. */
  readonly hitOnly?: boolean;

  /** A shared expert on every token: its width, module name and class, and Qwen2-MoE's sigmoid gate. */
  readonly shared?: { readonly intermediate: number; readonly name: string; readonly className: string; readonly gated: boolean };
  /** Where the shared expert sits: on the [T, H] rows (Qwen2-MoE) or the [B, S, H] input (DeepSeek). */
  readonly sharedOn?: 'rows' | 'input';
  /**
   * One rank of transformers 5.x's expert parallelism (`DistributedConfig(enable_expert_parallel=
   * True)`, the `ep_plan`): the rank holds experts rank·E/e … (rank+1)·E/e − 1 of the routed
   * experts (the router and any shared expert whole), every rank routes every token, the
   * other ranks' slots are zeroed (`eager`: skipped; `grouped_mm`: kept as masked sentinel
   * rows), and the output is all-reduced in place. `counts` stay the whole block's (E of them).
   */
  readonly expertParallel?: { readonly size: number; readonly rank: number };
}

const MOE_FIELDS: Fields = {
  ...fieldsOf(['hidden', 'experts', 'k', 'intermediate'], integer(1)),
  impl: oneOf(['loop', 'eager', 'grouped_mm'], 'experts implementation'),
  score: oneOf(['softmax', 'sigmoid'], 'router score'),
  ...fieldsOf(['renorm', 'scaled', 'holdLogits', 'hitOnly'], boolean),
  correctionBias: object({ fields: { fp32: boolean }, required: ['fp32'] }),
  activation: activationName,
  expertNames: arrayOf(moduleName, { min: 3, max: 3 }),
  ...fieldsOf(['className', 'expertsClassName', 'expertClassName'], string),
  shared: object({
    fields: { intermediate: integer(1), name: moduleName, className: string, gated: boolean },
    required: ['intermediate', 'name', 'className', 'gated'],
  }),
  sharedOn: oneOf(['rows', 'input'], 'shared expert placement'),
  counts: arrayOf(integer(0)),
  capacityFactor: number(Number.MIN_VALUE),
  expertParallel: object({ fields: { size: integer(2, 1_000_000), rank: integer(0, 1_000_000) }, required: ['size', 'rank'] }),
};

/** What the block's graph reads: the options, the rank's slice of experts and the layers built once. */
interface MoeParts {
  readonly options: MoeBlockOptions;
  readonly path: readonly string[];
  /** The experts this rank holds and runs: `local` of them from `first`. */
  readonly local: number;
  readonly first: number;
  readonly gate: Layer;
  readonly shared: Layer | undefined;
  readonly sharedGate: Layer | undefined;
  readonly gateUp: Layer;
  readonly down: Layer;
}

/**
 * What the options, past their schema, must meet together (at `['moeBlock', name, …]`): at most
 * `experts` per token (torch.topk's k), one count per expert, a selection bias only on sigmoid
 * routing, the expert-parallel size dividing the experts and the rank below it (transformers 5.x's
 * `ep_plan`). The token counts' sum waits for the traced token count.
 */
function checkMoeOptions(options: MoeBlockOptions, path: readonly string[]): void {
  const { experts, k, counts, expertParallel: ep } = options;
  const issues: VramIssue[] = [];
  const add = (key: readonly string[], message: string, expected: string, received: string, code = 'bad-option') =>
    issues.push({ path: [...path, ...key], code, message, expected, received });
  if (k > experts) add(['k'], 'experts per token from 1 to the number of experts', `1 .. ${experts}`, String(k), 'bad-attribute');
  if (counts !== undefined && counts.length !== experts)
    add(['counts'], 'one non-negative token count per expert', `${experts} integers >= 0`, `${counts.length} counts`);
  if (options.correctionBias !== undefined && options.score !== 'sigmoid')
    add(['correctionBias'], 'a selection bias needs sigmoid routing', "score: 'sigmoid'", String(options.score ?? 'softmax'));
  if (options.sharedOn !== undefined && options.shared === undefined)
    add(['sharedOn'], 'places the shared expert: it needs `shared`', 'absent', show(options.sharedOn));
  if (ep !== undefined && experts % ep.size !== 0)
    add(['expertParallel', 'size'], 'the expert-parallel size divides the experts (at least 2 ranks)', `a divisor of ${experts} >= 2`, String(ep.size));
  if (ep !== undefined && ep.rank >= ep.size)
    add(['expertParallel', 'rank'], 'the expert-parallel rank must be below the size', `0 .. ${ep.size - 1}`, String(ep.rank));
  if (ep !== undefined && options.impl === 'loop')
    add(
      ['expertParallel'],
      "expert parallelism is transformers 5.x's (ep_plan): the 4.x expert loop has none",
      "impl 'eager' or 'grouped_mm'",
      'loop',
      'not-modelled',
    );
  if (issues.length > 0) throw new VramError(issues);
}

/** Tokens per expert of this rank's experts: measured, capacity-limited or balanced over the T·k pairs. */
function rankCounts(parts: MoeParts, tokens: Dim): readonly Dim[] {
  const { options, path, first, local } = parts;
  const pairs = mul(tokens, options.k);
  if (options.counts !== undefined && typeof pairs === 'number') {
    const total = options.counts.reduce((a, b) => a + b, 0);
    if (total !== pairs)
      fail('bad-option', 'the token counts must add up to tokens × experts per token', {
        path: [...path, 'counts'],
        expected: String(pairs),
        received: String(total),
      });
  }
  const allCounts: readonly Dim[] =
    options.capacityFactor !== undefined
      ? capacityCounts(pairs, options.experts, options.capacityFactor, options.counts)
      : (options.counts ?? balancedCounts(pairs, options.experts));
  // The rank's experts and what they get.
  return allCounts.slice(first, first + local);
}

/** 5.x's grouped_mm experts: two ops of the one `experts` module. */
function groupedExperts(g: GraphBuilder, parts: MoeParts, rows: TensorRef, weights: TensorRef, indices: TensorRef): TensorRef {
  const { gateUp, down } = parts;
  // Two ops of the one `experts` module: gate_up's grouped_mm and activation, then down's and the weighted sum.
  const expertsModule = module(
    'experts',
    parts.options.expertsClassName ?? 'Experts',
    graph((inner, [r, w, idx]) => {
      const [fused, offsets, ...locals] = inner.applyAll(gateUp, r!, idx!);
      for (const t of locals) inner.hold(t);
      const product = inner.call(gluOp, [fused!], {})[0]!;
      return inner.apply(down, product, w!, offsets!);
    }),
  );
  return g.apply(expertsModule, rows, weights, indices);
}

/** 4.x's loop over a ModuleList or 5.x's eager loop over the fused experts, summed in place. */
function loopedExperts(
  g: GraphBuilder,
  parts: MoeParts,
  rows: TensorRef,
  weights: TensorRef,
  indices: TensorRef,
  counts: readonly Dim[],
  tokens: Dim,
): TensorRef {
  const { options, local } = parts;
  const hidden = options.hidden;
  // The loops: one op per expert run, in expert order; parameters `experts.0.w1.weight` (4.x)
  // or the fused `experts.gate_up_proj` every expert slices (5.x), as in the checkpoints.
  // 5.x's eager loop: one_hot over E/e + 1 classes (the sentinel's too); 4.x's over E.
  const mask = g.call(expertMaskOp, [indices], { experts: options.impl === 'eager' ? local + 1 : local })[0]!;
  let sum: TensorRef | undefined;
  const runs = (n: Dim) => !(n === 0 && (options.impl === 'eager' || options.hitOnly === true));
  let last = -1;
  counts.forEach((n, e) => {
    if (runs(n)) last = e;
  });
  counts.forEach((n, e) => {
    // 4.5x's loop skips an expert no token chose (expert_hit), but its module and parameters exist:
    // it owns them, runs nothing, and its parameters get no gradient this step.
    const skipped = !runs(n);
    if (skipped && options.impl !== 'loop') return;
    const attrs =
      options.impl === 'loop'
        ? {
            impl: 'loop' as const,
            intermediate: options.intermediate,
            count: n,
            ...(options.expertNames !== undefined ? { names: options.expertNames } : {}),
          }
        : { impl: 'eager' as const, intermediate: options.intermediate, count: n, experts: local, owner: e === last };
    const layer = opLayer(
      expertOp,
      options.impl === 'loop' ? (options.expertClassName ?? 'Expert') : (options.expertsClassName ?? 'Experts'),
      skipped ? { ...attrs, unused: true } : attrs,
      { name: options.impl === 'loop' ? `experts.${e}` : 'experts' },
    );
    if (skipped) g.apply(layer, rows, weights, mask);
    else sum = sum === undefined ? g.apply(layer, rows, weights, mask) : g.apply(layer, rows, weights, mask, sum);
  });
  return sum ?? g.call(viewOp, [rows], { shape: [tokens, hidden] })[0]!;
}

/** The block's forward: gate → router → routed experts → shared expert added. */
function moeForward(g: GraphBuilder, parts: MoeParts, x: TensorRef): TensorRef {
  const { options, gate, shared, sharedGate } = parts;
  const { hidden, experts, k } = options;
  const ep = options.expertParallel;
  const shape = x.shape as readonly Dim[];
  const tokens = shape.slice(0, -1).reduce<Dim>((a, b) => mul(a, b), 1);
  checkInput(g, x, [2, 3], ['moeBlock', 'hidden', hidden]);
  const rows = shape.length === 2 ? x : g.call(viewOp, [x], { shape: [tokens, hidden] })[0]!;
  const logits = g.apply(gate, rows);
  if (options.holdLogits === true) g.hold(logits);
  let [weights, indices] = g.call(routerOp, [logits], {
    experts,
    k,
    score: options.score ?? 'softmax',
    renorm: options.renorm ?? true,
    ...(options.scaled === true ? { scaled: true } : {}),
    ...(options.correctionBias !== undefined ? { correctionBias: { name: 'gate.e_score_correction_bias', fp32: options.correctionBias.fp32 } } : {}),
  });
  // RouterParallel: the other ranks' slots zeroed and sent to the sentinel; ids made local.
  if (ep !== undefined) [weights, indices] = g.call(expertParallelRouterOp, [weights!, indices!], { localExperts: parts.local, rank: ep.rank });
  const counts = rankCounts(parts, tokens);
  let out =
    options.impl === 'grouped_mm' ? groupedExperts(g, parts, rows, weights!, indices!) : loopedExperts(g, parts, rows, weights!, indices!, counts, tokens);
  if (shared !== undefined && options.sharedOn !== 'input') {
    let s = g.apply(shared, rows);
    if (sharedGate !== undefined) {
      const gated = g.call(activationOp('sigmoid'), [g.apply(sharedGate, rows)], {})[0]!;
      s = g.call(mulOp, [gated, s], {})[0]!;
    }
    out = g.call(addOp, [out, s], {})[0]!;
  }
  let result = shape.length === 2 ? out : g.call(viewOp, [out], { shape })[0]!;
  if (shared !== undefined && options.sharedOn === 'input') result = g.call(addOp, [result, g.apply(shared, x)], {})[0]!;
  return result;
}

/**
 * A mixture-of-experts block as Hugging Face runs it: `gate` Linear → router (softmax or
 * sigmoid, top-k, renormalisation) → the routed experts (`expertOp` per expert: 4.x's loop over a
 * ModuleList, 5.x's fused experts looped or grouped_mm) → optional shared expert (Qwen2-MoE's
 * sigmoid-gated one, DeepSeek's plain one) added. What the experts keep depends on how many
 * tokens each gets: balanced by default, `counts` for a measured routing, `capacityFactor` for a
 * capacity-limited one.
 *
 * @example
 * ```ts
 * import { estimate, moeBlock } from 'vram-ts';
 * const block = moeBlock({ name: 'mlp', hidden: 64, experts: 8, k: 2, intermediate: 32, impl: 'eager' });
 * const e = estimate(block, { input: [2, 16, 64], loss: 'none' });
 * console.log(e.params.total); // 49664
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function moeBlock(options: MoeBlockOptions): ModuleLayer {
  checkOptions(options, MOE_FIELDS, 'moeBlock', ['hidden', 'experts', 'k', 'intermediate', 'impl']);
  const { hidden, experts } = options;
  const path = ['moeBlock', options.name ?? 'mlp'];
  checkMoeOptions(options, path);
  const ep = options.expertParallel;
  // The experts this rank holds and runs.
  const local = ep === undefined ? experts : experts / ep.size;
  const first = ep === undefined ? 0 : ep.rank * local;
  const gate = linear({ out: experts, bias: false, name: 'gate' });
  const act = options.activation ?? 'silu';
  const shared =
    options.shared === undefined
      ? undefined
      : gatedMlp({ name: options.shared.name, className: options.shared.className, hidden, intermediate: options.shared.intermediate, activation: act });
  const sharedGate = options.shared?.gated === true ? linear({ out: 1, bias: false, name: 'shared_expert_gate' }) : undefined;
  const sentinel = ep !== undefined ? { sentinel: true } : {};
  const gateUp = opLayer(groupedGateUpOp, null, { experts: local, intermediate: options.intermediate, ...sentinel });
  const down = opLayer(groupedDownOp, null, { experts: local, intermediate: options.intermediate, hidden, ...sentinel });
  const parts: MoeParts = { options, path, local, first, gate, shared, sharedGate, gateUp, down };
  const body = graph((g, [x]) => moeForward(g, parts, x!));
  return Object.freeze({ kind: 'module', className: options.className ?? 'MoeBlock', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}
