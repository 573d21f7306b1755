import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { compile } from '../sym/evaluate.js';
import { add, sub } from '../sym/ops.js';
import { CATEGORIES, CUDA_BLOCK, MARK, blockBytes, zeroTotals, type Category, type PeakPoint, type StepProgram, type TimelineEvent } from './ledger.js';

/**
 * A program recorded on a model whose identical blocks were traced as three (the first, one
 * standing for every interior block, the last): `units` tags every log entry with the block it
 * happened in (-1 outside the blocks), and each maximal run of entries tagged 1 happens `times`
 * times in a row in the full model. Exact when the interior blocks are identical, which a model
 * declares with `ModuleLayer.repeated` and estimate checks on the trace.
 */
export interface Repetition {
  readonly units: readonly number[];
  readonly times: number;
  /** An event label of block `unit` as the full model spells it (`copy`: which copy of its run, in the order they run). */
  readonly relabel: (label: string, unit: number, copy: number, phase: string) => string;
}

/** A span of the log written once for `times` copies (simulate.ts's RepeatedSpan, what {@link spanRepetition} reads). */
export interface LogSpan {
  readonly check: number;
  readonly from: number;
  readonly to: number;
  readonly times: number;
  readonly perCopy: readonly number[];
  readonly relabel: (label: string, copy: number) => string;
}

const sizeKey = (size: Dim) => (typeof size === 'number' ? `#${size}` : size.key);

/** Whether log entries a and b are the same step: both events (b's label a's one copy on), or blocks of one size and category freed or made. */
function sameEntry(program: StepProgram, a: number, b: number, events: [number, number], relabel: LogSpan['relabel']): boolean {
  const { log, sizes, categories } = program;
  const x = log[a]!;
  const y = log[b]!;
  if (x === MARK || y === MARK) {
    if (x !== y) return false;
    const [p, q] = [program.events[events[0]]!, program.events[events[1]]!];
    return p.phase === q.phase && relabel(p.label, 1) === q.label;
  }
  if (x >= 0 !== y >= 0) return false;
  const [i, j] = x >= 0 ? [x, y] : [-1 - x, -1 - y];
  return categories[i] === categories[j] && sizeKey(sizes[i]!) === sizeKey(sizes[j]!);
}

/**
 * The repetition of a program whose span `[from, to)` stands for `times` copies, or undefined when
 * its twin `[check, from)` (the copy before) does not log the same, entry by entry, or a per-copy
 * free is not one of a block the span made. The span's entries and the per-copy frees are unit 1.
 */
export function spanRepetition(program: StepProgram, span: LogSpan): Repetition | undefined {
  const { log } = program;
  const { check, from, to } = span;
  if (!(check < from && from < to && from - check === to - from && to <= log.length && span.times >= 1)) return undefined;
  let event = 0;
  for (let k = 0; k < check; k += 1) if (log[k] === MARK) event += 1;
  const twin = event;
  for (let k = check; k < from; k += 1) if (log[k] === MARK) event += 1;
  const events: [number, number] = [twin, event];
  for (let k = 0; k < from - check; k += 1) {
    if (!sameEntry(program, check + k, from + k, events, span.relabel)) return undefined;
    if (log[from + k] === MARK) {
      events[0] += 1;
      events[1] += 1;
    }
  }
  const units = new Array<number>(log.length).fill(-1);
  const made = new Set<number>();
  for (let k = from; k < to; k += 1) {
    units[k] = 1;
    if (log[k]! >= 0) made.add(log[k]!);
  }
  for (const k of span.perCopy) {
    const entry = log[k] ?? MARK;
    if (k <= to || entry === MARK || entry >= 0 || !made.has(-1 - entry)) return undefined;
    units[k] = 1;
  }
  return { units, times: span.times, relabel: (label, unit, copy) => (unit === 1 ? span.relabel(label, copy) : label) };
}

/** A value made on first call, then kept. */
export function once<T>(make: () => T): () => T {
  let done = false;
  let value: T;
  return () => {
    if (!done) {
      value = make();
      done = true;
    }
    return value;
  };
}

/** The same point with other bytes; its totals by category stay computed when read. */
export function withBytes(point: PeakPoint, bytes: Dim): PeakPoint {
  const copy = { bytes, phase: point.phase, label: point.label, event: point.event } as PeakPoint;
  return Object.defineProperty(copy, 'byCategory', { enumerable: true, get: () => point.byCategory });
}

export function roundNumber(bytes: number, rounded: boolean): number {
  return !rounded || bytes <= 0 ? Math.max(0, bytes) : Math.ceil(bytes / CUDA_BLOCK) * CUDA_BLOCK;
}

function overflow(what: string): never {
  return fail('overflow', `${what} is not an exact integer (past 2^53 bytes)`, { expected: 'at most 2^53 - 1 bytes' });
}

/** Whether log entry `k` belongs to a repeated run. */
function inRun(repeat: Repetition | undefined, k: number): boolean {
  return repeat !== undefined && repeat.times !== 1 && repeat.units[k] === 1;
}

/**
 * The peak of a program at numbers: block sizes in `values` (by block id), live total swept over
 * the log. A repeated run contributes its copy 0 or its last copy, whichever is higher (the live
 * total at a run's event grows by the run's net bytes from copy to copy: an affine function of
 * the copy, highest at an end), and then its net bytes `times` over.
 */
function sweep(
  program: StepProgram,
  repeat: Repetition | undefined,
  size: (id: number) => number,
): { peak: number; event: number; copy: number; full: number; first: number; last: number } {
  const { log } = program;
  const n = repeat?.times ?? 1;
  let live = 0;
  let first: number | null = null;
  let best = -1;
  let bestEvent = 0;
  let bestCopy = 0;
  let bestFull = 0;
  let event = 0;
  let full = 0;
  let running = false;
  let runStart = 0;
  let runFull = 0;
  let runEvents = 0;
  let localBest = -Infinity;
  let localEvent = -1;
  let localIndex = 0;
  const closeRun = () => {
    running = false;
    const delta = live - runStart;
    if (localEvent >= 0) {
      const copy = delta > 0 ? n - 1 : 0;
      const value = runStart + localBest + copy * delta;
      if (value > Number.MAX_SAFE_INTEGER) overflow('the live total of the step');
      if (value > best) {
        best = value;
        bestEvent = localEvent;
        bestCopy = copy;
        bestFull = runFull + copy * runEvents + localIndex;
      }
    }
    live = runStart + n * delta;
    full = runFull + n * runEvents;
  };
  for (let k = 0; k < log.length; k += 1) {
    const entry = log[k]!;
    const repeated = inRun(repeat, k);
    if (repeated && !running) {
      running = true;
      runStart = live;
      runFull = full;
      runEvents = 0;
      localBest = -Infinity;
      localEvent = -1;
    } else if (!repeated && running) closeRun();
    if (entry === MARK) {
      if (live > Number.MAX_SAFE_INTEGER) overflow('the live total of the step');
      first ??= live;
      if (running) {
        if (live - runStart > localBest) {
          localBest = live - runStart;
          localEvent = event;
          localIndex = runEvents;
        }
        runEvents += 1;
      } else {
        if (live > best) {
          best = live;
          bestEvent = event;
          bestCopy = 0;
          bestFull = full;
        }
        full += 1;
      }
      event += 1;
      continue;
    }
    live += entry >= 0 ? size(entry) : -size(-1 - entry);
  }
  if (running) closeRun();
  return { peak: Math.max(0, best), event: bestEvent, copy: bestCopy, full: bestFull, first: first ?? 0, last: live };
}

/** Totals by category at one event of the program (reduced index `target`, in copy `copy` when it is in a run). */
function totalsAt(program: StepProgram, repeat: Repetition | undefined, size: (id: number) => number, target: number, copy: number): Record<Category, number> {
  const n = repeat?.times ?? 1;
  const totals = zeroTotals();
  let start: Record<Category, number> | null = null;
  let found: Record<Category, number> | null = null;
  let event = 0;
  const { log } = program;
  for (let k = 0; k < log.length; k += 1) {
    const entry = log[k]!;
    const repeated = inRun(repeat, k);
    if (repeated && start === null) start = { ...totals };
    else if (!repeated && start !== null) {
      // The run is over: its net bytes by category, `times` over (or up to the copy asked for).
      for (const c of CATEGORIES) {
        const delta = totals[c] - start[c];
        if (found !== null) found[c] += copy * delta;
        totals[c] = start[c] + n * delta;
      }
      start = null;
      if (found !== null) return found;
    }
    if (entry === MARK) {
      if (event === target) {
        if (start === null) return totals;
        found = { ...totals };
      }
      event += 1;
      continue;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    totals[program.categories[id]!] += entry >= 0 ? size(id) : -size(id);
  }
  if (found !== null && start !== null) for (const c of CATEGORIES) found[c] += copy * (totals[c] - start[c]);
  return found ?? totals;
}

/** The label of an event as the full model spells it. */
export function fullLabel(program: StepProgram, repeat: Repetition | undefined, event: number, copy: number): string {
  const { label, phase } = program.events[event]!;
  if (repeat === undefined) return label;
  const unit = unitOfEvent(program, repeat, event);
  return unit < 0 ? label : repeat.relabel(label, unit, copy, phase);
}

/** The block each event happened in: the last repetition's, kept (one at a time). */
let eventUnits: { readonly of: readonly number[]; readonly units: Int8Array } | null = null;

function unitOfEvent(program: StepProgram, repeat: Repetition, target: number): number {
  if (eventUnits?.of !== repeat.units) {
    const units = new Int8Array(program.events.length).fill(-1);
    let event = 0;
    program.log.forEach((entry, k) => {
      if (entry === MARK) units[event++] = repeat.units[k]!;
    });
    eventUnits = { of: repeat.units, units };
  }
  return eventUnits.units[target] ?? -1;
}

/**
 * Replays a concrete program: its peak event, what was live then, and the live totals at the
 * first and last events. Ties go to the earliest event, as a running maximum finds them.
 */
export function sweepConcrete(program: StepProgram, repeat?: Repetition): { peak: PeakPoint; first: number; last: number } {
  const rounded = new Float64Array(program.sizes.length);
  for (let i = 0; i < rounded.length; i += 1) rounded[i] = roundNumber(program.sizes[i] as number, program.rounded);
  const size = (id: number) => rounded[id]!;
  const result = sweep(program, repeat, size);
  const info = program.events[result.event]!;
  return {
    peak: {
      bytes: result.peak,
      phase: info.phase,
      label: fullLabel(program, repeat, result.event, result.copy),
      event: result.full,
      byCategory: totalsAt(program, repeat, size, result.event, result.copy),
    },
    first: result.first,
    last: result.last,
  };
}

/**
 * A fast evaluator of a program's peak at concrete symbol values: every distinct size
 * is evaluated once, then the log is swept. Exact: equals the peak of the concrete run.
 */
export function programPeakAt(program: StepProgram, repeat?: Repetition): (env: Readonly<Record<string, number>>) => number {
  const sizes = programSizesAt(program, (bytes) => roundNumber(bytes, program.rounded));
  return (env) => sweep(program, repeat, sizes(env)).peak;
}

/**
 * A program's block sizes at symbol values: each distinct size compiled once, then at each env
 * evaluated once (through `value`) and looked up by block id.
 */
export function programSizesAt(program: StepProgram, value: (bytes: number) => number): (env: Readonly<Record<string, number>>) => (id: number) => number {
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
    const values = evaluators.map((f) => value(f(env)));
    return (id) => values[slot[id]!]!;
  };
}

/** The events of a concrete program with their totals (what a ledger that kept its timeline recorded). */
export function concreteTimeline(program: StepProgram): TimelineEvent[] {
  const totals = zeroTotals();
  let live = 0;
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
    const size = roundNumber(program.sizes[id] as number, program.rounded);
    totals[program.categories[id]!] += entry >= 0 ? size : -size;
    live += entry >= 0 ? size : -size;
  }
  return out;
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
