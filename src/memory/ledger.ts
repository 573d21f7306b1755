import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { Dim } from '../sym/expr.js';
import { compile } from '../sym/evaluate.js';
import { add, ceilDiv, maxAtom, mul, sub, sum } from '../sym/ops.js';
import { bounds } from '../sym/bounds.js';

/** What a live block of memory is for. */
export type Category =
  | 'parameters'
  | 'buffers'
  | 'gradients'
  | 'optimizer'
  | 'input'
  | 'activations'
  | 'activationGrads'
  | 'temporaries';

/** Every category, in report order. */
export const CATEGORIES: readonly Category[] = deepFreeze(['parameters', 'buffers', 'gradients', 'optimizer', 'input', 'activations', 'activationGrads', 'temporaries']);

/** Phases of a training step (inference has only `forward`). */
export type Phase = 'start' | 'zero_grad' | 'forward' | 'loss' | 'backward' | 'step' | 'end';

/** One point of the timeline: what is live right after `label` happened. */
export interface TimelineEvent {
  readonly phase: Phase;
  readonly label: string;
  readonly live: Dim;
  readonly byCategory: Readonly<Record<Category, Dim>>;
}

/** The largest live total of a step and when it happened (for symbolic sizes: every candidate). */
export interface PeakPoint {
  readonly bytes: Dim;
  readonly phase: Phase;
  readonly label: string;
  /** Index of the event in the step. */
  readonly event: number;
  readonly byCategory: Readonly<Record<Category, Dim>>;
}

/** CUDA's caching allocator hands out blocks in multiples of 512 B. */
export const CUDA_BLOCK = 512;

/** Bytes a request occupies as the allocator counts it (`max_memory_allocated`). */
export function blockBytes(bytes: Dim, rounded: boolean): Dim {
  if (!rounded) return bytes;
  if (typeof bytes === 'number') return bytes <= 0 ? 0 : Math.ceil(bytes / CUDA_BLOCK) * CUDA_BLOCK;
  return mul(ceilDiv(bytes, CUDA_BLOCK), CUDA_BLOCK);
}

function roundNumber(bytes: number, rounded: boolean): number {
  return !rounded || bytes <= 0 ? Math.max(0, bytes) : Math.ceil(bytes / CUDA_BLOCK) * CUDA_BLOCK;
}

/** Log entries: an allocation (block id >= 0), a free (-1 - id), or an event mark. */
export const MARK = Number.MIN_SAFE_INTEGER;

/** The recorded step, replayable at any symbol values. */
export interface StepProgram {
  /** Requested (unrounded) bytes of every block. */
  readonly sizes: readonly Dim[];
  readonly categories: readonly Category[];
  /** Allocation ids, free markers (-1 - id) and MARK for events, in order. */
  readonly log: readonly number[];
  readonly events: readonly { readonly phase: Phase; readonly label: string }[];
  readonly rounded: boolean;
}

/**
 * A live-memory ledger: blocks with a category and a reference count, and a log of
 * allocations, frees and events. With concrete sizes it keeps running totals, the
 * timeline and the peak as it goes; with symbolic sizes the log is the result and
 * {@link programPeak} / {@link programTimeline} read it afterwards.
 */
export interface Ledger {
  readonly alloc: (bytes: Dim, category: Category, refs?: number) => number;
  readonly retain: (block: number) => void;
  /** Drops one reference; frees the block at zero. */
  readonly release: (block: number) => void;
  readonly refs: (block: number) => number;
  readonly record: (phase: Phase, label: string) => void;
  readonly live: () => Dim;
  readonly program: () => StepProgram;
  /** Concrete sizes only: the events so far (empty unless kept). */
  readonly timeline: TimelineEvent[];
  /** Concrete sizes only: the highest event so far. */
  readonly peak: () => PeakPoint | null;
}

export function zeroTotals(): Record<Category, number> {
  return { parameters: 0, buffers: 0, gradients: 0, optimizer: 0, input: 0, activations: 0, activationGrads: 0, temporaries: 0 };
}

function overflow(what: string): never {
  return fail('overflow', `${what} is not an exact integer (past 2^53 bytes)`, { expected: 'at most 2^53 - 1 bytes' });
}

/** A new, empty ledger; `rounded` counts every allocation in CUDA's 512-byte blocks. */
export function createLedger(rounded: boolean, keepTimeline = true): Ledger {
  const sizes: Dim[] = [];
  const categories: Category[] = [];
  const counts: number[] = [];
  const log: number[] = [];
  const events: { phase: Phase; label: string }[] = [];
  const timeline: TimelineEvent[] = [];
  let concrete = true;
  const totals = zeroTotals();
  let live = 0;
  let best: PeakPoint | null = null;

  return {
    alloc(bytes, category, refs = 1) {
      const id = sizes.length;
      sizes.push(bytes);
      categories.push(category);
      counts.push(refs);
      log.push(id);
      if (typeof bytes === 'number') {
        const size = roundNumber(bytes, rounded);
        totals[category] += size;
        live += size;
        // The running total must stay an exact integer: past 2^53 it would round silently.
        if (live > Number.MAX_SAFE_INTEGER) overflow('the live total of the step');
      } else {
        concrete = false;
      }
      return id;
    },
    retain(block) {
      counts[block]! += 1;
    },
    release(block) {
      counts[block]! -= 1;
      if (counts[block] !== 0) return;
      log.push(-1 - block);
      const bytes = sizes[block]!;
      if (typeof bytes === 'number') {
        const size = roundNumber(bytes, rounded);
        totals[categories[block]!] -= size;
        live -= size;
      }
    },
    refs: (block) => counts[block]!,
    record(phase, label) {
      const event = events.length;
      events.push({ phase, label });
      log.push(MARK);
      if (!concrete) return;
      if (keepTimeline) timeline.push({ phase, label, live, byCategory: { ...totals } });
      if (best === null || live > (best.bytes as number)) best = { bytes: live, phase, label, event, byCategory: { ...totals } };
    },
    live: () => (concrete ? live : liveOf({ sizes, categories, log, events, rounded })),
    program: () => ({ sizes, categories, log, events, rounded }),
    timeline,
    peak: () => (concrete ? best : null),
  };
}

/** Live bytes at the end of a program (symbolic). */
function liveOf(program: StepProgram): Dim {
  const alive = new Set<number>();
  for (const entry of program.log) {
    if (entry === MARK) continue;
    if (entry >= 0) alive.add(entry);
    else alive.delete(-1 - entry);
  }
  return sum([...alive].map((id) => blockBytes(program.sizes[id]!, program.rounded)));
}

/**
 * A fast evaluator of a program's peak at concrete symbol values: every distinct size
 * is evaluated once, then the log is swept. Exact: equals the peak of the concrete run.
 */
export function programPeakAt(program: StepProgram): (env: Readonly<Record<string, number>>) => number {
  const keys = new Map<string, number>();
  const evaluators: ((env: Readonly<Record<string, number>>) => number)[] = [];
  const slot = program.sizes.map((size) => {
    const key = typeof size === 'number' ? `#${size}` : size.key;
    let index = keys.get(key);
    if (index === undefined) {
      index = evaluators.length;
      keys.set(key, index);
      evaluators.push(typeof size === 'number' ? () => size : compile(size));
    }
    return index;
  });
  return (env) => {
    const values = evaluators.map((f) => f(env));
    let live = 0;
    let peak = 0;
    for (const entry of program.log) {
      if (entry === MARK) {
        if (live > peak) peak = live;
        if (live > Number.MAX_SAFE_INTEGER) overflow('the live total of the step');
      } else if (entry >= 0) live += roundNumber(values[slot[entry]!]!, program.rounded);
      else live -= roundNumber(values[slot[-1 - entry]!]!, program.rounded);
    }
    return peak;
  };
}

interface Candidate {
  readonly event: number;
  readonly alive: readonly number[];
  /** Σ requested sizes of the live blocks (a lower bound of the rounded total). */
  readonly lo: Dim;
}

/**
 * The peak of a symbolic program as an expression: events whose live set another event's
 * contains are dropped, then those another always exceeds (bounds with every block's
 * rounding between its size and its size + 511 B), and the max of the rest is built.
 */
export function programPeak(program: StepProgram): { bytes: Dim; candidates: PeakPoint[] } {
  const alive = new Set<number>();
  const candidates: Candidate[] = [];
  let pending: Candidate | null = null;
  let freedSincePending = false;
  let liveLower: Dim = 0;
  let event = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      // Marks with only allocations between them: the later one contains the earlier one.
      if (pending !== null && freedSincePending) candidates.push(pending);
      pending = { event, alive: [...alive], lo: liveLower };
      freedSincePending = false;
      event += 1;
    } else if (entry >= 0) {
      alive.add(entry);
      liveLower = add(liveLower, program.sizes[entry]!);
    } else {
      freedSincePending = true;
      alive.delete(-1 - entry);
      liveLower = sub(liveLower, program.sizes[-1 - entry]!);
    }
  }
  if (pending !== null) candidates.push(pending);
  const slack = program.rounded ? CUDA_BLOCK - 1 : 0;
  // Exact dominance needs interval bounds of a difference, which is slow on big models; a
  // pair is only tried when the numbers agree at a few sample points first.
  const samples = samplePoints(candidates.map((c) => c.lo));
  const valuesOf = (d: Dim) => screeningValues(d, samples);
  let kept: { c: Candidate; hi: Dim; loAt: number[]; hiAt: number[] }[] = [];
  for (const c of candidates) {
    const hi = add(c.lo, slack * c.alive.length);
    const loAt = valuesOf(c.lo);
    const hiAt = loAt.map((v) => v + slack * c.alive.length);
    const dominates = (a: { loAt: number[] }, bHi: number[]) => a.loAt.every((v, i) => v >= bHi[i]!);
    if (kept.some((k) => dominates(k, hiAt) && bounds(sub(k.c.lo, hi)).min >= 0)) continue;
    kept = kept.filter((k) => !(dominates({ loAt }, k.hiAt) && bounds(sub(c.lo, k.hi)).min >= 0));
    kept.push({ c, hi, loAt, hiAt });
  }
  const points: PeakPoint[] = kept.map(({ c }) => {
    const byCategory: Record<Category, Dim> = zeroTotals();
    for (const id of c.alive) byCategory[program.categories[id]!] = add(byCategory[program.categories[id]!], blockBytes(program.sizes[id]!, program.rounded));
    const info = program.events[c.event]!;
    return { bytes: sum(Object.values(byCategory)), phase: info.phase, label: info.label, event: c.event, byCategory };
  });
  return { bytes: points.length === 1 ? points[0]!.bytes : maxAtom(points.map((p) => p.bytes)), candidates: points };
}

/**
 * Values of an expression at sample points, to screen pairs before exact bounds decide. A
 * value past 2^53 is NaN: every comparison with it is false, so it screens nothing out.
 */
function screeningValues(d: Dim, samples: readonly Readonly<Record<string, number>>[]): number[] {
  const f = compile(d);
  return samples.map((env) => {
    try {
      return f(env);
    } catch {
      return Number.NaN;
    }
  });
}

/** Symbol values to compare expressions at: each symbol at its smallest, a middle and a large value. */
function samplePoints(exprs: readonly Dim[]): Record<string, number>[] {
  const symbols = new Map<string, { min: number; max: number | undefined; step: number }>();
  const visit = (d: Dim) => {
    if (typeof d === 'number') return;
    for (const t of d.terms) for (const f of t.factors) {
      if (f.atom.kind === 'sym') symbols.set(f.atom.name, { min: f.atom.min, max: f.atom.max, step: f.atom.multipleOf ?? 1 });
      else if (f.atom.kind === 'floorDiv') visit(f.atom.num);
      else f.atom.args.forEach(visit);
    }
  };
  exprs.forEach(visit);
  const fit = (s: { min: number; max: number | undefined; step: number }, v: number) => {
    const up = Math.ceil(Math.max(v, s.min) / s.step) * s.step;
    return s.max !== undefined && up > s.max ? Math.floor(s.max / s.step) * s.step : up;
  };
  const levels = (s: { min: number; max: number | undefined; step: number }) => [fit(s, s.min), fit(s, s.min + 63), fit(s, s.min + 4095)];
  let points: Record<string, number>[] = [{}];
  for (const [name, s] of symbols) points = points.flatMap((p) => levels(s).map((v) => ({ ...p, [name]: v })));
  return points.slice(0, 27);
}

/** The timeline of a symbolic program, every event's totals as expressions (slow for big models). */
export function programTimeline(program: StepProgram): TimelineEvent[] {
  const totals: Record<Category, Dim> = zeroTotals();
  let live: Dim = 0;
  const out: TimelineEvent[] = [];
  let event = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      const info = program.events[event]!;
      out.push({ phase: info.phase, label: info.label, live, byCategory: { ...totals } });
      event += 1;
      continue;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    const size = blockBytes(program.sizes[id]!, program.rounded);
    const category = program.categories[id]!;
    totals[category] = entry >= 0 ? add(totals[category], size) : sub(totals[category], size);
    live = entry >= 0 ? add(live, size) : sub(live, size);
  }
  return out;
}

/**
 * The max of expressions, keeping only those no other one always exceeds: numbers at sample
 * points screen the pairs, interval bounds of the difference decide.
 */
export function prunedMax(dims: readonly Dim[]): Dim {
  const flat: Dim[] = [];
  for (const d of dims) {
    const only = typeof d !== 'number' && d.terms.length === 1 && d.terms[0]!.coef === 1 && d.terms[0]!.factors.length === 1 && d.terms[0]!.factors[0]!.power === 1 ? d.terms[0]!.factors[0]!.atom : undefined;
    if (only?.kind === 'max') flat.push(...only.args);
    else flat.push(d);
  }
  const samples = samplePoints(flat);
  const rows = flat.map((d) => ({ d, at: screeningValues(d, samples) }));
  let kept: typeof rows = [];
  for (const row of rows) {
    const below = (a: typeof row, b: typeof row) => a.at.every((v, i) => v <= b.at[i]!) && bounds(sub(b.d, a.d)).min >= 0;
    if (kept.some((k) => below(row, k))) continue;
    kept = kept.filter((k) => !below(k, row));
    kept.push(row);
  }
  return maxAtom(kept.map((k) => k.d));
}

/** Replays a concrete program: its peak event, what was live then, and the live totals at the first and last events. */
export function sweepConcrete(program: StepProgram): { peak: PeakPoint; first: number; last: number } {
  // Pass 1 finds the peak event on the running total alone; pass 2 splits that one event
  // by category (copying the totals at every new maximum cost more than replaying).
  let live = 0;
  let bestLive = -1;
  let bestEvent = 0;
  let first: number | null = null;
  let event = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      if (first === null) first = live;
      if (live > bestLive) {
        bestLive = live;
        bestEvent = event;
      }
      event += 1;
      continue;
    }
    const size = roundNumber(program.sizes[entry >= 0 ? entry : -1 - entry] as number, program.rounded);
    live += entry >= 0 ? size : -size;
  }
  const totals = zeroTotals();
  event = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      if (event === bestEvent) break;
      event += 1;
      continue;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    const size = roundNumber(program.sizes[id] as number, program.rounded);
    totals[program.categories[id]!] += entry >= 0 ? size : -size;
  }
  const info = program.events[bestEvent]!;
  return { peak: { bytes: Math.max(0, bestLive), phase: info.phase, label: info.label, event: bestEvent, byCategory: totals }, first: first ?? 0, last: live };
}

/** Live bytes at one event of a program (-1: after the last entry). */
export function liveAtEvent(program: StepProgram, target: number): Dim {
  const alive = new Set<number>();
  let event = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      if (event === target) break;
      event += 1;
    } else if (entry >= 0) alive.add(entry);
    else alive.delete(-1 - entry);
  }
  return sum([...alive].map((id) => blockBytes(program.sizes[id]!, program.rounded)));
}
