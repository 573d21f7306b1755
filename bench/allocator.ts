/**
 * The allocator replay's scaling (issue 24): a training-step-like log of n entries (a window of
 * live tensors of mixed sizes, small and large, freed out of order) replayed at 10^4, 10^5 and 10^6
 * entries. Time per entry stays flat when the replay is linear (O(n log n) here: the pools are treaps).
 */
import { fastest, type Row } from './scaling.js';

/** A deterministic log of `n` entries: allocations of 512 B – 64 MiB, each freed within ~2000 entries. */
export function allocatorLog(n: number): number[][] {
  const log: number[][] = [];
  const live: number[] = [];
  let seed = 12345;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  let id = 0;
  while (log.length < n) {
    if (live.length > 0 && (live.length > 1000 || rand() < 0.45)) {
      const k = Math.floor(rand() * live.length);
      const victim = live[k]!;
      live[k] = live[live.length - 1]!;
      live.pop();
      log.push([-1 - victim]);
    } else {
      const bytes = rand() < 0.6 ? Math.floor(rand() * 2 ** 20) : Math.floor(2 ** (20 + rand() * 6));
      log.push([id, bytes]);
      live.push(id);
      id += 1;
    }
  }
  return log;
}

export const ALLOCATOR_SIZES = [10_000, 100_000, 1_000_000] as const;

/** Rows for the allocator group: the fastest replay of each size, and its ratio to the first. */
export function allocatorRows(lib: { replayAllocator: (log: number[][]) => { readonly maxReserved: number } }, rounds = 3): Row[] {
  const logs = ALLOCATOR_SIZES.map(allocatorLog);
  const ms = fastest(
    logs.map((log) => () => lib.replayAllocator(log).maxReserved),
    { rounds, calls: 1, warmup: 1 },
  );
  return ALLOCATOR_SIZES.map((n, i) => ({
    group: 'allocator',
    task: `replayAllocator: ${n.toLocaleString('en-US')} entries (${((ms[i]! * 1e6) / n).toFixed(0)} ns/entry)`,
    ms: ms[i]!,
    ratio: ms[i]! / ms[0]!,
  }));
}
