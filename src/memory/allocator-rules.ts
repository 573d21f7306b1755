/**
 * The rules around the caching-allocator replay of allocator.ts: the sizes of
 * c10/cuda/CUDACachingAllocator.cpp (kMinBlockSize, kSmallSize, kSmallBuffer, kLargeBuffer,
 * kMinLargeAlloc, kRoundLarge; `round_size`, `roundup_power2_next_division`, `get_allocation_size`),
 * c10's `format_size`, the replay's public types, and the checks of its log and options.
 */

import { fail } from '../errors.js';
import { show } from '../validate.js';
import { type AllocConf, DEFAULT_ALLOC_CONF, divisionsFor, log2Floor, resolveAllocConf } from './alloc-conf.js';

/** kMinBlockSize, kSmallSize, kSmallBuffer, kLargeBuffer (CUDACachingAllocator.cpp); kMinLargeAlloc and kRoundLarge below serve allocationSize only. */
export const MIN_BLOCK = 512;
export const SMALL_SIZE = 1 << 20;
export const SMALL_BUFFER = 2 << 20;
export const LARGE_BUFFER = 20 << 20;
const MIN_LARGE_ALLOC = 10 << 20;
const ROUND_LARGE = 2 << 20;

/** The first allocation that failed after the cached blocks were released (PyTorch's OutOfMemoryError). */
export interface AllocatorOom {
  /** Index of the allocation in the log. */
  readonly entry: number;
  /** Bytes the entry asked for. */
  readonly requested: number;
  /** Bytes the allocator tried to get from the device (get_allocation_size: the "Tried to allocate" figure). */
  readonly allocationSize: number;
  /** Allocated bytes when it failed. */
  readonly allocated: number;
  /** Reserved bytes when it failed (after the releases). */
  readonly reserved: number;
  /** The device's total memory as the message states it. */
  readonly capacity: number;
  /** PyTorch's message, numbers formatted as its format_size does. */
  readonly message: string;
}

/** What the replay found. */
export interface AllocatorReplay {
  /** Largest total of segments held (max_memory_reserved). */
  readonly maxReserved: number;
  /** Largest total of allocated blocks (max_memory_allocated). */
  readonly maxAllocated: number;
  /** Segments held at the end: cudaMalloc'd segments plus live expandable segments. */
  readonly segments: number;
  /** Reserved bytes when allocated first reached its peak. */
  readonly reservedAtPeak: number;
  /** reservedAtPeak − maxAllocated: cached but unallocated bytes at the peak. */
  readonly fragmentationAtPeak: number;
  /** The largest free cached block at the peak (cacheInfo's figure), 0 when none. */
  readonly largestFreeAtPeak: number;
  /** Index of the entry where allocated first reached its peak, −1 for a log with no allocation. */
  readonly peakEntry: number;
  /** Reserved bytes at the end (or at the OOM). */
  readonly reserved: number;
  /** Allocated bytes at the end (or at the OOM). */
  readonly allocated: number;
  /** Device allocations made (num_device_alloc: cudaMalloc calls and page mappings). */
  readonly deviceAllocs: number;
  /** Device frees made (num_device_free: cudaFree calls and page unmappings). */
  readonly deviceFrees: number;
  /** Allocations that needed release_cached_blocks (num_alloc_retries). */
  readonly allocRetries: number;
  /** The first allocation that failed; the replay stops there, as the program would. */
  readonly oom?: AllocatorOom;
}

/** How to replay. */
export interface AllocatorOptions {
  /** Bytes the device lets the allocator reserve (free memory before the run); omitted: unlimited. */
  readonly capacity?: number;
  /** The GPU's total memory (cudaMemGetInfo's total) for the OOM message, the memory fraction and the expandable address space; defaults to capacity. */
  readonly deviceTotal?: number;
  /** torch.cuda.set_per_process_memory_fraction: allowed bytes = fraction × deviceTotal; needed for garbage_collection_threshold to act. */
  readonly memoryFraction?: number;
  /** PYTORCH_CUDA_ALLOC_CONF text (`expandable_segments:True,max_split_size_mb:128`) or its parsed settings. */
  readonly conf?: string | Partial<AllocConf>;
}

/** roundup_power2_next_division. */
function nextDivision(size: number, divisions: number): number {
  const floor = 2 ** log2Floor(size);
  if (floor === size) return size;
  const step = Math.floor(floor / 2 ** log2Floor(divisions));
  if (step === 0) return floor * 2;
  const down = Math.floor(size / step) * step;
  return down === size ? size : down + step;
}

/**
 * Bytes a request occupies (DeviceCachingAllocator::round_size): at least 512, a multiple of
 * 512, or with `roundup_power2_divisions` the next of that many divisions of its power-of-two interval.
 *
 * @example
 * ```ts
 * import { parseAllocConf, roundSize } from 'vram-ts';
 * console.log(roundSize(100), roundSize(1200)); // 512 1536
 * console.log(roundSize(1_200 * 2 ** 20, parseAllocConf('roundup_power2_divisions:4')) / 2 ** 20); // 1280
 * ```
 */
export function roundSize(size: number, conf: AllocConf = DEFAULT_ALLOC_CONF): number {
  checkBytes(size, ['roundSize', 'size']);
  const rounded = roundedSize(size, conf === DEFAULT_ALLOC_CONF ? conf : resolveAllocConf(conf, ['roundSize', 'conf']));
  if (!Number.isSafeInteger(rounded)) fail('overflow', 'the rounded size passes 2^53 bytes', { path: ['roundSize', 'size'], received: String(size) });
  return rounded;
}

/** {@link roundSize} without the argument checks: the replay's hot path, on sizes it has checked. */
export function roundedSize(size: number, conf: AllocConf): number {
  if (size < MIN_BLOCK) return MIN_BLOCK;
  const divisions = divisionsFor(conf, size);
  if (divisions > 1 && size > MIN_BLOCK * divisions) return nextDivision(size, divisions);
  return Math.ceil(size / MIN_BLOCK) * MIN_BLOCK;
}

/** A byte count as the allocator takes one: a safe integer >= 0, or a VramError at `path`. */
function checkBytes(value: unknown, path: readonly string[]): void {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0)
    fail('bad-argument', 'must be a byte count', { path, expected: 'integer 0 – 2^53 - 1', received: show(value) });
}

/** get_allocation_size. */
export function allocationSize(size: number): number {
  if (size <= SMALL_SIZE) return SMALL_BUFFER;
  if (size < MIN_LARGE_ALLOC) return LARGE_BUFFER;
  return Math.ceil(size / ROUND_LARGE) * ROUND_LARGE;
}

/**
 * c10's format_size: up to 1024 → "N bytes", then KiB, MiB, GiB with two decimals (printf's
 * rounding: the exact binary value, ties to even).
 *
 * @example
 * ```ts
 * import { formatSize } from 'vram-ts';
 * console.log(formatSize(1024), formatSize(20 * 2 ** 20), formatSize(80 * 2 ** 30)); // 1024 bytes 20.00 MiB 80.00 GiB
 * ```
 */
export function formatSize(bytes: number): string {
  checkBytes(bytes, ['formatSize', 'bytes']);
  return sizeText(bytes);
}

/** {@link formatSize} without the argument check (the OOM message, on counts the replay keeps). */
export function sizeText(bytes: number): string {
  if (bytes <= 1024) return `${bytes} bytes`;
  const [unit, name] = bytes <= 1048576 ? [1024n, 'KiB'] : bytes <= 1073741824 ? [1048576n, 'MiB'] : [1073741824n, 'GiB'];
  const scaled = BigInt(bytes) * 100n;
  let q = scaled / unit;
  const twice = (scaled % unit) * 2n;
  if (twice > unit || (twice === unit && q % 2n === 1n)) q += 1n;
  const cents = (q % 100n).toString().padStart(2, '0');
  return `${q / 100n}.${cents} ${name}`;
}

/** The most entries a log may have (a replay is O(n log n); past this the log itself is the problem). */
export const MAX_ALLOCATOR_LOG = 50_000_000;

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
export function checkLog(log: unknown): asserts log is readonly (readonly number[])[] {
  if (!Array.isArray(log))
    fail('bad-argument', 'must be a list of [id, bytes] and [-1 - id] entries', { path: ['replayAllocator', 'log'], expected: 'array', received: show(log) });
  if (log.length > MAX_ALLOCATOR_LOG)
    fail('bad-argument', `a log has at most ${MAX_ALLOCATOR_LOG} entries`, {
      path: ['replayAllocator', 'log'],
      expected: `0 – ${MAX_ALLOCATOR_LOG} entries`,
      received: show(log),
    });
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

const OPTION_KEYS = ['capacity', 'deviceTotal', 'memoryFraction', 'conf'];

/** The checked options of a replay. */
export interface Settings {
  readonly conf: AllocConf;
  readonly capacity: number;
  readonly total: number;
  /** allowed_memory_maximum, or undefined when no fraction is set (set_fraction false). */
  readonly allowed: number | undefined;
}

/** The options of replayAllocator, checked: a VramError at `replayAllocator.options` otherwise. */
export function checkOptions(options: unknown): Settings {
  const path = ['replayAllocator', 'options'];
  if (options === undefined) return { conf: DEFAULT_ALLOC_CONF, capacity: Number.POSITIVE_INFINITY, total: Number.POSITIVE_INFINITY, allowed: undefined };
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    fail('bad-option', 'must be an object', { path, expected: '{ capacity?, deviceTotal?, memoryFraction?, conf? }', received: show(options) });
  const record = options as Record<string, unknown>;
  for (const key of Object.keys(record))
    if (!OPTION_KEYS.includes(key))
      fail('unknown-option', 'unknown option', { path: [...path, key], expected: OPTION_KEYS.join(' | '), received: show(record[key]) });
  const bytes = (key: string): number | undefined => {
    const v = record[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
      fail('bad-option', 'must be a byte count (an integer >= 0)', { path: [...path, key], expected: 'integer 0 – 2^53 - 1', received: show(v) });
    return v;
  };
  const capacity = bytes('capacity');
  const deviceTotal = bytes('deviceTotal');
  const fraction = record.memoryFraction;
  if (fraction !== undefined && (typeof fraction !== 'number' || !(fraction >= 0 && fraction <= 1)))
    fail('bad-option', 'must be a fraction from 0 to 1', { path: [...path, 'memoryFraction'], expected: 'number 0 – 1', received: show(fraction) });
  const total = deviceTotal ?? capacity ?? Number.POSITIVE_INFINITY;
  if (fraction !== undefined && total === Number.POSITIVE_INFINITY)
    fail('bad-option', 'a memory fraction is of the device total: give capacity or deviceTotal', {
      path: [...path, 'memoryFraction'],
      expected: 'capacity or deviceTotal with it',
      received: show(fraction),
    });
  const conf = resolveAllocConf(record.conf, [...path, 'conf']);
  if (conf.backend === 'cudaMallocAsync')
    fail('unsupported', 'backend:cudaMallocAsync hands memory to CUDA’s own pool; the replay models the native caching allocator', {
      path: [...path, 'conf'],
      expected: 'backend:native',
      received: 'backend:cudaMallocAsync',
    });
  return {
    conf,
    capacity: capacity ?? Number.POSITIVE_INFINITY,
    total,
    // setMemoryFraction: static_cast<size_t>(fraction * device_total).
    allowed: fraction === undefined ? undefined : Math.floor((fraction as number) * total),
  };
}
