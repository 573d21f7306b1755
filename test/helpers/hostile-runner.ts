/**
 * Runs the hostile cases of one export (test/properties/hostile.test.ts): the sweep, where
 * every case runs and failures are collected by signature, then the shrinking of the most
 * frequent failures to a minimal counterexample of the same signature. It runs in a worker
 * (hostile-worker.ts) so that a call that never returns can be stopped: before each case it
 * stores the case's index in `progress`, and it reports as it goes through `post`.
 */
import fc from 'fast-check';
import * as api from '../../src/index.js';
import { type Failure, judgeAsync, judgeSync } from './hostile-judge.js';
import { type Spec, specs } from './hostile-specs.js';
import { junkArgs, nearValid } from './hostile-values.js';

export const SEED = 20260523;
/** Failures shrunk per export (the most frequent first), and the time one shrink may take. */
const SHRINK_PER_EXPORT = 2;
const SHRINK_MS = 1500;

export interface Found extends Failure {
  count: number;
  /** The run that first showed it (fast-check's replay path), and its arguments. */
  readonly run: number;
  readonly example: string;
  counterexample?: string;
}

export interface Job {
  readonly name: string;
  /** Cases below this index were judged by an earlier worker (which posted them). */
  readonly from: number;
  /** Cases that hung an earlier worker: skipped. */
  readonly skip: readonly number[];
  /** Only print the arguments of this case, call nothing. */
  readonly describe?: number;
}

export type Message =
  | { readonly type: 'setup'; readonly setup: string }
  | { readonly type: 'found'; readonly found: Found }
  | { readonly type: 'counts'; readonly cases: number; readonly counts: Readonly<Record<string, number>> }
  | { readonly type: 'swept'; readonly cases: number }
  | { readonly type: 'shrunk'; readonly signature: string; readonly counterexample: string }
  | { readonly type: 'described'; readonly args: string }
  | { readonly type: 'done' }
  | { readonly type: 'ready' }
  | { readonly type: 'crash'; readonly error: string };

export const show = (args: unknown): string => {
  try {
    return fc.stringify(args).slice(0, 600);
  } catch {
    return '(unprintable)';
  }
};

let table: Record<string, Spec> | undefined;
export function specTable(): Record<string, Spec> {
  table ??= specs();
  return table;
}

function argumentsOf(spec: Spec, bases: readonly (readonly unknown[])[]): fc.Arbitrary<unknown[]> {
  const parts: fc.WeightedArbitrary<unknown[]>[] = [{ weight: 3, arbitrary: junkArgs(spec.arity) }];
  if (bases.length > 0) {
    parts.push({ weight: 6, arbitrary: nearValid(bases) });
    parts.push({ weight: 1, arbitrary: fc.constantFrom(...bases).map((a) => [...a]) });
  }
  if (spec.extra !== undefined) parts.push({ weight: 3, arbitrary: spec.extra() });
  return fc.oneof(...parts);
}

export async function runJob(job: Job, progress: Int32Array, post: (m: Message) => void): Promise<void> {
  const spec = specTable()[job.name]!;
  const fn = (api as unknown as Record<string, (...a: unknown[]) => unknown>)[job.name]!;
  let bases: readonly (readonly unknown[])[] = [];
  try {
    bases = spec.valid();
  } catch (error) {
    if (job.from === 0 && job.describe === undefined)
      post({
        type: 'setup',
        setup: `valid arguments could not be built: ${error instanceof Error ? `${error.constructor.name}: ${error.message.split('\n')[0]}` : String(error)}`,
      });
  }
  const args = argumentsOf(spec, bases);
  const skip = new Set(job.skip);

  if (job.describe !== undefined) {
    let index = 0;
    fc.check(
      fc.property(args, (a) => {
        if (index++ === job.describe) post({ type: 'described', args: show(a) });
      }),
      { numRuns: job.describe + 1, seed: SEED },
    );
    post({ type: 'done' });
    return;
  }

  const found = new Map<string, Found>();
  let cases = 0;
  const snapshot = () => post({ type: 'counts', cases, counts: Object.fromEntries([...found].map(([s, f]) => [s, f.count])) });
  const before = (index: number): boolean => {
    Atomics.store(progress, 0, index + 1);
    return index >= job.from && !skip.has(index);
  };
  const record = (index: number, f: Failure | undefined, a: unknown[]) => {
    cases = index + 1;
    if (f !== undefined) {
      const seen = found.get(f.signature);
      if (seen !== undefined) seen.count += 1;
      else {
        const entry = { ...f, count: 1, run: index, example: show(a) };
        found.set(f.signature, entry);
        post({ type: 'found', found: entry });
      }
    }
    if (cases % 100 === 0) snapshot();
  };

  // The sweep: every case runs; failures are collected, never thrown.
  let index = 0;
  if (spec.async === true) {
    await fc.check(
      fc.asyncProperty(args, async (a) => {
        const i = index++;
        if (before(i)) record(i, await judgeAsync(fn, spec, a), a);
        else cases = i + 1;
      }),
      { numRuns: spec.numRuns, seed: SEED },
    );
  } else {
    fc.check(
      fc.property(args, (a) => {
        const i = index++;
        if (before(i)) record(i, judgeSync(fn, spec, a), a);
        else cases = i + 1;
      }),
      { numRuns: spec.numRuns, seed: SEED },
    );
  }
  snapshot();
  post({ type: 'swept', cases });

  // Shrink the most frequent failures, each to a counterexample of the same signature.
  const failures = [...found.values()].sort((a, b) => b.count - a.count);
  for (const [k, f] of failures.slice(0, SHRINK_PER_EXPORT).entries()) {
    Atomics.store(progress, 0, -1 - k);
    const options = { seed: SEED, path: String(f.run), interruptAfterTimeLimit: SHRINK_MS };
    const result =
      spec.async === true
        ? await fc.check(
            fc.asyncProperty(args, async (a) => (await judgeAsync(fn, spec, a))?.signature !== f.signature),
            options,
          )
        : fc.check(
            fc.property(args, (a) => judgeSync(fn, spec, a)?.signature !== f.signature),
            options,
          );
    if (result.failed && result.counterexample !== null) post({ type: 'shrunk', signature: f.signature, counterexample: show(result.counterexample[0]) });
  }
  post({ type: 'done' });
}
