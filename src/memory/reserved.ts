/**
 * What PyTorch's caching allocator reserves over a step: the step's allocation log (the ledger's
 * program, in the order the simulator allocates and frees) replayed through {@link replayAllocator}.
 *
 * The allocator keeps what it reserved (no `empty_cache`), so `max_memory_reserved` over a steady
 * step depends on the steps before it. The log replayed is therefore two steps in a row: the first
 * step (training: no gradients yet, the optimizer state made at the step; inference: a forward),
 * then the measured step (the steady step; inference: the forward again). Between them whatever
 * the second step does not start with is freed (an inference forward's output, the loss), and
 * the second step's starting blocks are the first step's (same block, or a gradient of the same
 * size). Zero-byte requests allocate nothing (PyTorch returns a null pointer).
 */

import { replayAllocator, type AllocatorOom } from './allocator.js';
import { type Category, MARK, type StepProgram } from './ledger.js';
import { programSizesAt, roundNumber } from './program.js';

/** The most entries a replayed log may have: the replay is O(n log n), and this bounds an estimate's cost to well under a second. */
export const REPLAY_LIMIT = 2_000_000;

/** What the replay of two steps found. */
export interface ReservedReplay {
  /** max_memory_reserved over the two steps. */
  readonly reserved: number;
  /** Reserved bytes at the second step's allocated peak (segments are never returned: what was reserved up to it). */
  readonly reservedAtPeak: number;
  /** The live (allocated) bytes at that peak: the estimate's peak. */
  readonly allocatedAtPeak: number;
  /** Entries of the replayed log. */
  readonly entries: number;
}

/** One step to replay: its program and the byte count of each of its blocks. */
export interface ReplayStep {
  readonly program: StepProgram;
  readonly size: (id: number) => number;
}

/** The log of `first` then `step` as replayAllocator reads it, and where the second step's allocated peak is. */
export function twoStepLog(first: ReplayStep, step: ReplayStep): { log: number[][]; peakAt: number; allocatedAtPeak: number } {
  const log: number[][] = [];
  // Copy 1 keeps its block ids; copy 2's own blocks are shifted past them.
  const live = new Map<number, { readonly bytes: number; readonly category: Category }>();
  for (const entry of first.program.log) {
    if (entry === MARK) continue;
    if (entry >= 0) {
      const bytes = first.size(entry);
      if (bytes <= 0) continue;
      log.push([entry, bytes]);
      live.set(entry, { bytes: roundNumber(bytes, first.program.rounded), category: first.program.categories[entry]! });
    } else if (live.delete(-1 - entry)) log.push([entry]);
  }
  const offset = first.program.sizes.length;
  const { program } = step;
  const rounded = (id: number) => roundNumber(step.size(id), program.rounded);
  // The second step's starting blocks: the allocations before its first event.
  let start = 0;
  while (start < program.log.length && program.log[start] !== MARK) start += 1;
  const mapped = new Map<number, number>();
  const fresh: number[] = [];
  for (let k = 0; k < start; k += 1) {
    const id = program.log[k]!;
    const had = live.get(id);
    if (id >= 0 && had !== undefined && had.bytes === rounded(id) && had.category === program.categories[id]) mapped.set(id, id);
  }
  // Blocks of copy 1 not taken yet, by category and size (last step's gradients: made in its backward).
  const pool = new Map<string, number[]>();
  const taken = new Set(mapped.values());
  for (const [id, block] of live) {
    if (taken.has(id)) continue;
    const key = `${block.category}:${block.bytes}`;
    const list = pool.get(key);
    if (list === undefined) pool.set(key, [id]);
    else list.push(id);
  }
  let allocated = 0;
  for (let k = 0; k < start; k += 1) {
    const id = program.log[k]!;
    if (id < 0 || mapped.has(id)) {
      if (id >= 0) allocated += rounded(id);
      continue;
    }
    const bytes = rounded(id);
    if (bytes <= 0) continue;
    const match = pool.get(`${program.categories[id]}:${bytes}`)?.shift();
    if (match !== undefined) {
      mapped.set(id, match);
      taken.add(match);
    } else fresh.push(id);
    allocated += bytes;
  }
  // What copy 1 leaves that the step does not start with is let go between the steps.
  for (const id of live.keys()) if (!taken.has(id)) log.push([-1 - id]);
  for (const id of fresh) log.push([id + offset, step.size(id)]);
  const own = new Set<number>(fresh);
  let best = -1;
  let peakAt = log.length;
  for (let k = start; k < program.log.length; k += 1) {
    const entry = program.log[k]!;
    if (entry === MARK) {
      if (allocated > best) {
        best = allocated;
        peakAt = log.length;
      }
      continue;
    }
    if (entry >= 0) {
      const bytes = step.size(entry);
      if (bytes <= 0) continue;
      log.push([entry + offset, bytes]);
      own.add(entry);
      allocated += roundNumber(bytes, program.rounded);
      continue;
    }
    const id = -1 - entry;
    const to = mapped.get(id);
    if (to !== undefined) {
      mapped.delete(id);
      log.push([-1 - to]);
      allocated -= rounded(id);
    } else if (own.delete(id)) {
      log.push([-1 - (id + offset)]);
      allocated -= rounded(id);
    }
  }
  return { log, peakAt, allocatedAtPeak: Math.max(0, best) };
}

/**
 * Replays two steps through the caching allocator: max reserved over them and reserved at the
 * second step's peak (two replays: the whole log, and the log up to the peak; `atPeak: false`
 * skips the second and reports the whole log's figure there). Undefined when the log is longer
 * than {@link REPLAY_LIMIT} entries.
 */
export function replayReserved(first: ReplayStep, step: ReplayStep, atPeak = true): ReservedReplay | undefined {
  const { log, peakAt, allocatedAtPeak } = twoStepLog(first, step);
  if (log.length > REPLAY_LIMIT) return undefined;
  const whole = replayAllocator(log);
  const upToPeak = !atPeak || peakAt === log.length ? whole : replayAllocator(log.slice(0, peakAt));
  return { reserved: whole.maxReserved, reservedAtPeak: upToPeak.maxReserved, allocatedAtPeak, entries: log.length };
}

/**
 * The first allocation of two steps the caching allocator cannot place within `capacity` bytes,
 * after it releases cached blocks and retries as PyTorch does before raising OutOfMemoryError;
 * undefined when all of them run (or the log passes {@link REPLAY_LIMIT}, where no replay is made).
 */
export function oomWithin(first: ReplayStep, step: ReplayStep, capacity: number, deviceTotal = capacity): AllocatorOom | undefined {
  const { log } = twoStepLog(first, step);
  if (log.length > REPLAY_LIMIT) return undefined;
  return replayAllocator(log, { capacity, deviceTotal: Math.max(capacity, deviceTotal) }).oom;
}

/** A step of concrete sizes to replay. */
export function concreteStep(program: StepProgram): ReplayStep {
  return { program, size: (id) => program.sizes[id] as number };
}

/** Byte counts of a program's blocks at symbol values (each distinct size compiled once; a negative one is none). */
function sizesAt(program: StepProgram): (env: Readonly<Record<string, number>>) => (id: number) => number {
  return programSizesAt(program, (bytes) => Math.max(0, bytes));
}

/**
 * max_memory_reserved of two steps (symbolic programs) at symbol values, as {@link replayReserved}
 * finds it; undefined where the log passes {@link REPLAY_LIMIT}. The sizes are compiled once.
 */
export function reservedAt(first: StepProgram, step: StepProgram): (env: Readonly<Record<string, number>>) => number | undefined {
  const firstSizes = sizesAt(first);
  const stepSizes = step.sizes === first.sizes ? firstSizes : sizesAt(step);
  return (env) => {
    const a = firstSizes(env);
    const b = stepSizes === firstSizes ? a : stepSizes(env);
    return replayReserved({ program: first, size: a }, { program: step, size: b }, false)?.reserved;
  };
}

/** {@link oomWithin} of two symbolic steps at symbol values (sizes compiled once). */
export function oomAt(
  first: StepProgram,
  step: StepProgram,
): (env: Readonly<Record<string, number>>, capacity: number, deviceTotal?: number) => AllocatorOom | undefined {
  const firstSizes = sizesAt(first);
  const stepSizes = step.sizes === first.sizes ? firstSizes : sizesAt(step);
  return (env, capacity, deviceTotal) => {
    const a = firstSizes(env);
    const b = stepSizes === firstSizes ? a : stepSizes(env);
    return oomWithin({ program: first, size: a }, { program: step, size: b }, capacity, deviceTotal);
  };
}
