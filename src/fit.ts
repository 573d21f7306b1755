import { estimate, stepPeakAt } from './estimate.js';
import type { Estimate, EstimateOptions } from './estimate-types.js';
import { fitOptions } from './estimate-options.js';
import { show, validate } from './validate.js';
import { VramError, fail } from './errors.js';
import { gpu as gpuByName, memoryBudget, type GpuFamily } from './gpus/catalog.js';
import { runtimeLines, type RuntimeLine, type RuntimeOptions } from './memory/runtime.js';
import type { Layer } from './nn/types.js';
import { compile } from './sym/evaluate.js';
import type { Dim, SymAtom } from './sym/expr.js';

/** Options of {@link fits} and {@link maxFitting}: estimate's options plus the memory budget. */
export interface FitOptions extends EstimateOptions {
  /** A catalog GPU name (`A800-80GB`), a size (`24GB`, read as GiB) or a byte count. */
  readonly gpu: string | number;
  /** Runtime lines to add to the peak before comparing (none by default). */
  readonly runtime?: RuntimeOptions;
  /** Values of other symbols in the input, when the input has more than the one solved for. */
  readonly env?: Readonly<Record<string, number>>;
}

/** Whether the peak fits, and by how much. */
export interface FitResult {
  readonly fits: boolean;
  /** The peak plus the runtime lines asked for. */
  readonly needed: number;
  readonly budget: number;
  /** budget - needed (negative when it does not fit). */
  readonly headroom: number;
  readonly runtime: readonly RuntimeLine[];
  readonly estimate: Estimate;
}

function familyOf(value: string | number): GpuFamily {
  if (typeof value === 'string') {
    try {
      return gpuByName(value).family;
    } catch {
      return 'ampere';
    }
  }
  return 'ampere';
}

function runtimeTotal(options: FitOptions): { lines: RuntimeLine[]; total: number } {
  // Training runs matmuls on two threads (the caller's and autograd's), each with a handle.
  const handles = options.runtime?.cublasHandles ?? (options.mode === 'inference' ? 1 : 2);
  const lines = options.runtime ? runtimeLines({ ...options.runtime, cublasHandles: handles }, familyOf(options.gpu)) : [];
  return { lines, total: lines.reduce((s, l) => s + l.bytes, 0) };
}

/**
 * Whether a concrete configuration fits a GPU: the estimate's peak plus any runtime
 * lines asked for, against the budget.
 *
 * @example
 * ```ts
 * import { fits, mobilenetV3Small } from 'vram-ts';
 * const r = fits(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672], gpu: 'RTX-4060' });
 * console.log(r.fits); // true
 * ```
 */
export function fits(model: Layer, options: FitOptions): FitResult {
  validate(options, fitOptions);
  const { gpu: _gpu, runtime: _runtime, env: _env, ...estimateOnly } = options;
  const result = estimate(model, { ...estimateOnly, timeline: options.timeline ?? false });
  if (typeof result.bytes.peak !== 'number')
    fail('symbolic-input', 'fits needs a concrete input; use maxFitting to solve for a dimension', { path: ['input'] });
  const budget = memoryBudget(options.gpu);
  const { lines, total } = runtimeTotal(options);
  const needed = result.bytes.peak + total;
  return { fits: needed <= budget, needed, budget, headroom: budget - needed, runtime: lines, estimate: result };
}

function symbolNamed(dim: Dim, name: string): SymAtom | undefined {
  if (typeof dim === 'number') return undefined;
  for (const term of dim.terms) for (const f of term.factors) if (f.atom.kind === 'sym' && f.atom.name === name) return f.atom;
  return undefined;
}

/**
 * The largest value of one symbolic input dimension (`B`, `H`, `W`, `S`, …) whose peak
 * fits the budget: the returned value fits and the next one does not. Solved on the
 * symbolic estimate (built once): the peak is monotone in every dimension, so an
 * exponential then binary search over its exact values finds the boundary. Returns 0
 * when even the smallest valid value does not fit.
 *
 * @example
 * ```ts
 * import { maxFitting, mobilenetV3Small, sym } from 'vram-ts';
 * const B = maxFitting(mobilenetV3Small({ numClasses: 3 }), 'B', { input: [sym('B'), 3, 224, 224], gpu: '8GB' });
 * console.log(B > 100); // true
 * ```
 */
export function maxFitting(model: Layer, name: string, options: FitOptions): number {
  validate(options, fitOptions);
  if (typeof name !== 'string') fail('bad-option', 'the symbol to solve for is a name', { path: ['name'], expected: 'string', received: show(name) });
  const inputs = Array.isArray(options.input) ? (options.input as readonly unknown[]) : [options.input];
  const dims = inputs.flatMap((x) =>
    typeof x === 'object' && x !== null && 'shape' in (x as object) ? [...(x as { shape: readonly Dim[] }).shape] : [x as Dim],
  );
  const atom = dims.map((d) => symbolNamed(d, name)).find((a) => a !== undefined);
  if (atom === undefined) fail('bad-option', `the input has no symbol ${name} to solve for`, { path: ['input'], expected: `a dimension sym('${name}')` });
  const { gpu: _gpu, runtime: _runtime, env: _env, ...estimateOnly } = options;
  const result = estimate(model, { ...estimateOnly, timeline: false, peakExpression: false });
  const budget = memoryBudget(options.gpu);
  const { total: runtime } = runtimeTotal(options);
  // The symbolic step, replayed at each probe (exact, and far cheaper than a max of expressions).
  // The steady step (the first one never peaks higher) or the inference forward.
  const programs = [result.steps.steady, result.steps.inference].filter((s) => s !== undefined).map(stepPeakAt);
  const peak = (env: Readonly<Record<string, number>>) => Math.max(...programs.map((f) => f(env)));
  const constraints = result.constraints.map(compile);
  const env = options.env ?? {};
  const step = atom.multipleOf ?? 1;
  const lowest = Math.ceil(atom.min / step) * step;
  const highest = atom.max === undefined ? Number.MAX_SAFE_INTEGER : Math.floor(atom.max / step) * step;
  const at = (value: number) => ({ ...env, [name]: value });
  const valid = (value: number) => constraints.every((c) => c(at(value)) >= 1);
  const fitsAt = (value: number): boolean => {
    // A value whose shapes do not exist (GPT-2 past n_positions) does not fit either.
    if (!valid(value)) return false;
    try {
      return peak(at(value)) + runtime <= budget;
    } catch (error) {
      // Past 2^53 bytes nothing fits.
      if (error instanceof VramError && error.issues[0]?.code === 'overflow') return false;
      throw error;
    }
  };
  // The smallest value whose shapes exist (constraints are monotone too).
  let low = lowest;
  if (!valid(low)) {
    let hi = low;
    while (!valid(hi)) {
      if (hi >= highest) return 0;
      hi = Math.min(highest, Math.max(hi * 2, hi + step));
    }
    let lo = low;
    while (hi - lo > step) {
      const mid = lo + Math.floor((hi - lo) / (2 * step)) * step;
      if (valid(mid)) hi = mid;
      else lo = mid;
    }
    low = hi;
  }
  if (!fitsAt(low)) return 0;
  let good = low;
  let bad = -1;
  let probe = low;
  while (bad < 0) {
    const next = Math.min(highest, Math.max(probe * 2, probe + step));
    if (next === probe) return good;
    if (fitsAt(next)) {
      good = next;
      probe = next;
    } else bad = next;
  }
  while (bad - good > step) {
    const mid = good + Math.floor((bad - good) / (2 * step)) * step;
    if (fitsAt(mid)) good = mid;
    else bad = mid;
  }
  return good;
}
