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
  // Per block: its rounded bytes when every rank has it, else the index of its sizes per rank in `own`
  // (typed arrays: the sweep reads one of them per log entry).
  const shared = new Float64Array(program.sizes.length);
  for (let id = 0; id < shared.length; id += 1) shared[id] = roundNumber(program.sizes[id] as number, program.rounded);
  const ownIndex = new Int32Array(program.sizes.length).fill(-1);
  const own: Float64Array[] = [];
  for (const [id, sizes] of family.sizes) {
    shared[id] = 0;
    ownIndex[id] = own.length;
    own.push(Float64Array.from(sizes, (bytes) => roundNumber(bytes, program.rounded)));
  }
  let live = 0;
  const mine = new Float64Array(count);
  const peaks = new Float64Array(count).fill(-1);
  // Between changes of the ranks' own blocks, an event every rank reads adds the same live total
  // to each: only the highest of them is kept (`pending`), and each rank reads it once, when its
  // own blocks next change or at the end. O(events + changes · ranks), not O(events · ranks).
  let pending = Number.NEGATIVE_INFINITY;
  const seen = (rank: number, shared: number) => {
    const total = shared + mine[rank]!;
    if (total > Number.MAX_SAFE_INTEGER)
      fail('overflow', 'the live total of the step is not an exact integer (past 2^53 bytes)', { expected: 'at most 2^53 - 1 bytes' });
    if (total > peaks[rank]!) peaks[rank] = total;
  };
  const flush = () => {
    if (pending === Number.NEGATIVE_INFINITY) return;
    for (let r = 0; r < count; r += 1) seen(r, pending);
    pending = Number.NEGATIVE_INFINITY;
  };
  let event = 0;
  // The events only some ranks record, in order (the rest every rank does).
  const special = [...family.events.keys()].sort((a, b) => a - b);
  let next = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      if (event !== special[next]) pending = Math.max(pending, live);
      else {
        for (const r of family.events.get(event)!) seen(r, live);
        next += 1;
      }
      event += 1;
      continue;
    }
    const id = entry >= 0 ? entry : -1 - entry;
    const sign = entry >= 0 ? 1 : -1;
    const index = ownIndex[id]!;
    if (index < 0) live += sign * shared[id]!;
    else {
      flush();
      const sizes = own[index]!;
      for (let r = 0; r < count; r += 1) mine[r]! += sign * sizes[r]!;
    }
  }
  flush();
  return Array.from(peaks);
}
