/**
 * A replay of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, default
 * settings, one stream) over a sequence of allocations and frees, to estimate
 * `max_memory_reserved`: sizes round up to 512 B; requests up to 1 MiB come from 2 MiB
 * segments (small pool); larger ones from 20 MiB segments below 10 MiB, else from a
 * segment of their size rounded to 2 MiB (large pool); the best-fitting free block is
 * reused and split when the rest is >= 512 B (small) or > 1 MiB (large); freed blocks merge
 * with free neighbours; segments are never returned (no empty_cache).
 */

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

/**
 * Replays `[id, bytes]` allocations and `[-1 - id]` frees.
 *
 * @example
 * ```ts
 * import { replayAllocator } from 'vram-ts';
 * const r = replayAllocator([[0, 100], [1, 3 << 20], [-1], [2, 200]]);
 * console.log(r.maxReserved / 2 ** 20, r.maxAllocated); // 22 3146240
 * ```
 */
export function replayAllocator(log: readonly (readonly number[])[]): AllocatorReplay {
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
