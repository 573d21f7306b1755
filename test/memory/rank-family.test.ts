/**
 * A log recorded for a family of ranks (ledger.forRanks, allocEach, recordFor, ledgerOfRank) and
 * its sweep (familyPeaks): rank r's peak is that of the log rank r would record alone.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLedger, ledgerOfRank, type Ledger } from '../../src/memory/ledger.js';
import { sweepConcrete } from '../../src/memory/program.js';
import { familyPeaks } from '../../src/memory/rank-family.js';

/** One step of a random log: a shared block, a block of each rank's own size, a free, an event (every rank's or some ranks'). */
type Step =
  | { readonly kind: 'alloc'; readonly bytes: number }
  | { readonly kind: 'each'; readonly sizes: readonly number[] }
  | { readonly kind: 'mine'; readonly rank: number; readonly bytes: number }
  | { readonly kind: 'free'; readonly pick: number }
  | { readonly kind: 'record' }
  | { readonly kind: 'recordFor'; readonly ranks: readonly number[] };

function stepsOf(count: number): fc.Arbitrary<Step[]> {
  const bytes = fc.integer({ min: 0, max: 5000 });
  const rank = fc.integer({ min: 0, max: count - 1 });
  return fc.array(
    fc.oneof(
      bytes.map((b) => ({ kind: 'alloc', bytes: b }) as const),
      fc.array(bytes, { minLength: count, maxLength: count }).map((sizes) => ({ kind: 'each', sizes }) as const),
      fc.tuple(rank, bytes).map(([r, b]) => ({ kind: 'mine', rank: r, bytes: b }) as const),
      fc.nat().map((pick) => ({ kind: 'free', pick }) as const),
      fc.constant({ kind: 'record' } as const),
      fc.uniqueArray(rank, { minLength: 1, maxLength: count }).map((ranks) => ({ kind: 'recordFor', ranks }) as const),
    ),
    { maxLength: 40 },
  );
}

/** Replays the steps: on the family ledger (rank null), or as rank r alone would record them. */
function replay(steps: readonly Step[], count: number, rounded: boolean, rank: number | null): Ledger {
  const ledger = createLedger(rounded);
  if (rank === null) ledger.forRanks(count);
  const live: number[] = [];
  for (const step of steps) {
    switch (step.kind) {
      case 'alloc':
        live.push(ledger.alloc(step.bytes, 'activations'));
        break;
      case 'each':
        live.push(rank === null ? ledger.allocEach(step.sizes, 'gradients') : ledger.alloc(step.sizes[rank]!, 'gradients'));
        break;
      case 'mine':
        if (rank === null) live.push(ledgerOfRank(ledger, step.rank, count).alloc(step.bytes, 'optimizer'));
        else live.push(ledger.alloc(step.rank === rank ? step.bytes : 0, 'optimizer'));
        break;
      case 'free':
        if (live.length > 0) ledger.release(live.splice(step.pick % live.length, 1)[0]!);
        break;
      case 'record':
        ledger.record('backward', 'every rank');
        break;
      case 'recordFor':
        if (rank === null) ledger.recordFor(step.ranks, 'backward', 'some ranks');
        else if (step.ranks.includes(rank)) ledger.record('backward', 'some ranks');
        break;
    }
  }
  ledger.record('end', 'end');
  return ledger;
}

describe('familyPeaks', () => {
  it('gives every rank the peak of the log it would record alone (random logs, rounded or not)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }).chain((count) => fc.tuple(fc.constant(count), stepsOf(count))),
        fc.boolean(),
        ([count, steps], rounded) => {
          const family = familyPeaks(replay(steps, count, rounded, null).program());
          const alone = Array.from({ length: count }, (_, r) => sweepConcrete(replay(steps, count, rounded, r).program()).peak.bytes);
          expect(family).toEqual(alone);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("an event some ranks record is theirs alone: another rank's peak does not see what is live then", () => {
    const ledger = createLedger(false);
    ledger.forRanks(2);
    const temp = ledger.alloc(1000, 'temporaries');
    ledger.recordFor([1], 'backward', 'rank 1 only');
    ledger.release(temp);
    ledger.record('end', 'everyone');
    expect(familyPeaks(ledger.program())).toEqual([0, 1000]);
  });

  it('a block of one rank alone (ledgerOfRank) counts on that rank only', () => {
    const ledger = createLedger(true);
    ledger.forRanks(3);
    ledger.alloc(100, 'parameters');
    ledgerOfRank(ledger, 2, 3).alloc(1, 'optimizer');
    ledger.record('end', 'everyone');
    expect(familyPeaks(ledger.program())).toEqual([512, 512, 1024]);
  });

  it('refuses what no family run makes: sizes for another count of ranks, family blocks before forRanks, a program of one rank or a broken family', () => {
    const ledger = createLedger(false);
    expect(() => ledger.allocEach([1, 2], 'gradients')).toThrow(/before forRanks/);
    ledger.forRanks(3);
    expect(() => ledger.allocEach([1, 2], 'gradients')).toThrow(/2 sizes for 3 ranks/);
    expect(() => familyPeaks(createLedger(false).program())).toThrow(/no family/);
    ledger.breakRanks('a test');
    expect(ledger.program().ranks?.broken).toBe('a test');
    expect(() => familyPeaks(ledger.program())).toThrow(/no family/);
  });
});
