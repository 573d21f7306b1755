/**
 * Replays of a compact program (memory/program.ts, memory/peak.ts): a program whose runs of
 * entries tagged 1 happen `times` times must replay exactly as the program with those runs
 * written out — the peak, its event and label, the totals by category, the live bytes at both
 * ends, at numbers and as expressions. Random programs, runs allocating (growing copy by copy),
 * freeing what earlier runs left, or both.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CATEGORIES, evaluate, mul, sym, type Category, type Dim, type StepProgram } from '../../src/index.js';
import { MARK } from '../../src/memory/ledger.js';
import { programEnds, programPeak } from '../../src/memory/peak.js';
import { programPeakAt, sweepConcrete, type Repetition } from '../../src/memory/program.js';

const B = sym('B');

interface Segment {
  readonly repeated: boolean;
  readonly entries: readonly ({ kind: 'alloc'; size: number; symbolic: boolean; category: number } | { kind: 'free'; pick: number } | { kind: 'mark' })[];
}

const entry = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('alloc' as const),
      size: fc.integer({ min: 1, max: 5000 }),
      symbolic: fc.boolean(),
      category: fc.integer({ min: 0, max: CATEGORIES.length - 1 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('mark' as const) }) },
);
const segments = fc.array(fc.record({ repeated: fc.boolean(), entries: fc.array(entry, { maxLength: 12 }) }), { minLength: 1, maxLength: 8 });

/**
 * The compact program and the same program written out (a run's entries `times` over). A run's frees only take blocks its
 * own copy made or that an earlier run made (the same number of copies each, as a decoder's
 * backward frees what its forward saved); a fixed segment's only fixed blocks.
 */
function build(given: readonly Segment[], times: number, rounded: boolean, symbolic: boolean) {
  const sizes: Dim[] = [];
  const categories: Category[] = [];
  const log: number[] = [];
  const units: number[] = [];
  const events: { phase: 'forward'; label: string }[] = [];
  const fixedLive: number[] = [];
  const runLive: number[] = [];
  const full: { log: number[]; events: { phase: 'forward'; label: string }[] } = { log: [], events: [] };
  for (const segment of given) {
    const local: number[] = [];
    for (const e of segment.entries) {
      if (e.kind === 'alloc') {
        const id = sizes.length;
        sizes.push(symbolic && e.symbolic ? mul(B, e.size) : e.size);
        categories.push(CATEGORIES[e.category]!);
        log.push(id);
        local.push(id);
      } else if (e.kind === 'free') {
        const pool = segment.repeated ? [...local, ...runLive] : fixedLive.concat(local);
        if (pool.length === 0) continue;
        const id = pool[e.pick % pool.length]!;
        for (const list of [local, runLive, fixedLive]) if (list.includes(id)) list.splice(list.indexOf(id), 1);
        log.push(-1 - id);
      } else {
        log.push(MARK);
        events.push({ phase: 'forward', label: `event ${events.length}` });
      }
      units.push(segment.repeated ? 1 : -1);
    }
    (segment.repeated ? runLive : fixedLive).push(...local);
  }
  log.push(MARK);
  units.push(-1);
  events.push({ phase: 'forward', label: 'end' });
  // Written out: each maximal run of tagged entries `times` over, its events labelled by copy.
  let event = 0;
  for (let i = 0; i < log.length; ) {
    let j = i + 1;
    if (units[i] === 1) while (j < log.length && units[j] === 1) j += 1;
    const run = log.slice(i, j);
    const first = event;
    for (let copy = 0; copy < (units[i] === 1 ? times : 1); copy += 1) {
      event = first;
      for (const x of run) {
        full.log.push(x);
        if (x === MARK) {
          full.events.push({ phase: 'forward', label: units[i] === 1 ? `event ${event} copy ${copy}` : events[event]!.label });
          event += 1;
        }
      }
    }
    i = j;
  }
  const compact: StepProgram = { sizes, categories, log, events, rounded };
  const repeat: Repetition = { units, times, relabel: (label, unit, copy) => (unit === 1 ? `${label} copy ${copy}` : label) };
  const written: StepProgram = { sizes, categories, log: full.log, events: full.events, rounded };
  return { compact, repeat, written };
}

describe('compact programs', () => {
  it('replay at numbers exactly as written out', () => {
    fc.assert(
      fc.property(segments, fc.integer({ min: 1, max: 9 }), fc.boolean(), (plan, times, rounded) => {
        const { compact, repeat, written } = build(plan, times, rounded, false);
        const a = sweepConcrete(compact, repeat);
        const b = sweepConcrete(written);
        expect(a.first).toBe(b.first);
        expect(a.last).toBe(b.last);
        expect(a.peak.bytes).toBe(b.peak.bytes);
        expect(a.peak.event).toBe(b.peak.event);
        expect(a.peak.label).toBe(b.peak.label);
        expect(a.peak.byCategory).toEqual(b.peak.byCategory);
        expect(programPeakAt(compact, repeat)({})).toBe(b.peak.bytes);
      }),
      { numRuns: 400 },
    );
  });

  it('replay as expressions exactly as written out, at any value of the symbols', () => {
    fc.assert(
      fc.property(segments, fc.integer({ min: 1, max: 9 }), fc.boolean(), (plan, times, rounded) => {
        const { compact, repeat, written } = build(plan, times, rounded, true);
        const peak = programPeak(compact, repeat);
        const ends = programEnds(compact, repeat);
        for (const value of [1, 2, 7, 100, 4096]) {
          const env = { B: value };
          const at = (d: Dim) => (typeof d === 'number' ? d : evaluate(d, env));
          const replay = programPeakAt(written)(env);
          expect(at(peak.bytes)).toBe(replay);
          expect(programPeakAt(compact, repeat)(env)).toBe(replay);
          const timeline = sweepConcrete({ ...written, sizes: written.sizes.map(at) });
          expect(at(ends.first)).toBe(timeline.first);
          expect(at(ends.last)).toBe(timeline.last);
        }
        // Every candidate is a real event of the written-out program, with its totals.
        for (const c of peak.candidates) {
          expect(written.events[c.event]!.label).toBe(c.label);
          const env = { B: 3 };
          const at = (d: Dim) => (typeof d === 'number' ? d : evaluate(d, env));
          const cut = {
            ...written,
            sizes: written.sizes.map(at),
            log: written.log.slice(0, nthMark(written.log, c.event) + 1),
            events: written.events.slice(0, c.event + 1),
          };
          const totals = totalsAtLast(cut);
          expect(Object.fromEntries(CATEGORIES.map((k) => [k, at(c.byCategory[k])]))).toEqual(totals);
        }
      }),
      { numRuns: 200 },
    );
  });
});

function nthMark(log: readonly number[], n: number): number {
  let seen = -1;
  for (let i = 0; i < log.length; i += 1) if (log[i] === MARK && ++seen === n) return i;
  return log.length - 1;
}

/** Totals by category after the whole (concrete) program. */
function totalsAtLast(program: StepProgram): Record<Category, number> {
  const totals = Object.fromEntries(CATEGORIES.map((c) => [c, 0])) as Record<Category, number>;
  for (const x of program.log) {
    if (x === MARK) continue;
    const id = x >= 0 ? x : -1 - x;
    const size = program.sizes[id] as number;
    const bytes = program.rounded ? (size <= 0 ? 0 : Math.ceil(size / 512) * 512) : size;
    totals[program.categories[id]!] += x >= 0 ? bytes : -bytes;
  }
  return totals;
}
