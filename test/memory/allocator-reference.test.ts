/**
 * The fast replay (treaps) against a slow, obviously-correct model of the same rules: every block
 * in one array, each pool's free blocks found by scanning and sorting by (size, address), neighbours
 * found by address. Random logs under the default settings, max_split_size_mb, max_non_split_rounding_mb,
 * roundup_power2_divisions, a device capacity (the releases before an OOM) and
 * garbage_collection_threshold with a memory fraction; every result field must agree exactly.
 * Expandable segments are checked case by case in allocator.test.ts. Also the replay's time: 10^5
 * entries under a second, 4× the entries in under 6× the time.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allocatorLog } from '../../bench/allocator.js';
import { type AllocConf, resolveAllocConf } from '../../src/memory/alloc-conf.js';
import { formatSize, replayAllocator, roundSize } from '../../src/memory/allocator.js';

const MiB = 2 ** 20;

interface RBlock {
  addr: number;
  size: number;
  allocated: boolean;
  small: boolean;
  /** Segment start and end: blocks are neighbours when adjacent inside one segment. */
  seg: number;
  segEnd: number;
  base: number;
}

/** The reference: the source's rules written as plainly as possible, O(n) per step. */
function reference(log: number[][], options: { capacity?: number; memoryFraction?: number; conf?: string }) {
  const conf: AllocConf = resolveAllocConf(options.conf, ['ref']);
  const capacity = options.capacity ?? Number.POSITIVE_INFINITY;
  const total = capacity;
  const allowed = options.memoryFraction === undefined ? undefined : Math.floor(options.memoryFraction * total);
  const gcOn = allowed !== undefined && conf.garbageCollectionThreshold > 0;
  const blocks: RBlock[] = [];
  const calls = { small: 0, large: 0 };
  let reserved = 0;
  let nextAddr = 0;
  let maxReserved = 0;
  let segments = 0;
  let deviceAllocs = 0;
  let deviceFrees = 0;
  let retries = 0;
  const live = new Map<number, RBlock>();
  const key = (b: RBlock) => (b.small ? 'small' : 'large') as 'small' | 'large';
  const freeOf = (small: boolean) => blocks.filter((b) => !b.allocated && b.small === small).sort((a, b) => a.size - b.size || a.addr - b.addr);
  const isWhole = (b: RBlock) => b.addr === b.seg && b.addr + b.size === b.segEnd;
  const drop = (b: RBlock) => blocks.splice(blocks.indexOf(b), 1);
  const release = (b: RBlock) => {
    drop(b);
    reserved -= b.size;
    segments -= 1;
    deviceFrees += 1;
  };
  const alloc = (bytes: number, small: boolean, isRetry: boolean): RBlock | null => {
    if (isRetry) retries += 1;
    if (allowed !== undefined && reserved + bytes > allowed) return null;
    if (reserved + bytes > capacity) return null;
    const b: RBlock = { addr: nextAddr, size: bytes, allocated: false, small, seg: nextAddr, segEnd: nextAddr + bytes, base: 0 };
    nextAddr += bytes;
    reserved += bytes;
    maxReserved = Math.max(maxReserved, reserved);
    segments += 1;
    deviceAllocs += 1;
    blocks.push(b);
    return b;
  };
  let allocated = 0;
  let maxAllocated = 0;
  let reservedAtPeak = 0;
  let largestFreeAtPeak = 0;
  let peakEntry = -1;
  let oom: unknown;
  for (let i = 0; i < log.length; i += 1) {
    const [id, bytes] = log[i]!;
    if (id! < 0) {
      const b = live.get(-1 - id!);
      if (b === undefined) continue;
      live.delete(-1 - id!);
      b.allocated = false;
      allocated -= b.size;
      // Merge with free neighbours in the segment.
      for (const n of blocks.filter((o) => o !== b && !o.allocated && o.seg === b.seg && (o.addr + o.size === b.addr || b.addr + b.size === o.addr))) {
        b.addr = Math.min(b.addr, n.addr);
        b.size += n.size;
        drop(n);
      }
      b.base = calls[key(b)];
      continue;
    }
    const size = roundSize(bytes!, conf);
    const small = size <= MiB;
    const pk = small ? 'small' : 'large';
    const allocSize = size <= MiB ? 2 * MiB : size < 10 * MiB ? 20 * MiB : Math.ceil(size / (2 * MiB)) * 2 * MiB;
    if (gcOn) calls[pk] += 1;
    let b: RBlock | null = freeOf(small).find((f) => f.size >= size) ?? null;
    if (b !== null && size < conf.maxSplitSize && b.size >= conf.maxSplitSize) b = null;
    if (b !== null && size >= conf.maxSplitSize && b.size >= size + conf.maxNonSplitRounding) b = null;
    if (b === null) {
      if (gcOn) {
        const threshold = Math.floor(conf.garbageCollectionThreshold * allowed!);
        if (reserved > threshold) {
          const target = reserved - threshold;
          let candidates = freeOf(false).filter(isWhole);
          let totalAge = candidates.reduce((s, c) => s + (calls.large - c.base), 0);
          let reclaimed = 0;
          let freed = true;
          while (candidates.length > 0 && reclaimed < target && freed) {
            const avg = totalAge / candidates.length;
            freed = false;
            for (const c of candidates) {
              if (calls.large - c.base >= avg) {
                freed = true;
                reclaimed += c.size;
                totalAge -= calls.large - c.base;
                release(c);
              }
            }
            candidates = freeOf(false).filter(isWhole);
          }
        }
      }
      b = alloc(allocSize, small, false);
      if (b === null && conf.maxSplitSize !== Number.POSITIVE_INFINITY) {
        const k = Math.max(size, conf.maxSplitSize);
        const pool = freeOf(small);
        const one = pool.find((f) => f.size >= k);
        let ok = false;
        if (one !== undefined) {
          release(one);
          ok = true;
        } else {
          let got = 0;
          for (const f of pool.reverse()) {
            if (got >= k || f.size < conf.maxSplitSize) break;
            got += f.size;
            release(f);
          }
          ok = got >= k;
        }
        if (ok) b = alloc(allocSize, small, false);
      }
      if (b === null) {
        for (const f of [...freeOf(false), ...freeOf(true)]) if (isWhole(f)) release(f);
        b = alloc(allocSize, small, true);
      }
      if (b === null) {
        oom = { entry: i, reserved, allocated, message: `Tried to allocate ${formatSize(allocSize)}` };
        break;
      }
    }
    const rest = b.size - size;
    if (small ? rest >= 512 : size < conf.maxSplitSize && rest > MiB) {
      blocks.push({ ...b, addr: b.addr + size, size: rest, allocated: false, base: calls[pk] });
      b.size = size;
    }
    b.allocated = true;
    allocated += b.size;
    live.set(id!, b);
    if (allocated > maxAllocated) {
      maxAllocated = allocated;
      reservedAtPeak = reserved;
      largestFreeAtPeak = Math.max(0, ...blocks.filter((f) => !f.allocated).map((f) => f.size));
      peakEntry = i;
    }
  }
  return { maxReserved, maxAllocated, segments, reservedAtPeak, largestFreeAtPeak, peakEntry, reserved, allocated, deviceAllocs, deviceFrees, retries, oom };
}

/** Random logs: ids allocated and freed in any order, sizes from 0 to ~130 MiB weighted to the thresholds. */
const logs = fc
  .array(
    fc.oneof(
      fc.record({
        free: fc.constant(false),
        bytes: fc.oneof(
          fc.integer({ min: 0, max: 4096 }),
          fc.integer({ min: MiB - 1024, max: MiB + 1024 }),
          fc.integer({ min: 1, max: 12 * MiB }),
          fc.integer({ min: 10 * MiB, max: 130 * MiB }),
          // Whole half-MiB sizes: remainders of exactly 1 MiB, blocks of exactly max_split_size.
          fc.integer({ min: 1, max: 260 }).map((k) => k * 512 * 1024),
        ),
      }),
      fc.record({ free: fc.constant(true), pick: fc.nat() }),
    ),
    { maxLength: 120 },
  )
  .map((steps) => {
    const log: number[][] = [];
    const live: number[] = [];
    let next = 0;
    for (const s of steps) {
      if (s.free && live.length > 0) {
        const k = (s as { pick: number }).pick % live.length;
        log.push([-1 - live[k]!]);
        live.splice(k, 1);
      } else if (!s.free) {
        log.push([next, (s as { bytes: number }).bytes]);
        live.push(next);
        next += 1;
      }
    }
    return log;
  });

const settings = fc.oneof(
  fc.constant({}),
  fc.record({ conf: fc.constantFrom('max_split_size_mb:21', 'max_split_size_mb:64', 'max_split_size_mb:32,max_non_split_rounding_mb:60') }),
  fc.record({ conf: fc.constantFrom('roundup_power2_divisions:4', 'roundup_power2_divisions:[1:2,4:4,16:8,>:2]') }),
  fc.record({
    capacity: fc.integer({ min: 20, max: 400 }).map((m) => m * MiB),
    conf: fc.constantFrom('', 'max_split_size_mb:40', 'roundup_power2_divisions:2'),
  }),
  fc.record({
    capacity: fc.integer({ min: 60, max: 400 }).map((m) => m * MiB),
    memoryFraction: fc.constantFrom(0.5, 0.8, 1),
    conf: fc.constantFrom('garbage_collection_threshold:0.3', 'garbage_collection_threshold:0.6,max_split_size_mb:48'),
  }),
);

describe('the replay agrees with a slow reference model of the same rules', () => {
  it('on random logs and settings, every figure exactly', () => {
    fc.assert(
      fc.property(logs, settings, (log, options) => {
        const fast = replayAllocator(log, options);
        const slow = reference(log, options);
        expect({
          maxReserved: fast.maxReserved,
          maxAllocated: fast.maxAllocated,
          segments: fast.segments,
          reservedAtPeak: fast.reservedAtPeak,
          largestFreeAtPeak: fast.largestFreeAtPeak,
          peakEntry: fast.peakEntry,
          reserved: fast.reserved,
          allocated: fast.allocated,
          deviceAllocs: fast.deviceAllocs,
          deviceFrees: fast.deviceFrees,
          retries: fast.allocRetries,
          oom:
            fast.oom === undefined
              ? undefined
              : {
                  entry: fast.oom.entry,
                  reserved: fast.oom.reserved,
                  allocated: fast.oom.allocated,
                  message: fast.oom.message.slice(20, 20 + ((slow.oom as { message: string } | undefined)?.message.length ?? 0)),
                },
        }).toEqual(slow);
        expect(fast.fragmentationAtPeak).toBe(fast.reservedAtPeak - fast.maxAllocated);
      }),
      { numRuns: 1500, seed: 24 },
    );
  });
});

describe('the replay is linear in the log', () => {
  it('10^5 entries in under a second; 4× the entries in under 6× the time', () => {
    const small = allocatorLog(100_000);
    const large = allocatorLog(400_000);
    const time = (log: number[][]) => {
      let best = Number.POSITIVE_INFINITY;
      for (let k = 0; k < 3; k += 1) {
        const t = performance.now();
        replayAllocator(log);
        best = Math.min(best, performance.now() - t);
      }
      return best;
    };
    time(small);
    const a = time(small);
    const b = time(large);
    expect(a).toBeLessThan(1000);
    expect(b / a).toBeLessThan(6);
  });
});
