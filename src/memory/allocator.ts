/**
 * A replay of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, default
 * settings, one stream) over a sequence of allocations and frees, to estimate
 * `max_memory_reserved`: sizes round up to 512 B; requests up to 1 MiB come from 2 MiB
 * segments (small pool); larger ones from 20 MiB segments below 10 MiB, else from a
 * segment of their size rounded to 2 MiB (large pool); the best-fitting free block is
 * reused and split when the rest is >= 512 B (small) or > 1 MiB (large); freed blocks merge
 * with free neighbours; segments are never returned (no empty_cache).
 */

import { fail } from '../errors.js';
import { show } from '../validate.js';

const MIN_BLOCK = 512;
const SMALL_SIZE = 1 << 20;
const SMALL_BUFFER = 2 << 20;
const LARGE_BUFFER = 20 << 20;
const MIN_LARGE_ALLOC = 10 << 20;
const ROUND_LARGE = 2 << 20;

interface Block {
  segment: number;
  offset: number;
  size: number;
  free: boolean;
  small: boolean;
}

/** What the replay found. */
export interface AllocatorReplay {
  /** Largest total of segments held (max_memory_reserved). */
  readonly maxReserved: number;
  /** Largest total of allocated blocks (max_memory_allocated). */
  readonly maxAllocated: number;
  readonly segments: number;
}

export function roundSize(size: number): number {
  return size < MIN_BLOCK ? MIN_BLOCK : Math.ceil(size / MIN_BLOCK) * MIN_BLOCK;
}

function segmentSize(size: number): number {
  if (size <= SMALL_SIZE) return SMALL_BUFFER;
  if (size < MIN_LARGE_ALLOC) return LARGE_BUFFER;
  return Math.ceil(size / ROUND_LARGE) * ROUND_LARGE;
}

/** The most entries a log may have: each allocation scans the blocks, so a replay is quadratic in the log. */
const MAX_LOG = 100_000;

/** Why an entry of a log is not one, or undefined when it is (`live`: the ids allocated and not freed yet). */
function entryProblem(entry: unknown, live: ReadonlySet<number>): string | undefined {
  if (!Array.isArray(entry)) return 'an entry is [id, bytes] (an allocation) or [-1 - id] (a free)';
  const id: unknown = entry[0];
  if (typeof id !== 'number' || !Number.isSafeInteger(id)) return 'an entry starts with an integer id (-1 - id for a free)';
  if (id < 0) return entry.length === 1 ? undefined : 'a free is [-1 - id], nothing more';
  if (entry.length !== 2) return 'an allocation is [id, bytes]';
  const bytes: unknown = entry[1];
  if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 0) return 'an allocation has an integer byte count >= 0';
  return live.has(id) ? `id ${id} is allocated and not freed yet` : undefined;
}

/** A VramError at the first entry that is not an allocation or a free (so the replay reads only numbers). */
function checkLog(log: unknown): asserts log is readonly (readonly number[])[] {
  if (!Array.isArray(log))
    fail('bad-argument', 'must be a list of [id, bytes] and [-1 - id] entries', { path: ['replayAllocator', 'log'], expected: 'array', received: show(log) });
  if (log.length > MAX_LOG)
    fail('bad-argument', `a log has at most ${MAX_LOG} entries`, { path: ['replayAllocator', 'log'], expected: `0 – ${MAX_LOG} entries`, received: show(log) });
  const live = new Set<number>();
  for (let i = 0; i < log.length; i += 1) {
    const entry: unknown = log[i];
    const problem = entryProblem(entry, live);
    if (problem !== undefined)
      fail('bad-argument', problem, { path: ['replayAllocator', 'log', i], expected: '[id >= 0, bytes >= 0] | [-1 - id]', received: show(entry) });
    const id = (entry as readonly number[])[0]!;
    if (id >= 0) live.add(id);
    else live.delete(-1 - id);
  }
}

/**
 * Replays `[id, bytes]` allocations and `[-1 - id]` frees (a free of an id not allocated is
 * ignored). A log that is not a list of such entries (integers, an id allocated again before its
 * free), or longer than 100,000 entries, is a VramError at the entry; reserved bytes past 2^53 are
 * an `overflow`.
 *
 * @example
 * ```ts
 * import { replayAllocator } from 'vram-ts';
 * const r = replayAllocator([[0, 100], [1, 3 << 20], [-1], [2, 200]]);
 * console.log(r.maxReserved / 2 ** 20, r.maxAllocated); // 22 3146240
 * ```
 */
export function replayAllocator(log: readonly (readonly number[])[]): AllocatorReplay {
  checkLog(log);
  const blocks: Block[] = [];
  const live = new Map<number, Block>();
  let reserved = 0;
  let allocated = 0;
  let maxReserved = 0;
  let maxAllocated = 0;
  let segments = 0;
  for (const entry of log) {
    const id = entry[0]!;
    if (id < 0) {
      const block = live.get(-1 - id);
      if (block === undefined) continue;
      live.delete(-1 - id);
      allocated -= block.size;
      block.free = true;
      mergeNeighbours(blocks, block);
      continue;
    }
    const size = roundSize(entry[1]!);
    const small = size <= SMALL_SIZE;
    let best: Block | undefined;
    for (const b of blocks) {
      if (b.free && b.small === small && b.size >= size && (best === undefined || b.size < best.size)) best = b;
    }
    if (best === undefined) {
      const bytes = segmentSize(size);
      best = { segment: segments, offset: 0, size: bytes, free: true, small };
      segments += 1;
      blocks.push(best);
      reserved += bytes;
      if (!Number.isSafeInteger(reserved)) fail('overflow', 'the reserved bytes pass 2^53', { path: ['replayAllocator', 'log'], received: String(reserved) });
      maxReserved = Math.max(maxReserved, reserved);
    }
    const rest = best.size - size;
    if (small ? rest >= MIN_BLOCK : rest > SMALL_SIZE) {
      blocks.push({ segment: best.segment, offset: best.offset + size, size: rest, free: true, small });
      best.size = size;
    }
    best.free = false;
    live.set(id, best);
    allocated += best.size;
    maxAllocated = Math.max(maxAllocated, allocated);
  }
  return { maxReserved, maxAllocated, segments };
}

function mergeNeighbours(blocks: Block[], block: Block): void {
  for (let changed = true; changed; ) {
    changed = false;
    for (let i = 0; i < blocks.length; i += 1) {
      const other = blocks[i]!;
      if (other === block || !other.free || other.segment !== block.segment) continue;
      if (other.offset + other.size === block.offset) {
        block.offset = other.offset;
        block.size += other.size;
      } else if (block.offset + block.size === other.offset) {
        block.size += other.size;
      } else continue;
      blocks.splice(i, 1);
      changed = true;
      break;
    }
  }
}
