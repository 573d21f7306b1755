/**
 * A replay of PyTorch's CUDA caching allocator over a log of allocations and frees, one device and
 * one stream, as c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator, the 2.5–2.8 line) decides:
 *
 * - `round_size`: below kMinBlockSize (512 B) → 512; with roundup_power2_divisions d > 1 for the
 *   size's interval and size > 512·d → `roundup_power2_next_division`; else up to a multiple of 512.
 * - `get_pool`: size <= kSmallSize (1 MiB) → small pool, else large.
 * - `get_allocation_size`: small → kSmallBuffer (2 MiB); < kMinLargeAlloc (10 MiB) → kLargeBuffer
 *   (20 MiB); else up to a multiple of kRoundLarge (2 MiB).
 * - `get_free_block`: the pool's lower_bound by (size, address) (best fit); with max_split_size a
 *   request below it never takes a block >= it, and a request >= it only takes a block smaller than
 *   request + max_non_split_rounding (kLargeBuffer, 20 MiB, by default); with expandable segments a
 *   block's size counts its unmapped tail when choosing.
 * - `should_split`: small pool or expandable segments → remaining >= 512; large → request < max_split_size
 *   and remaining > kSmallSize.
 * - `alloc_found_block` splits; `free_block`/`try_merge_blocks` merge a freed block with its free
 *   neighbours (same mapped state).
 * - `malloc`: get_free_block, else [garbage_collect_cached_blocks when a memory fraction is set and
 *   garbage_collection_threshold > 0], `alloc_block` (cudaMalloc of the allocation size; fails past
 *   the fraction's allowed bytes or the device's capacity), then `release_available_cached_blocks`
 *   (max_split_size only: free oversize cached segments, largest first, enough for the request) and
 *   retry, then `release_cached_blocks` (empty_cache: every whole free segment; for expandable
 *   segments every free whole page) and retry; then the OOM error, its message as the source formats it.
 * - expandable segments (`find_expandable_block`, `map_block`, `try_allocate_expandable_block`,
 *   `unmap_block`): one segment per pool reserving 9/8 of the device's memory as address space,
 *   mapped in pages of kSmallBuffer (small pool) or kLargeBuffer (large pool) at the lowest address
 *   with room; reserved bytes are the mapped pages.
 *
 * Approximated: cudaMalloc's addresses (each segment is placed after the previous ones; they only
 * break ties between free blocks of equal size); the message's NVML line ("Including non-PyTorch
 * memory, this process has …") is left out; one stream, no CUDA graphs, no record_stream events.
 */

import { fail } from '../errors.js';
import type { AllocConf } from './alloc-conf.js';
import { Treap, type TreeNode } from './allocator-tree.js';
import {
  type AllocatorOom,
  type AllocatorOptions,
  type AllocatorReplay,
  allocationSize,
  checkLog,
  checkOptions,
  sizeText,
  LARGE_BUFFER,
  MIN_BLOCK,
  roundedSize,
  type Settings,
  SMALL_BUFFER,
  SMALL_SIZE,
} from './allocator-rules.js';

export { type AllocatorOom, type AllocatorOptions, type AllocatorReplay, formatSize, MAX_ALLOCATOR_LOG, roundSize } from './allocator-rules.js';

/** An expandable segment: its address range and page size (ExpandableSegment's ptr_, segment_size_). */
interface Segment {
  readonly base: number;
  readonly page: number;
}

interface Block extends TreeNode {
  allocated: boolean;
  mapped: boolean;
  prev: Block | null;
  next: Block | null;
  readonly small: boolean;
  readonly segment: Segment | null;
  /** get_free_blocks_call_count of its pool when last inserted (gc_count_base). */
  gcBase: number;
}

interface Pool {
  readonly small: boolean;
  readonly blocks: Treap<Block>;
  readonly unmapped: Treap<Block>;
  /** get_free_blocks_call_count. */
  calls: number;
}

/** The replay's state: DeviceCachingAllocator's pools, stats and total_allocated_memory. */
class Allocator {
  readonly small: Pool = { small: true, blocks: new Treap<Block>(true), unmapped: new Treap<Block>(false), calls: 0 };
  readonly large: Pool = { small: false, blocks: new Treap<Block>(true), unmapped: new Treap<Block>(false), calls: 0 };
  reserved = 0;
  allocated = 0;
  segments = 0;
  expandable = 0;
  deviceAllocs = 0;
  deviceFrees = 0;
  retries = 0;
  maxReserved = 0;
  private nextAddr = 0;
  private readonly conf: AllocConf;
  private readonly gc: boolean;
  /** Bytes of address space one expandable segment reserves (1 1/8 of the device, in pages). */
  private readonly addressSpace: (page: number) => number;

  constructor(private readonly settings: Settings) {
    this.conf = settings.conf;
    this.gc = settings.allowed !== undefined && this.conf.garbageCollectionThreshold > 0;
    const total = settings.total;
    this.addressSpace = (page) => (total === Number.POSITIVE_INFINITY ? 2 ** 46 : Math.ceil((total + Math.floor(total / 8)) / page) * page);
  }

  private grow(bytes: number): void {
    this.reserved += bytes;
    if (!Number.isSafeInteger(this.reserved))
      fail('overflow', 'the reserved bytes pass 2^53', { path: ['replayAllocator', 'log'], received: String(this.reserved) });
    if (this.reserved > this.maxReserved) this.maxReserved = this.reserved;
  }

  private address(bytes: number): number {
    const addr = this.nextAddr;
    this.nextAddr += bytes;
    if (!Number.isSafeInteger(this.nextAddr))
      fail('overflow', 'the replay’s addresses pass 2^53', { path: ['replayAllocator', 'log'], received: String(this.nextAddr) });
    return addr;
  }

  private block(addr: number, size: number, small: boolean, segment: Segment | null, mapped: boolean): Block {
    return { size, addr, left: null, right: null, priority: 0, allocated: false, mapped, prev: null, next: null, small, segment, gcBase: 0 };
  }

  /** BlockPool::insert_into_blocks: the block's age starts now. */
  private insertIntoBlocks(pool: Pool, b: Block): void {
    b.gcBase = pool.calls;
    pool.blocks.insert(b);
  }

  /** Block::splice. */
  private static splice(b: Block, before: Block | null, after: Block | null): void {
    if (before !== null) before.next = b;
    b.prev = before;
    if (after !== null) after.prev = b;
    b.next = after;
  }

  /** The block for a rounded request, or undefined when the device has no room even after the releases. */
  malloc(size: number): Block | undefined {
    const pool = size <= SMALL_SIZE ? this.small : this.large;
    const alloc = allocationSize(size);
    let b = this.getFreeBlock(pool, size);
    if (b === null) {
      if (this.gc) this.garbageCollect();
      b = this.allocBlock(pool, size, alloc, false);
      if (b === null && this.releaseAvailable(pool, size)) b = this.allocBlock(pool, size, alloc, false);
      if (b === null) {
        this.releaseCached();
        b = this.allocBlock(pool, size, alloc, true);
      }
    }
    if (b === null) return undefined;
    return this.allocFound(pool, b, size, this.shouldSplit(b, size));
  }

  private getFreeBlock(pool: Pool, size: number): Block | null {
    if (this.gc) pool.calls += 1;
    let it = pool.blocks.lowerBound(size);
    if (it === null) return null;
    if (it.segment !== null) {
      // Best fit over the size a block can expand to (its unmapped tail counts).
      const expandable = (b: Block) => b.size + (b.next !== null && !b.next.mapped ? b.next.size : 0);
      let next = pool.blocks.successor(it);
      while (it.segment !== null && next !== null && expandable(next) < expandable(it)) {
        it = next;
        next = pool.blocks.successor(it);
      }
    }
    const { maxSplitSize, maxNonSplitRounding } = this.conf;
    // Do not return an oversized block for a large request; allow oversized blocks within a limit.
    if (size < maxSplitSize && it.size >= maxSplitSize) return null;
    if (size >= maxSplitSize && it.size >= size + maxNonSplitRounding) return null;
    pool.blocks.remove(it);
    return it;
  }

  private shouldSplit(b: Block, size: number): boolean {
    const remaining = b.size - size;
    if (b.small || this.conf.expandableSegments) return remaining >= MIN_BLOCK;
    return size < this.conf.maxSplitSize && remaining > SMALL_SIZE;
  }

  private allocFound(pool: Pool, b: Block, size: number, split: boolean): Block {
    let block = b;
    if (split) {
      const remaining = b;
      block = this.block(remaining.addr, size, pool.small, remaining.segment, true);
      block.prev = remaining.prev;
      if (block.prev !== null) block.prev.next = block;
      block.next = remaining;
      remaining.prev = block;
      remaining.addr += size;
      remaining.size -= size;
      this.insertIntoBlocks(pool, remaining);
    }
    block.allocated = true;
    this.allocated += block.size;
    return block;
  }

  /** free + free_block. */
  free(b: Block): void {
    const pool = b.small ? this.small : this.large;
    b.allocated = false;
    this.allocated -= b.size;
    const prev = b.prev;
    const next = b.next;
    this.tryMerge(b, prev, pool);
    this.tryMerge(b, next, pool);
    this.insertIntoBlocks(pool, b);
  }

  /** try_merge_blocks: `dst` (in no set) absorbs a free neighbour of the same mapped state. */
  private tryMerge(dst: Block, src: Block | null, pool: Pool): number {
    if (src === null || src.allocated || dst.mapped !== src.mapped) return 0;
    if (src.mapped) pool.blocks.remove(src);
    else pool.unmapped.remove(src);
    if (dst.prev === src) {
      dst.addr = src.addr;
      dst.prev = src.prev;
      if (dst.prev !== null) dst.prev.next = dst;
    } else {
      dst.next = src.next;
      if (dst.next !== null) dst.next.prev = dst;
    }
    dst.size += src.size;
    return src.size;
  }

  private allocBlock(pool: Pool, size: number, alloc: number, retry: boolean): Block | null {
    if (retry) this.retries += 1;
    const { allowed } = this.settings;
    if (allowed !== undefined && this.reserved + alloc > allowed) return null;
    if (this.conf.expandableSegments) return this.tryAllocateExpandable(pool, size);
    // cudaMalloc fails when the device has not the bytes left.
    if (this.reserved + alloc > this.settings.capacity) return null;
    const b = this.block(this.address(alloc), alloc, pool.small, null, true);
    this.grow(alloc);
    this.segments += 1;
    this.deviceAllocs += 1;
    return b;
  }

  /** release_block: cudaFree of a whole free segment. */
  private releaseBlock(pool: Pool, b: Block): void {
    pool.blocks.remove(b);
    this.reserved -= b.size;
    this.segments -= 1;
    this.deviceFrees += 1;
  }

  /** release_available_cached_blocks (max_split_size only). */
  private releaseAvailable(pool: Pool, size: number): boolean {
    const { maxSplitSize } = this.conf;
    // With expandable segments every cached block is part of one; release_block would assert on it.
    if (maxSplitSize === Number.POSITIVE_INFINITY || this.conf.expandableSegments) return false;
    const key = Math.max(size, maxSplitSize);
    const found = pool.blocks.lowerBound(key);
    if (found !== null) {
      this.releaseBlock(pool, found);
      return true;
    }
    // No single block is large enough: free oversize blocks, largest first.
    let it = pool.blocks.last();
    if (it === null) return false;
    let released = 0;
    while (released < key && it.size >= maxSplitSize) {
      const cur: Block = it;
      released += cur.size;
      const before = pool.blocks.predecessor(cur);
      this.releaseBlock(pool, cur);
      if (before === null) break;
      it = before;
    }
    return released >= key;
  }

  /** release_cached_blocks → release_blocks(large), release_blocks(small). */
  private releaseCached(): void {
    for (const pool of [this.large, this.small]) {
      const toUnmap: Block[] = [];
      for (const b of pool.blocks.toArray()) {
        if (b.segment !== null) toUnmap.push(b);
        else if (b.prev === null && b.next === null) this.releaseBlock(pool, b);
      }
      for (const b of toUnmap) {
        this.unmapBlock(pool, b);
        if (!b.mapped && b.prev === null && b.next === null) {
          // release_expandable_segment.
          pool.unmapped.remove(b);
          this.expandable -= 1;
        }
      }
    }
  }

  /** garbage_collect_cached_blocks: free whole cached large segments, the oldest (by get_free_block calls) first. */
  private garbageCollect(): void {
    const threshold = Math.floor(this.conf.garbageCollectionThreshold * this.settings.allowed!);
    if (this.reserved <= threshold) return;
    const target = this.reserved - threshold;
    const pool = this.large;
    const age = (b: Block) => pool.calls - b.gcBase;
    let totalAge = 0;
    let count = 0;
    for (const b of pool.blocks.toArray()) {
      if (b.prev === null && b.next === null) {
        totalAge += age(b);
        count += 1;
      }
    }
    if (count === 0) return;
    let reclaimed = 0;
    let freed = true;
    while (reclaimed < target && freed && count > 0) {
      const ageThreshold = totalAge / count;
      freed = false;
      for (const b of pool.blocks.toArray()) {
        if (b.prev === null && b.next === null && age(b) >= ageThreshold) {
          freed = true;
          reclaimed += b.size;
          totalAge -= age(b);
          count -= 1;
          this.releaseBlock(pool, b);
        }
      }
    }
  }

  /** find_expandable_block: the lowest address where free and unmapped blocks give `size`, else a new segment. */
  private findExpandable(pool: Pool, size: number): Block {
    const room = (start: Block): boolean => {
      let bytes = 0;
      for (let b: Block | null = start; bytes < size && b !== null && !b.allocated; b = b.next) bytes += b.size;
      return bytes >= size;
    };
    for (let c = pool.unmapped.lowerBound(0); c !== null; c = pool.unmapped.successor(c)) {
      const start = c.prev !== null && !c.prev.allocated ? c.prev : c;
      if (room(start)) return start;
    }
    const page = pool.small ? SMALL_BUFFER : LARGE_BUFFER;
    const bytes = this.addressSpace(page);
    const segment: Segment = { base: this.address(bytes), page };
    this.expandable += 1;
    const candidate = this.block(segment.base, bytes, pool.small, segment, false);
    pool.unmapped.insert(candidate);
    return candidate;
  }

  /** map_block: map the pages under [addr, addr + size) of an unmapped block; false when the device has no room. */
  private mapBlock(pool: Pool, b: Block, size: number): boolean {
    const { base, page } = b.segment!;
    const begin = (b.addr - base) / page;
    const end = Math.ceil((b.addr + size - base) / page);
    const bytes = (end - begin) * page;
    if (bytes === 0 || this.reserved + bytes > this.settings.capacity) return false;
    pool.unmapped.remove(b);
    b.mapped = true;
    if (bytes < b.size) {
      const remaining = this.block(b.addr + bytes, b.size - bytes, pool.small, b.segment, false);
      Allocator.splice(remaining, b, b.next);
      pool.unmapped.insert(remaining);
      b.size = bytes;
    }
    this.tryMerge(b, b.prev, pool);
    this.tryMerge(b, b.next, pool);
    this.insertIntoBlocks(pool, b);
    this.grow(bytes);
    this.deviceAllocs += 1;
    return true;
  }

  /** try_allocate_expandable_block. */
  private tryAllocateExpandable(pool: Pool, size: number): Block | null {
    let c = this.findExpandable(pool, size);
    if (!c.mapped && !this.mapBlock(pool, c, Math.min(c.size, size))) return null;
    while (c.size < size) {
      const next = c.next!;
      if (!this.mapBlock(pool, next, Math.min(size - c.size, next.size))) return null;
      c = next;
    }
    pool.blocks.remove(c);
    return c;
  }

  /** unmap_block: unmap the whole pages inside a free block of an expandable segment. */
  private unmapBlock(pool: Pool, b: Block): void {
    const { base, page } = b.segment!;
    const begin = Math.ceil((b.addr - base) / page);
    const end = Math.floor((b.addr + b.size - base) / page);
    if (begin >= end) return;
    const start = base + begin * page;
    const bytes = (end - begin) * page;
    pool.blocks.remove(b);
    const before = start - b.addr;
    if (before > 0) {
      const piece = this.block(b.addr, before, pool.small, b.segment, true);
      Allocator.splice(piece, b.prev, b);
      this.insertIntoBlocks(pool, piece);
    }
    const after = b.size - (before + bytes);
    if (after > 0) {
      const piece = this.block(start + bytes, after, pool.small, b.segment, true);
      Allocator.splice(piece, b, b.next);
      this.insertIntoBlocks(pool, piece);
    }
    b.addr = start;
    b.size = bytes;
    b.mapped = false;
    this.tryMerge(b, b.prev, pool);
    this.tryMerge(b, b.next, pool);
    pool.unmapped.insert(b);
    this.reserved -= bytes;
    this.deviceFrees += 1;
  }

  /** The largest free cached block (cacheInfo over both pools). */
  largestFree(): number {
    return Math.max(this.small.blocks.last()?.size ?? 0, this.large.blocks.last()?.size ?? 0);
  }

  /** The OOM message of DeviceCachingAllocator::malloc. */
  oomMessage(alloc: number): string {
    const { total, capacity, allowed } = this.settings;
    const free = Math.max(0, (capacity === Number.POSITIVE_INFINITY ? total : capacity) - this.reserved);
    const allowedInfo = allowed !== undefined ? `${sizeText(allowed)} allowed; ` : '';
    return `CUDA out of memory. Tried to allocate ${sizeText(alloc)}. GPU 0 has a total capacity of ${sizeText(total)} of which ${sizeText(free)} is free. ${allowedInfo}Of the allocated memory ${sizeText(this.allocated)} is allocated by PyTorch, and ${sizeText(
      this.reserved - this.allocated,
    )} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)`;
  }
}

/**
 * Replays `[id, bytes]` allocations and `[-1 - id]` frees (a free of an id not allocated is
 * ignored) through PyTorch's CUDA caching allocator: max_memory_reserved and max_memory_allocated,
 * the reserved bytes and fragmentation when allocated peaks, and with a `capacity` the first
 * allocation PyTorch would fail with its OutOfMemoryError (after releasing cached blocks, as it does).
 * `conf` is PYTORCH_CUDA_ALLOC_CONF (see {@link parseAllocConf}). O(n log n) in the log's length
 * (the releases before an OOM and garbage collection walk the cached blocks, as the source does).
 * A log that is not a list of such entries (integers, an id allocated again before its free), or
 * longer than 50,000,000 entries, is a VramError at the entry; bad options are VramErrors at
 * `replayAllocator.options`; reserved bytes past 2^53 are an `overflow`.
 *
 * @example
 * ```ts
 * import { replayAllocator } from 'vram-ts';
 * const r = replayAllocator([[0, 100], [1, 3 << 20], [-1], [2, 200]]);
 * console.log(r.maxReserved / 2 ** 20, r.maxAllocated); // 22 3146240
 * const oom = replayAllocator([[0, 30 << 20], [1, 30 << 20]], { capacity: 40 << 20 }).oom;
 * console.log(oom?.entry, oom?.message.slice(0, 60)); // 1 CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a
 * ```
 */
export function replayAllocator(log: readonly (readonly number[])[], options?: AllocatorOptions): AllocatorReplay {
  checkLog(log);
  const settings = checkOptions(options);
  const a = new Allocator(settings);
  const live = new Map<number, Block>();
  let maxAllocated = 0;
  let reservedAtPeak = 0;
  let largestFreeAtPeak = 0;
  let peakEntry = -1;
  let oom: AllocatorOom | undefined;
  for (let i = 0; i < log.length; i += 1) {
    const entry = log[i]!;
    const id = entry[0]!;
    if (id < 0) {
      const block = live.get(-1 - id);
      if (block === undefined) continue;
      live.delete(-1 - id);
      a.free(block);
      continue;
    }
    const requested = entry[1]!;
    const size = roundedSize(requested, settings.conf);
    const block = a.malloc(size);
    if (block === undefined) {
      const alloc = allocationSize(size);
      oom = {
        entry: i,
        requested,
        allocationSize: alloc,
        allocated: a.allocated,
        reserved: a.reserved,
        capacity: settings.total,
        message: a.oomMessage(alloc),
      };
      break;
    }
    live.set(id, block);
    if (a.allocated > maxAllocated) {
      maxAllocated = a.allocated;
      reservedAtPeak = a.reserved;
      largestFreeAtPeak = a.largestFree();
      peakEntry = i;
    }
  }
  return {
    maxReserved: a.maxReserved,
    maxAllocated,
    segments: a.segments + a.expandable,
    reservedAtPeak,
    fragmentationAtPeak: reservedAtPeak - maxAllocated,
    largestFreeAtPeak,
    peakEntry,
    reserved: a.reserved,
    allocated: a.allocated,
    deviceAllocs: a.deviceAllocs,
    deviceFrees: a.deviceFrees,
    allocRetries: a.retries,
    ...(oom !== undefined ? { oom } : {}),
  };
}
