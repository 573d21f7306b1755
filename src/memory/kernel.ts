import type { KernelStep } from '../ops/types.js';
import type { Ledger, Phase } from './ledger.js';

/** What a kernel makes, by the slot its steps name: outputs, input and parameter gradients, the release of the incoming gradient. */
export type Results = Partial<Record<'outputs' | 'inputGrads' | 'paramGrads' | 'incomingGrads' | 'saved', () => void>> & {
  /** Forward: input k let go now if this op is its last use. */
  readonly releaseInput?: (k: number) => void;
};

const RESULT_ORDER = ['outputs', 'inputGrads', 'paramGrads'] as const;

/** Whether a kernel only makes its results (no temporaries, no local high to record). */
export function resultsOnly(steps: readonly KernelStep[]): boolean {
  return steps.length <= 2 && (steps.length < 1 || 'results' in steps[0]!) && (steps.length < 2 || 'results' in steps[1]!);
}

/** Runs a kernel's steps; records the live total at each local high (before a free, and at the end). */
export function runKernel(ledger: Ledger, steps: readonly KernelStep[], phase: Phase, label: string, results: Results): void {
  // Most ops only make their results: no temporaries to track, no local high to record.
  if (resultsOnly(steps)) {
    results.outputs?.();
    results.inputGrads?.();
    results.paramGrads?.();
    return;
  }
  const temps = new Map<string, number>();
  const done = new Set<string>();
  let grown = false;
  const mark = () => {
    if (grown) ledger.record(phase, `${label} (kernel)`);
    grown = false;
  };
  for (const step of steps) {
    if ('alloc' in step) {
      temps.set(step.alloc, ledger.alloc(step.bytes, 'temporaries'));
      grown = true;
    } else if ('free' in step) {
      mark();
      const block = temps.get(step.free);
      if (block !== undefined) ledger.release(block);
      temps.delete(step.free);
    } else if ('releaseInput' in step) {
      mark();
      results.releaseInput?.(step.releaseInput);
    } else if ('release' in step) {
      mark();
      results[step.release]?.();
      done.add(step.release);
    } else {
      results[step.results]?.();
      done.add(step.results);
      grown = true;
    }
  }
  // Results no step placed run at the end; incoming gradients stay with the caller.
  for (const key of RESULT_ORDER) if (!done.has(key)) results[key]?.();
  mark();
  for (const block of temps.values()) ledger.release(block);
}
