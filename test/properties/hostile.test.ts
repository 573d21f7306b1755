/**
 * Hostile inputs everywhere (issue 23): every function export of src/index.ts, called with
 * fully random values, with near-valid arguments (a valid call with one field deep inside
 * replaced by a hostile value, deleted, or joined by a misspelt key) and with valid layers
 * mixed with junk, either throws a VramError whose issues each have an array path and a code,
 * or returns a result that meets the export's invariants, the same on a second call, within
 * 2 s. A built layer must be frozen plain data, and estimating it must give exact
 * non-negative integers or a VramError. Never a TypeError, a RangeError or a hang.
 *
 * The cases run in two worker threads (test/helpers/hostile-worker.ts), so that a call that
 * never returns is stopped (a watchdog reads the case each worker is on), counted as a hang,
 * and the export's remaining cases still run. Each export is then its own test: it fails
 * listing its failures by signature, the most frequent shrunk to a minimal counterexample.
 * With HOSTILE_REPORT=<file> the findings are also written there as JSON.
 */
import { writeFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Found, type Job, type Message, SEED, specTable } from '../helpers/hostile-runner.js';

const api = (await import('../../src/index.js')) as unknown as Record<string, unknown>;
const FUNCTIONS = Object.entries(api)
  .filter(([, value]) => typeof value === 'function')
  .map(([name]) => name)
  .sort();
const SPECS = specTable();
const MIN_TOTAL_CASES = 100_000;
const WORKERS = 2;
/** A case (or the start of a worker) longer than this is a hang; a shrink gets longer. */
const HANG_MS = 4000;
const SHRINK_HANG_MS = 8000;
const START_MS = 60_000;
const MAX_HANGS = 5;

interface ExportReport {
  readonly name: string;
  cases: number;
  ms: number;
  setup?: string;
  crash?: string;
  failures: Found[];
}

const reports = new Map<string, ExportReport>();

/** A worker thread and the shared cell where it stores the case it is on. */
class Slot {
  private worker: Worker | undefined;
  private progress = new Int32Array(new SharedArrayBuffer(4));
  private ready: Promise<void> | undefined;

  private start(): Promise<void> {
    this.progress = new Int32Array(new SharedArrayBuffer(4));
    const worker = new Worker(new URL('../helpers/hostile-worker.mjs', import.meta.url), { workerData: { progress: this.progress.buffer } });
    this.worker = worker;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the hostile worker did not start')), START_MS);
      worker.once('message', () => {
        clearTimeout(timer);
        resolve();
      });
      worker.once('error', reject);
    });
  }

  /** Runs a job; resolves 'done', or the index of the case it hung on (-1: while shrinking, or starting). */
  async run(job: Job, onMessage: (m: Message) => void): Promise<'done' | number> {
    this.ready ??= this.start();
    await this.ready;
    const worker = this.worker!;
    Atomics.store(this.progress, 0, 0);
    return new Promise((resolve) => {
      let last = 0;
      let since = performance.now();
      const stop = (outcome: 'done' | number) => {
        clearInterval(watchdog);
        worker.off('message', listen);
        worker.off('error', crashed);
        resolve(outcome);
      };
      const listen = (m: Message) => {
        since = performance.now();
        onMessage(m);
        if (m.type === 'done' || m.type === 'crash') stop('done');
      };
      const crashed = (error: Error) => {
        onMessage({ type: 'crash', error: error.stack ?? error.message });
        this.ready = undefined;
        stop('done');
      };
      const watchdog = setInterval(() => {
        const now = Atomics.load(this.progress, 0);
        if (now !== last) {
          last = now;
          since = performance.now();
          return;
        }
        const limit = now > 0 ? HANG_MS : now < 0 ? SHRINK_HANG_MS : START_MS;
        if (performance.now() - since > limit) {
          void worker.terminate();
          this.ready = undefined;
          stop(now > 0 ? now - 1 : -1);
        }
      }, 100);
      worker.on('message', listen);
      worker.on('error', crashed);
      worker.postMessage(job);
    });
  }

  close(): Promise<number> | undefined {
    return this.worker?.terminate();
  }
}

async function runExport(slot: Slot, name: string): Promise<ExportReport> {
  const report: ExportReport = { name, cases: 0, ms: 0, failures: [] };
  const started = performance.now();
  const found = new Map<string, Found>();
  const committed = new Map<string, number>();
  let snapshot: { cases: number; counts: Readonly<Record<string, number>> } = { cases: 0, counts: {} };
  let swept = false;
  const skip: number[] = [];
  const hang: Found = {
    signature: 'hang | - | no answer | hang',
    kind: 'hang',
    error: '-',
    message: `no answer within ${HANG_MS} ms`,
    frame: 'hang',
    count: 0,
    run: -1,
    example: '',
  };
  const onMessage = (m: Message) => {
    if (m.type === 'setup') report.setup = m.setup;
    else if (m.type === 'found' && !found.has(m.found.signature)) found.set(m.found.signature, { ...m.found });
    else if (m.type === 'counts') snapshot = m;
    else if (m.type === 'swept') swept = true;
    else if (m.type === 'shrunk') {
      const f = found.get(m.signature);
      if (f !== undefined) f.counterexample = m.counterexample;
    } else if (m.type === 'crash') report.crash = m.error;
  };
  let from = 0;
  for (;;) {
    snapshot = { cases: from, counts: {} };
    const outcome = await slot.run({ name, from, skip }, onMessage);
    for (const [sig, n] of Object.entries(snapshot.counts)) committed.set(sig, (committed.get(sig) ?? 0) + n);
    if (outcome === 'done' || swept || outcome < 0 || hang.count + 1 > MAX_HANGS) {
      if (outcome !== 'done') hang.count += 1;
      break;
    }
    // Hung on a case: count it, find its arguments, and carry on after it.
    hang.count += 1;
    committed.set(hang.signature, hang.count);
    skip.push(outcome);
    from = snapshot.cases;
    if (hang.example === '') {
      let described = '';
      await slot.run({ name, from: 0, skip: [], describe: outcome }, (m) => {
        if (m.type === 'described') described = m.args;
      });
      Object.assign(hang, { run: outcome, example: described });
    }
  }
  if (hang.count > 0) {
    found.set(hang.signature, hang);
    committed.set(hang.signature, hang.count);
  }
  for (const f of found.values()) f.count = committed.get(f.signature) ?? f.count;
  report.failures = [...found.values()].sort((a, b) => b.count - a.count);
  report.cases = snapshot.cases;
  report.ms = Math.round(performance.now() - started);
  return report;
}

function describeFailures(r: ExportReport): string {
  const lines = [r.setup, r.crash].filter((x): x is string => x !== undefined);
  for (const f of r.failures.slice(0, 8)) {
    lines.push(`${f.count}× ${f.kind}: ${f.error}: ${f.message.split('\n')[0]} [${f.frame}]`);
    lines.push(`   ${f.counterexample !== undefined ? 'shrunk' : 'first'}: ${f.counterexample ?? f.example}`);
  }
  if (r.failures.length > 8) lines.push(`… and ${r.failures.length - 8} more signatures`);
  return lines.join('\n');
}

beforeAll(async () => {
  // No case reaches the network: the Hub's fetch is always a stub, and a fetch left out falls back to none.
  const queue = FUNCTIONS.filter((name) => Object.hasOwn(SPECS, name));
  const slots = Array.from({ length: WORKERS }, () => new Slot());
  await Promise.all(
    slots.map(async (slot) => {
      for (let name = queue.shift(); name !== undefined; name = queue.shift()) reports.set(name, await runExport(slot, name));
      await slot.close();
    }),
  );
  const file = process.env.HOSTILE_REPORT;
  if (file !== undefined && file !== '') writeFileSync(file, JSON.stringify({ seed: SEED, reports: [...reports.values()] }, null, 2));
}, 900_000);

describe('hostile inputs everywhere', () => {
  it('every function export has an argument generator, and every generator an export', () => {
    expect(FUNCTIONS.length).toBeGreaterThan(100);
    expect(FUNCTIONS.filter((name) => !Object.hasOwn(SPECS, name))).toEqual([]);
    expect(Object.keys(SPECS).filter((name) => !FUNCTIONS.includes(name))).toEqual([]);
  });

  it.each(FUNCTIONS)('%s: a VramError with paths, or a result that meets its invariants', (name) => {
    const spec = SPECS[name];
    expect(spec, `no argument generator for ${name}`).toBeDefined();
    const report = reports.get(name)!;
    const ok = report.setup === undefined && report.crash === undefined && report.failures.length === 0;
    expect(ok, `${name} (${report.cases} cases):\n${describeFailures(report)}`).toBe(true);
    expect(report.cases).toBe(spec!.numRuns);
  });

  it(`at least ${MIN_TOTAL_CASES} generated cases in all`, () => {
    const planned = FUNCTIONS.reduce((n, name) => n + (SPECS[name]?.numRuns ?? 0), 0);
    const ran = [...reports.values()].reduce((n, r) => n + r.cases, 0);
    expect(planned).toBeGreaterThanOrEqual(MIN_TOTAL_CASES);
    expect(ran).toBeGreaterThanOrEqual(MIN_TOTAL_CASES);
  });
});
