import { estimate, stepPeakAt } from './estimate.js';
import type { Estimate, EstimateOptions } from './estimate-types.js';
import { fitOptions, usableOptions } from './estimate-options.js';
import { show, validate } from './validate.js';
import { VramError, fail } from './errors.js';
import { gpu as gpuByName, memoryBudget, type GpuFamily, type GpuSpec } from './gpus/catalog.js';
import type { AllocatorOom } from './memory/allocator.js';
import { concreteStep, oomAt, oomWithin, reservedAt } from './memory/reserved.js';
import { runtimeLines, type RuntimeLine, type RuntimeOptions } from './memory/runtime.js';
import type { Layer } from './nn/types.js';
import { compile } from './sym/evaluate.js';
import type { Dim, SymAtom } from './sym/expr.js';

/** Options of {@link fits} and {@link maxFitting}: estimate's options plus the memory budget. */
export interface FitOptions extends EstimateOptions {
  /**
   * A catalog GPU name (`A800-80GB`): its capacity is what PyTorch reports for it (see
   * {@link gpuCapacity}); a size (`24GB`, read as GiB) or a byte count: that capacity as given.
   */
  readonly gpu: string | number;
  /**
   * Runtime lines. With the default verdict the CUDA context and the cuBLAS workspaces are
   * always counted (the family's defaults, {@link runtimeLines}); these options change them
   * (`context: 0`, a measured figure, `cublasHandles`, a cuDNN workspace). With
   * `verdict: 'allocated'` only the lines asked for here are added.
   */
  readonly runtime?: RuntimeOptions;
  /** Values of other symbols in the input, when the input has more than the one solved for. */
  readonly env?: Readonly<Record<string, number>>;
  /**
   * What is compared with the GPU. `reserved` (default): the capacity less the runtime lines
   * against what the caching allocator reserves over the step (`bytes.reserved`, which is never
   * below the allocated peak). `allocated`: the verdict before 0.2, the allocated peak plus the
   * runtime lines asked for (none by default) against the GPU's nominal memory (nvidia-smi's total).
   */
  readonly verdict?: FitVerdict;
}

/** How {@link fits} and {@link maxFitting} decide (see {@link FitOptions.verdict}). */
export type FitVerdict = 'reserved' | 'allocated';

/** Whether the step fits, and every line of the sum. */
export interface FitResult {
  readonly fits: boolean;
  /** The comparison made. */
  readonly verdict: FitVerdict;
  /** The GPU's memory the verdict starts from: the capacity PyTorch reports (`reserved`), the nominal total (`allocated`), or the budget as given. */
  readonly capacity: number;
  /**
   * Where `capacity` comes from: `torch`, the total PyTorch reported in a cited log (gpus/catalog.ts);
   * `driver`, the driver's total where no such log is known (torch reports somewhat less);
   * `given`, a size or byte count as passed; `nominal`, the catalog's total for `verdict: 'allocated'`.
   */
  readonly capacityFrom: 'torch' | 'driver' | 'given' | 'nominal';
  /** The same as `capacity` (the name before 0.2). */
  readonly budget: number;
  /** The runtime lines taken off the capacity (CUDA context, cuBLAS workspaces, …). */
  readonly runtime: readonly RuntimeLine[];
  /** capacity − the runtime lines: what the caching allocator can reserve. */
  readonly usable: number;
  /**
   * What the caching allocator reserves over the step (`estimate.bytes.reserved`); the allocated
   * peak where there is no replay (`reservedFrom: 'allocated'`).
   */
  readonly reserved: number;
  /** Where `reserved` comes from: the allocator replay, or the allocated peak (on `cpu`, or a log past the replay's limit). */
  readonly reservedFrom: 'allocator' | 'allocated';
  /** The allocated peak (`estimate.bytes.peak`, max_memory_allocated). */
  readonly allocated: number;
  /** Reserved but not allocated at the peak (`estimate.peak.fragmentation`; 0 without a replay). */
  readonly fragmentation: number;
  /** What the verdict needs: the compared figure (`reserved`, or `allocated`) plus the runtime lines. */
  readonly needed: number;
  /** capacity − needed (= usable − the compared figure; negative when it does not fit). */
  readonly headroom: number;
  /**
   * PyTorch's OutOfMemoryError message, where the reserved figure passes the usable memory and the
   * replay within it still fails after the cached blocks are freed (absent where it fits, and for
   * `verdict: 'allocated'`). Past the usable memory the step can still run: the allocator frees
   * its cached blocks and retries before it fails, so `fits` may be true with a negative headroom.
   */
  readonly oom?: string;
  readonly estimate: Estimate;
}

/**
 * The memory of a GPU the default verdict starts from: for a catalog GPU the total PyTorch
 * reports (`torch.cuda.mem_get_info()[1]`) where the catalog records it, else the driver's total;
 * a size or a byte count as given.
 *
 * @example
 * ```ts
 * import { gpuCapacity } from 'vram-ts';
 * console.log((gpuCapacity('RTX-3090') / 2 ** 30).toFixed(2), gpuCapacity('24GB') / 2 ** 30); // 23.58 24
 * ```
 */
export function gpuCapacity(value: string | number): number {
  const spec = catalogGpu(value);
  // torch's own figure where one is published (gpus/catalog.ts cites each); else the driver's total.
  return spec === undefined ? memoryBudget(value) : (spec.capacity?.bytes ?? spec.memoryBytes);
}

/** The catalog GPU a budget names, or undefined for a size or a byte count (memoryBudget's VramError for anything else). */
function catalogGpu(value: string | number): GpuSpec | undefined {
  memoryBudget(value);
  if (typeof value !== 'string' || (value.length <= 64 && /^\s*\d+(?:\.\d+)?\s*(k|m|g|t)i?b?\s*$/i.test(value))) return undefined;
  return gpuByName(value);
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

/** Where the capacity of a budget comes from (see FitResult.capacityFrom). */
function capacityFrom(value: string | number, verdict: FitVerdict): FitResult['capacityFrom'] {
  const spec = catalogGpu(value);
  if (spec === undefined) return 'given';
  if (verdict === 'allocated') return 'nominal';
  return spec.capacity !== undefined ? 'torch' : 'driver';
}

/** Options of {@link usableMemory}: the GPU and what runs on it. */
export interface UsableMemoryOptions {
  /** A catalog GPU name, a size (`24GB`, read as GiB) or a byte count, as {@link FitOptions.gpu}. */
  readonly gpu: string | number;
  /** `training` (default: two cuBLAS handles, the caller's thread and autograd's) or `inference` (one). */
  readonly mode?: 'training' | 'inference';
  /** `cpu`: no CUDA runtime, no lines unless asked. */
  readonly device?: 'cuda' | 'cpu';
  /** The runtime lines, as {@link FitOptions.runtime}. */
  readonly runtime?: RuntimeOptions;
  /** As {@link FitOptions.verdict}: `allocated` starts from the nominal memory and counts only the lines asked for. */
  readonly verdict?: FitVerdict;
}

/** What the caching allocator of a GPU can reserve: the capacity, the runtime lines taken off it, and what is left. */
export interface UsableMemory {
  readonly verdict: FitVerdict;
  readonly capacity: number;
  readonly capacityFrom: FitResult['capacityFrom'];
  readonly runtime: readonly RuntimeLine[];
  /** capacity − the runtime lines (negative when the runtime alone does not fit). */
  readonly usable: number;
}

/**
 * The memory of a GPU the fit verdict has for the caching allocator: the capacity PyTorch reports
 * (see {@link gpuCapacity}), less the CUDA context and the cuBLAS workspaces (two handles in
 * training, one in inference: {@link runtimeLines}), each line with its source. {@link fits} and
 * the trainers' verdicts start from it.
 *
 * @example
 * ```ts
 * import { usableMemory } from 'vram-ts';
 * const u = usableMemory({ gpu: 'RTX-3090' });
 * console.log(u.runtime.map((l) => l.label).length, u.usable < u.capacity); // 2 true
 * ```
 */
export function usableMemory(options: UsableMemoryOptions): UsableMemory {
  validate(options, usableOptions);
  const verdict = options.verdict ?? 'reserved';
  // Training runs matmuls on two threads (the caller's and autograd's), each with a handle.
  const handles = options.runtime?.cublasHandles ?? (options.mode === 'inference' ? 1 : 2);
  // On cpu there is no CUDA runtime to count unless asked.
  const asked = verdict === 'allocated' || options.device === 'cpu' ? options.runtime : { context: true, cublas: true, ...options.runtime };
  const runtime = asked ? runtimeLines({ ...asked, cublasHandles: handles }, familyOf(options.gpu)) : [];
  const capacity = verdict === 'allocated' ? memoryBudget(options.gpu) : gpuCapacity(options.gpu);
  const total = runtime.reduce((s, l) => s + l.bytes, 0);
  if (!Number.isSafeInteger(total)) fail('overflow', 'the runtime lines together are past 2^53 bytes', { path: ['runtime'] });
  return { verdict, capacity, capacityFrom: capacityFrom(options.gpu, verdict), runtime, usable: capacity - total };
}

function budgetOf(options: FitOptions): { verdict: FitVerdict; capacity: number; lines: readonly RuntimeLine[]; total: number } {
  const u = usableMemory({
    gpu: options.gpu,
    ...(options.mode === 'inference' ? { mode: 'inference' } : {}),
    ...(options.device === 'cpu' ? { device: 'cpu' } : {}),
    ...(options.runtime !== undefined ? { runtime: options.runtime } : {}),
    ...(options.verdict !== undefined ? { verdict: options.verdict } : {}),
  });
  return { verdict: u.verdict, capacity: u.capacity, lines: u.runtime, total: u.capacity - u.usable };
}

/**
 * Whether a concrete configuration fits a GPU. By default: the capacity PyTorch reports for
 * the GPU, less the CUDA context and the cuBLAS workspaces (one handle in inference, two in
 * training: see {@link runtimeLines}), against what the caching allocator reserves over the step
 * (`bytes.reserved`: the step's allocations replayed through {@link replayAllocator}). On `cpu`
 * there is no caching allocator and no CUDA runtime: the allocated peak against the capacity,
 * runtime lines only where asked. `verdict: 'allocated'` keeps the comparison of before 0.2:
 * the allocated peak plus the runtime lines asked for against the nominal memory. Every line is
 * in the result.
 *
 * @example
 * ```ts
 * import { fits, mobilenetV3Small } from 'vram-ts';
 * const r = fits(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672], gpu: 'RTX-4060' });
 * console.log(r.fits, r.reserved >= r.allocated); // true true
 * ```
 */
export function fits(model: Layer, options: FitOptions): FitResult {
  validate(options, fitOptions);
  const { gpu: _gpu, runtime: _runtime, env: _env, verdict: _verdict, ...estimateOnly } = options;
  const result = estimate(model, { ...estimateOnly, timeline: options.timeline ?? false });
  if (typeof result.bytes.peak !== 'number')
    fail('symbolic-input', 'fits needs a concrete input; use maxFitting to solve for a dimension', { path: ['input'] });
  const { verdict, capacity, lines, total } = budgetOf(options);
  const allocated = result.bytes.peak;
  const replayed = verdict === 'reserved' ? result.bytes.reserved : undefined;
  const reserved = replayed ?? allocated;
  const needed = (verdict === 'reserved' ? reserved : allocated) + total;
  // Past the usable memory, PyTorch first frees its cached blocks and retries: it fails only if that fails too.
  const oom = replayed !== undefined && needed > capacity ? oomOf(result, capacity - total, capacity) : undefined;
  return {
    fits: replayed !== undefined ? capacity - total >= 0 && (needed <= capacity || oom === undefined) : needed <= capacity,
    ...(oom !== undefined ? { oom: oom.message } : {}),
    verdict,
    capacity,
    capacityFrom: capacityFrom(options.gpu, verdict),
    budget: capacity,
    runtime: lines,
    usable: capacity - total,
    reserved,
    reservedFrom: replayed === undefined ? 'allocated' : 'allocator',
    allocated,
    fragmentation: replayed === undefined ? 0 : (result.peak.fragmentation ?? 0),
    needed,
    headroom: capacity - needed,
    estimate: result,
  };
}

/** The OOM the caching allocator raises for the estimate's two steps within `usable` bytes, or undefined when they run. */
function oomOf(result: Estimate, usable: number, capacity: number): AllocatorOom | undefined {
  const main = result.steps.steady ?? result.steps.inference;
  if (main === undefined || usable < 0) return undefined;
  const first = result.steps.first ?? main;
  return oomWithin(concreteStep(first.program), concreteStep(main.program), usable, capacity);
}

function symbolNamed(dim: Dim, name: string): SymAtom | undefined {
  if (typeof dim === 'number') return undefined;
  for (const term of dim.terms) for (const f of term.factors) if (f.atom.kind === 'sym' && f.atom.name === name) return f.atom;
  return undefined;
}

/**
 * The largest value of one symbolic input dimension (`B`, `H`, `W`, `S`, …) that fits, with
 * {@link fits}'s verdict: the returned value fits and the next one does not. Solved on the
 * symbolic estimate (built once): the allocated peak is monotone in every dimension, so an
 * exponential then binary search over its exact values finds the largest value whose allocated
 * peak fits; with the default verdict the step's allocations are then replayed through the
 * caching allocator at that value and, where its reserved bytes do not fit, at smaller ones
 * (an exponential then binary search down: reserved is never below allocated). Returns 0 when
 * even the smallest valid value does not fit.
 *
 * @example
 * ```ts
 * import { maxFitting, mobilenetV3Small, sym } from 'vram-ts';
 * const B = maxFitting(mobilenetV3Small({ numClasses: 3 }), 'B', { input: [sym('B'), 3, 224, 224], gpu: '8GB' });
 * console.log(B > 100); // true
 * ```
 */
export function maxFitting(model: Layer, name: string, options: FitOptions): number {
  return maxFittingUpTo(model, name, options, Number.POSITIVE_INFINITY);
}

/**
 * {@link maxFitting} searching no higher than `upTo` (the symbol's own bound, if lower, still
 * holds): a search over many ranges (plan's micro-batches, one per rank's share) traces the
 * symbol once with the widest bound, and each range searches exactly as a symbol bounded by it
 * would (the same probes; the program of either trace is exact at every value of its range).
 */
export function maxFittingUpTo(model: Layer, name: string, options: FitOptions, upTo: number): number {
  validate(options, fitOptions);
  if (typeof name !== 'string') fail('bad-option', 'the symbol to solve for is a name', { path: ['name'], expected: 'string', received: show(name) });
  const inputs = Array.isArray(options.input) ? (options.input as readonly unknown[]) : [options.input];
  const dims = inputs.flatMap((x) =>
    typeof x === 'object' && x !== null && 'shape' in (x as object) ? [...(x as { shape: readonly Dim[] }).shape] : [x as Dim],
  );
  const atom = dims.map((d) => symbolNamed(d, name)).find((a) => a !== undefined);
  if (atom === undefined) fail('bad-option', `the input has no symbol ${name} to solve for`, { path: ['input'], expected: `a dimension sym('${name}')` });
  const { gpu: _gpu, runtime: _runtime, env: _env, verdict: _verdict, ...estimateOnly } = options;
  const result = estimate(model, { ...estimateOnly, timeline: false, peakExpression: false });
  const { verdict, capacity, total: runtime } = budgetOf(options);
  // The symbolic step, replayed at each probe (exact, and far cheaper than a max of expressions).
  // The steady step (the first one never peaks higher) or the inference forward.
  const programs = [result.steps.steady, result.steps.inference].filter((s) => s !== undefined).map(stepPeakAt);
  const peak = (env: Readonly<Record<string, number>>) => Math.max(...programs.map((f) => f(env)));
  const constraints = result.constraints.map(compile);
  const env = options.env ?? {};
  const step = atom.multipleOf ?? 1;
  const lowest = Math.ceil(atom.min / step) * step;
  const highest =
    atom.max === undefined && upTo === Number.POSITIVE_INFINITY ? Number.MAX_SAFE_INTEGER : Math.floor(Math.min(atom.max ?? upTo, upTo) / step) * step;
  const at = (value: number) => ({ ...env, [name]: value });
  const valid = (value: number) => constraints.every((c) => c(at(value)) >= 1);
  const within = (bytes: () => number): boolean => {
    try {
      return bytes() + runtime <= capacity;
    } catch (error) {
      // Past 2^53 bytes nothing fits.
      if (error instanceof VramError && error.issues[0]?.code === 'overflow') return false;
      throw error;
    }
  };
  // A value whose shapes do not exist (GPT-2 past n_positions) does not fit either.
  const allocatedFits = (value: number): boolean => valid(value) && within(() => peak(at(value)));
  const floor = smallestValid(lowest, highest, step, valid);
  if (floor === undefined) return 0;
  const good = largest(floor, highest, step, allocatedFits);
  if (good === 0 || verdict === 'allocated' || options.device === 'cpu') return good;
  // The full model's programs (a reduced model's traced whole once), replayed at each value tried.
  const main = (result.steps.steady ?? result.steps.inference)!;
  const firstProgram = (result.steps.first ?? main).program;
  const reserved = reservedAt(firstProgram, main.program);
  const oom = oomAt(firstProgram, main.program);
  // As fits decides: within the usable memory, or past it but placed once the cached blocks are freed.
  const reservedFits = (value: number): boolean => {
    const bytes = reserved(at(value));
    if (within(() => bytes ?? peak(at(value)))) return true;
    return bytes !== undefined && capacity - runtime >= 0 && oom(at(value), capacity - runtime) === undefined;
  };
  if (reservedFits(good)) return good;
  // Down from the allocated answer (every value from `floor` up is valid): reserved >= allocated,
  // so good + step does not fit either.
  let bad = good;
  let gap = step;
  let low = Math.max(floor, bad - gap);
  while (low > floor && !reservedFits(low)) {
    bad = low;
    gap *= 2;
    low = Math.max(floor, bad - gap);
  }
  if (low === floor && !reservedFits(floor)) return 0;
  while (bad - low > step) {
    const mid = low + Math.floor((bad - low) / (2 * step)) * step;
    if (reservedFits(mid)) low = mid;
    else bad = mid;
  }
  return low;
}

/** The smallest multiple of `step` in [lowest, highest] whose shapes exist (constraints are monotone), or undefined. */
function smallestValid(lowest: number, highest: number, step: number, valid: (v: number) => boolean): number | undefined {
  if (valid(lowest)) return lowest;
  let hi = lowest;
  while (!valid(hi)) {
    if (hi >= highest) return undefined;
    hi = Math.min(highest, Math.max(hi * 2, hi + step));
  }
  let lo = lowest;
  while (hi - lo > step) {
    const mid = lo + Math.floor((hi - lo) / (2 * step)) * step;
    if (valid(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** The largest multiple of `step` in [low, highest] for which `fitsAt` holds (0 when `low` does not): an exponential then binary search. */
function largest(low: number, highest: number, step: number, fitsAt: (v: number) => boolean): number {
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
