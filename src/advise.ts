import {
  COST_ORDER,
  allLevers,
  blocksOf,
  fitJob,
  type AdviseContext,
  type Change,
  type Fitted,
  type Job,
  type LeverCost,
  type LeverDef,
} from './advise-levers.js';
import { VramError } from './errors.js';
import { ESTIMATE_FIELDS, MODEL_KEYS, anything, budget, runtimeOptions } from './estimate-options.js';
import { withTraces } from './estimate.js';
import { fits, type FitOptions, type FitResult } from './fit.js';
import { LIMITS } from './limits.js';
import type { Layer } from './nn/types.js';
import type { estimateRanks } from './ranks.js';
import { integer, object, oneOf, validate } from './validate.js';

export type { LeverCost, LeverCostKind } from './advise-levers.js';

/**
 * Options of {@link advise}: a concrete job as {@link fits} takes it, and what the search may use.
 *
 * @category Estimate and fit
 */
export interface AdviseOptions extends FitOptions {
  /** GPUs the sharding levers may spread the job over (default 1: no sharding lever). */
  readonly gpus?: number;
  /** The most levers one combination joins (default 2; 1: single levers only). */
  readonly maxCombination?: number;
}

/**
 * A job's fit figures, as {@link fits} judges it: the baseline's and each lever's.
 *
 * @category Estimate and fit
 */
export interface AdviseFigures {
  /** The full options estimated (a sharded job names its highest rank). */
  readonly options: FitOptions;
  readonly fits: boolean;
  /** The allocated peak: `estimate(model, options).bytes.peak`. */
  readonly peak: number;
  /** What the caching allocator reserves (as {@link FitResult.reserved}). */
  readonly reserved: number;
  /** What the verdict needs (as {@link FitResult.needed}). */
  readonly needed: number;
  /** capacity − needed. */
  readonly headroom: number;
}

/**
 * One lever (or combination of levers) applied to the job, with the figures of its real estimate.
 *
 * @category Estimate and fit
 */
export interface LeverResult extends AdviseFigures {
  /** Stable id: `checkpoint-every-block`, or a combination's ids joined by `+`. */
  readonly lever: string;
  /** The levers it joins (one for a single lever). */
  readonly levers: readonly string[];
  /** What to change, in the user's words. */
  readonly description: string;
  /** The model estimated: the one given, or the same model with another loss head. */
  readonly model: Layer;
  /** The kind is a combination's dearest; the notes are joined. */
  readonly cost: LeverCost;
}

/**
 * The job as given, as {@link fits} judges it.
 *
 * @category Estimate and fit
 */
export interface AdviseBaseline extends AdviseFigures {
  readonly capacity: number;
  readonly usable: number;
}

/**
 * What {@link advise} found.
 *
 * @category Estimate and fit
 */
export interface AdviseResult {
  readonly baseline: AdviseBaseline;
  /** Fitting first (cheapest cost kind, then fewer levers, then less needed), then the rest by what they need. */
  readonly levers: readonly LeverResult[];
  /** The first fitting entry of `levers`, or undefined when none fits. */
  readonly best: LeverResult | undefined;
  /** Levers that do not apply to this job, and why. */
  readonly skipped: readonly { readonly lever: string; readonly reason: string }[];
}

/** AdviseOptions as a check. */
const adviseOptions = object({
  fields: {
    ...ESTIMATE_FIELDS,
    gpu: budget,
    runtime: runtimeOptions,
    // fits checks the symbol values.
    env: anything,
    verdict: oneOf(['reserved', 'allocated'], 'fit verdict'),
    gpus: integer(1, LIMITS.ranks),
    maxCombination: integer(1, 4),
  },
  misplaced: MODEL_KEYS,
  required: ['input', 'gpu'],
});

/** Singles that help (without fitting alone) that the combinations draw from, the most helpful first. */
const COMBINE_FROM = 6;
/** The most combinations estimated. */
const MAX_COMBINATIONS = 12;

/**
 * What change makes a training step fit a GPU. Every lever a user has, where it applies to the
 * job as given — activation checkpointing (every block, every 2nd block, selective), gradient
 * accumulation (the smallest split of the batch that fits), a shorter context (the longest that
 * fits), LoRA and QLoRA, 8-bit Adam / Adafactor / SGD, pure 16-bit weights, chunked and Liger
 * fused cross-entropy, DeepSpeed's optimizer offload and, with `gpus` > 1, FSDP2 and ZeRO-2/3 —
 * is applied alone, then the cheapest combinations of the levers that help (in cost order, until
 * some fit, at most `maxCombination` levers each). Each is judged by {@link fits} on its own
 * options — the real estimate, never a rule of thumb; a sharded job by its highest rank
 * ({@link estimateRanks}). A lever that does not apply is listed in `skipped` with the reason.
 *
 * @example
 * ```ts
 * import { advise, mobilenetV3Small } from 'vram-ts';
 * const a = advise(mobilenetV3Small(), { input: [256, 3, 224, 224], gpu: '4GB' });
 * console.log(a.baseline.fits, a.best?.lever, a.best?.cost.kind, a.best?.options.input); // false micro-batches throughput [ 128, 3, 224, 224 ]
 * ```
 *
 * @category Estimate and fit
 */
export function advise(model: Layer, options: AdviseOptions): AdviseResult {
  // Levers that leave the trace as it is (the optimizer, offload, the engines) reuse the job's.
  return withTraces(() => adviseJob(model, options));
}

function adviseJob(model: Layer, options: AdviseOptions): AdviseResult {
  validate(options, adviseOptions);
  const { gpus = 1, maxCombination = 2, ...fitOnly } = options;
  const base = fits(model, fitOnly);
  const ctx: AdviseContext = {
    model,
    options: fitOnly,
    gpus,
    baseline: base,
    blocks: blocksOf(model),
    decoder: model.kind === 'module' && model.meta?.kind === 'decoder' ? model.meta : undefined,
  };
  const skipped: { lever: string; reason: string }[] = [];
  const singles: { def: LeverDef; result: LeverResult }[] = [];
  for (const def of allLevers()) {
    const reason = def.skip(ctx);
    const outcome = reason === undefined ? attempt(ctx, [def]) : reason;
    if (typeof outcome === 'string') skipped.push({ lever: def.id, reason: outcome });
    else singles.push({ def, result: outcome });
  }
  const combined = maxCombination > 1 ? combinations(ctx, singles, maxCombination, base.needed, skipped) : [];
  const levers = rank([...singles.map((s) => s.result), ...combined]);
  return {
    baseline: {
      options: fitOnly,
      fits: base.fits,
      peak: base.allocated,
      reserved: base.reserved,
      needed: base.needed,
      headroom: base.headroom,
      capacity: base.capacity,
      usable: base.usable,
    },
    levers,
    best: levers.find((l) => l.fits),
    skipped,
  };
}

/** The job as given with these levers applied (fixed changes in order, a search last), or why it cannot be estimated. */
function attempt(ctx: AdviseContext, defs: readonly LeverDef[]): LeverResult | string {
  try {
    let job: Job = { model: ctx.model, options: ctx.options };
    const descriptions: string[] = [];
    let fitted: Fitted | undefined;
    for (const def of defs) {
      let change: Change;
      if (def.find !== undefined) {
        const found = def.find(ctx, job);
        if (typeof found === 'string') return found;
        ({ change, fitted } = found);
      } else change = def.change!(ctx, job);
      job = change.job;
      descriptions.push(change.description);
    }
    const done = fitted ?? fitJob(ctx, job);
    return {
      lever: defs.map((d) => d.id).join('+'),
      levers: defs.map((d) => d.id),
      description: descriptions.join('; '),
      model: done.job.model,
      options: done.job.options,
      fits: done.fits,
      peak: done.peak,
      reserved: done.reserved,
      needed: done.needed,
      headroom: done.headroom,
      cost: costOf(defs),
    };
  } catch (error) {
    // A lever the library refuses for this model (no LoRA target, a head of a parallel build): its reason.
    if (error instanceof VramError) return error.issues[0]?.message ?? error.message;
    throw error;
  }
}

const kindRank = (cost: LeverCost) => COST_ORDER.indexOf(cost.kind);

/** A combination's cost: its dearest kind, every note. */
function costOf(defs: readonly LeverDef[]): LeverCost {
  const dearest = defs.reduce((a, b) => (kindRank(b.cost) > kindRank(a.cost) ? b : a));
  return { kind: dearest.cost.kind, note: defs.map((d) => d.cost.note).join('; ') };
}

/**
 * The cheapest combinations of the single levers that help without fitting alone (the
 * COMBINE_FROM that save most): all sets of 2 .. `most` levers of different groups (one search at
 * most), in cost order (dearest kind, size, the kinds' sum, the savings), estimated until one
 * fits; the sets as dear as that one are finished, then the search stops.
 */
function combinations(
  ctx: AdviseContext,
  singles: readonly { def: LeverDef; result: LeverResult }[],
  most: number,
  baseline: number,
  skipped: { lever: string; reason: string }[],
): LeverResult[] {
  const helpful = singles
    .filter((s) => !s.result.fits && s.result.needed < baseline)
    .sort((a, b) => a.result.needed - b.result.needed)
    .slice(0, COMBINE_FROM);
  const saving = new Map(helpful.map((s) => [s.def, baseline - s.result.needed]));
  const sets = subsets(
    helpful.map((s) => s.def),
    most,
  ).filter((set) => new Set(set.map((d) => d.group)).size === set.length && set.filter((d) => d.find !== undefined).length <= 1);
  const key = (set: readonly LeverDef[]) => [Math.max(...set.map((d) => kindRank(d.cost))), set.length];
  const order = (set: readonly LeverDef[]) => [...key(set), set.reduce((s, d) => s + kindRank(d.cost), 0), -set.reduce((s, d) => s + saving.get(d)!, 0)];
  sets.sort((a, b) => compareLists(order(a), order(b)));
  const out: LeverResult[] = [];
  let stopAt: number[] | undefined;
  for (const set of sets.slice(0, MAX_COMBINATIONS)) {
    if (stopAt !== undefined && compareLists(key(set), stopAt) > 0) break;
    // A combination applies its levers in the catalogue's order.
    const defs = [...set].sort((a, b) => allLevers().indexOf(a) - allLevers().indexOf(b));
    const result = attempt(ctx, defs);
    if (typeof result === 'string') {
      skipped.push({ lever: defs.map((d) => d.id).join('+'), reason: result });
      continue;
    }
    out.push(result);
    if (result.fits && stopAt === undefined) stopAt = key(set);
  }
  return out;
}

/** Every subset of 2 .. most elements, in the list's order. */
function subsets<T>(items: readonly T[], most: number): T[][] {
  const out: T[][] = [];
  const grow = (start: number, picked: T[]) => {
    if (picked.length >= 2) out.push([...picked]);
    if (picked.length === most) return;
    for (let i = start; i < items.length; i += 1) grow(i + 1, [...picked, items[i]!]);
  };
  grow(0, []);
  return out;
}

function compareLists(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i += 1) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** Fitting first: by cost kind, then fewer levers, then less needed; the rest by what they need. */
function rank(results: readonly LeverResult[]): LeverResult[] {
  const order = (r: LeverResult) => (r.fits ? [0, kindRank(r.cost), r.levers.length, r.needed] : [1, r.needed, r.levers.length]);
  return [...results].sort((a, b) => compareLists(order(a), order(b)));
}
