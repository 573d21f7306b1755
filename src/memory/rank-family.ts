import { fail } from '../errors.js';
import { MARK, type StepProgram } from './ledger.js';
import { roundNumber } from './program.js';

/**
 * Every rank's peak of a log recorded for a family of ranks ({@link RankFamily}): the live
 * total swept once, each rank's own blocks on top, each event read by the ranks that record it.
 * Rank r's figure equals the peak of rank r's own concrete program (the same sweep: the highest
 * live total at an event).
 */
export function familyPeaks(program: StepProgram): readonly number[] {
  const family = program.ranks;
  if (family === undefined || family.broken !== undefined) throw new Error('familyPeaks: the program stands for no family of ranks (a bug)');
  const { count } = family;
  const shared = new Float64Array(program.sizes.length);
  for (let id = 0; id < shared.length; id += 1) if (!family.sizes.has(id)) shared[id] = roundNumber(program.sizes[id] as number, program.rounded);
  const own = new Map<number, Float64Array>();
  for (const [id, sizes] of family.sizes)
    own.set(
      id,
      Float64Array.from(sizes, (bytes) => roundNumber(bytes, program.rounded)),
    );
  let live = 0;
  const mine = new Float64Array(count);
  const peaks = new Float64Array(count).fill(-1);
  let event = 0;
  const seen = (rank: number) => {
    const total = live + mine[rank]!;
    if (total > Number.MAX_SAFE_INTEGER)
      fail('overflow', 'the live total of the step is not an exact integer (past 2^53 bytes)', { expected: 'at most 2^53 - 1 bytes' });
    if (total > peaks[rank]!) peaks[rank] = total;
  };
  for (const entry of program.log) {
    if (entry === MARK) {
      const ranks = family.events.get(event);
      if (ranks === undefined) for (let r = 0; r < count; r += 1) seen(r);
      else for (const r of ranks) seen(r);
      event += 1;
      continue;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    const sign = entry >= 0 ? 1 : -1;
    const sizes = own.get(id);
    if (sizes === undefined) live += sign * shared[id]!;
    else for (let r = 0; r < count; r += 1) mine[r]! += sign * sizes[r]!;
  }
  return Array.from(peaks);
}
