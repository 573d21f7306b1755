import { deepFreeze } from '../freeze.js';
import type { Dim } from '../sym/expr.js';
import { ceilDiv, mul } from '../sym/ops.js';

/** What a live block of memory is for. */
export type Category =
  | 'parameters'
  | 'buffers'
  | 'gradients'
  | 'optimizer'
  | 'input'
  | 'activations'
  | 'activationGrads'
  | 'temporaries'
  /** Buffers of distributed engines: DDP buckets, ZeRO gradient buckets, FSDP all-gather and reduce-scatter buffers. */
  | 'communication';

/** Every category, in report order. */
export const CATEGORIES: readonly Category[] = deepFreeze([
  'parameters',
  'buffers',
  'gradients',
  'optimizer',
  'input',
  'activations',
  'activationGrads',
  'temporaries',
  'communication',
]);

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
  /** When the log stands for several ranks at once ({@link Ledger.forRanks}): their own sizes and events. */
  readonly ranks?: RankFamily;
}

/**
 * A log recorded once for every rank of a group whose steps differ only in some blocks' sizes
 * and in some events (ZeRO-1/2's gradient partitions): rank r's own log is this one with each
 * block of `sizes` at its r-th size (0: the rank has none) and only the events of `events`
 * that list r (an event not there is every rank's). `program.sizes` holds rank 0's.
 */
export interface RankFamily {
  readonly count: number;
  readonly sizes: ReadonlyMap<number, readonly number[]>;
  /** By event index: the ranks that record it. */
  readonly events: ReadonlyMap<number, readonly number[]>;
  /** Set when a rank's step parted from the others' in a way the family cannot hold: the log is then no rank's. */
  readonly broken?: string;
}

/**
 * A live-memory ledger: blocks with a category and a reference count, and a log of
 * allocations, frees and events. The log is the result: the sweeps of program.ts (numbers) and
 * peak.ts (expressions) read it afterwards.
 */
export interface Ledger {
  /** A new block; `owner` is the repeated-model block it belongs to (default: the current one). */
  readonly alloc: (bytes: Dim, category: Category, refs?: number, owner?: number) => number;
  readonly retain: (block: number) => void;
  /** Drops one reference; frees the block at zero. */
  readonly release: (block: number) => void;
  readonly refs: (block: number) => number;
  readonly record: (phase: Phase, label: string) => void;
  /**
   * The traced block (of a model whose identical blocks repeat) that what follows happens in,
   * or -1 outside the blocks: log entries take it, and blocks allocated now belong to it.
   */
  readonly setUnit: (unit: number) => void;
  readonly program: () => StepProgram;
  /** From now on the log stands for `count` ranks at once: `allocEach` and `recordFor` may be used. */
  readonly forRanks: (count: number) => void;
  /** A block of one size per rank of the family (0 where a rank has none). */
  readonly allocEach: (sizes: readonly number[], category: Category) => number;
  /** An event only the listed ranks of the family record. */
  readonly recordFor: (ranks: readonly number[], phase: Phase, label: string) => void;
  /** The log cannot stand for every rank after all (then it is no rank's own): why. */
  readonly breakRanks: (why: string) => void;
  /** Per log entry: the repeated-model block it counts for (see setUnit). */
  readonly units: () => readonly number[];
}

export function zeroTotals(): Record<Category, number> {
  return { parameters: 0, buffers: 0, gradients: 0, optimizer: 0, input: 0, activations: 0, activationGrads: 0, temporaries: 0, communication: 0 };
}

/** A new, empty ledger; `rounded` counts every allocation in CUDA's 512-byte blocks. */
export function createLedger(rounded: boolean): Ledger {
  const sizes: Dim[] = [];
  const categories: Category[] = [];
  const counts: number[] = [];
  const log: number[] = [];
  const events: { phase: Phase; label: string }[] = [];
  // Blocks of a model traced with its repeated blocks reduced: kept once setUnit is called.
  let unit = -1;
  let owners: number[] | null = null;
  let contexts: number[] | null = null;
  let family: { count: number; sizes: Map<number, readonly number[]>; events: Map<number, readonly number[]>; broken?: string } | null = null;
  const inFamily = (what: string) => {
    if (family === null) throw new Error(`ledger.${what} before forRanks (a bug)`);
    return family;
  };
  const ledger: Ledger = {
    alloc(bytes, category, refs = 1, owner = unit) {
      const id = sizes.length;
      sizes.push(bytes);
      categories.push(category);
      counts.push(refs);
      log.push(id);
      if (owners !== null) {
        owners.push(owner);
        contexts!.push(unit);
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
      contexts?.push(unit);
    },
    refs: (block) => counts[block]!,
    record(phase, label) {
      events.push({ phase, label });
      log.push(MARK);
      contexts?.push(unit);
    },
    setUnit(next) {
      if (owners === null) {
        owners = sizes.map(() => -1);
        contexts = log.map(() => -1);
      }
      unit = next;
    },
    program: () => ({ sizes, categories, log, events, rounded, ...(family !== null ? { ranks: family } : {}) }),
    units: () => (owners === null ? log.map(() => -1) : unitTags(log, owners, contexts!)),
    forRanks(count) {
      family = { count, sizes: new Map(), events: new Map() };
    },
    allocEach(each, category) {
      const { count, sizes: bySize } = inFamily('allocEach');
      if (each.length !== count) throw new Error(`ledger.allocEach: ${each.length} sizes for ${count} ranks (a bug)`);
      const id = ledger.alloc(each[0]!, category);
      bySize.set(id, each);
      return id;
    },
    breakRanks(why) {
      inFamily('breakRanks').broken ??= why;
    },
    recordFor(ranks, phase, label) {
      inFamily('recordFor').events.set(events.length, ranks);
      ledger.record(phase, label);
    },
  };
  return ledger;
}

/**
 * A family ledger ({@link Ledger.forRanks}) seen as one rank's own: what is allocated through it
 * has its size on `rank` alone (0 on the others), what is recorded is that rank's event; frees
 * and the rest are the ledger's. An engine runs one rank's part of the step through it.
 */
export function ledgerOfRank(ledger: Ledger, rank: number, count: number): Ledger {
  return {
    ...ledger,
    alloc(bytes, category, refs = 1) {
      if (typeof bytes !== 'number' || refs !== 1) throw new Error('ledgerOfRank: concrete blocks of one reference only (a bug)');
      return ledger.allocEach(
        Array.from({ length: count }, (_, r) => (r === rank ? bytes : 0)),
        category,
      );
    },
    record: (phase, label) => ledger.recordFor([rank], phase, label),
  };
}

/** The block each log entry counts for: the one it happened in, or outside the blocks its memory block's owner. */
function unitTags(log: readonly number[], owners: readonly number[], contexts: readonly number[]): number[] {
  return log.map((entry, k) => {
    const context = contexts[k]!;
    if (context >= 0 || entry === MARK) return context;
    return owners[entry >= 0 ? entry : -1 - entry]!;
  });
}
