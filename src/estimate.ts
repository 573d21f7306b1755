import { fail } from './errors.js';
import { savedBytesByOp, savedStorages } from './memory/saved.js';
import type { Layer } from './nn/types.js';
import type { Device } from './ops/types.js';
import type { Dim } from './sym/expr.js';
import { add, sum } from './sym/ops.js';
import { checkDType, type DType } from './tensor/dtype.js';
import { tensor, type TensorSpec } from './tensor/spec.js';
import type { IR } from './trace/ir.js';
import { trace } from './trace/trace.js';

/** What to estimate: the input and how the model runs. */
export interface EstimateOptions {
  /** Batch-first input shape, e.g. `[1, 3, 4000, 2672]` or `[sym('B'), 3, 224, 224]`; or tensor specs. */
  readonly input: readonly Dim[] | TensorSpec | readonly TensorSpec[];
  /** `train`: autograd records and saves for backward (default); `inference`: no_grad. */
  readonly mode?: 'train' | 'inference';
  /** model.train() or model.eval(): BatchNorm statistics and dropout (default follows `mode`). */
  readonly moduleMode?: 'train' | 'eval';
  /** dtype of parameters and of a shape-only input (default float32). */
  readonly dtype?: DType;
  /** dtype of a shape-only input when it differs from `dtype` (token ids are int64). */
  readonly inputDtype?: DType;
  /** `cuda` (default) or `cpu`: a few kernels keep different tensors. */
  readonly device?: Device;
  /** Whether the input needs a gradient (default false). */
  readonly inputRequiresGrad?: boolean;
  /** Parameter keys (or key prefixes ending at a `.` boundary) that stay frozen. */
  readonly freeze?: readonly string[];
}

/** Parameter element counts. */
export interface ParamCounts {
  readonly total: number;
  readonly trainable: number;
}

/** Bytes by category; numbers for concrete inputs, expressions for symbolic ones. */
export interface ByteCounts {
  /** Parameters, tied weights once. */
  readonly parameters: Dim;
  /** Buffers (BatchNorm running statistics). */
  readonly buffers: Dim;
  /** What autograd holds for backward after the forward (design.md's saved-bytes contract). */
  readonly activations: Dim;
  /** The input tensors. */
  readonly input: Dim;
}

/** One module of the model with its share of the figures. */
export interface ModuleRow {
  readonly path: readonly string[];
  readonly className: string;
  readonly depth: number;
  /** Parameters of the module and its children, tied ones once. */
  readonly params: number;
  /** Parameters it owns directly. */
  readonly ownParams: number;
  /** Shape of its first output, or null when it returned nothing. */
  readonly outputShape: readonly Dim[] | null;
  /** Saved bytes first saved by ops inside it. */
  readonly activations: Dim;
}

/** The estimate: plain data. */
export interface Estimate {
  readonly params: ParamCounts;
  readonly bytes: ByteCounts;
  /** Modules in tree order (pre-order), the root first. */
  readonly modules: readonly ModuleRow[];
  /** Dimensions that must stay >= 1 for the symbolic shapes to exist. */
  readonly constraints: readonly Dim[];
  /** The traced model everything above was computed from. */
  readonly ir: IR;
}

/** Normalises estimate's `input` option to tensor specs. */
export function inputSpecs(input: EstimateOptions['input'], dtype: DType): TensorSpec[] {
  if (Array.isArray(input) && input.length > 0 && typeof input[0] === 'object' && input[0] !== null && 'shape' in (input[0] as object)) {
    return (input as readonly TensorSpec[]).map((spec) => tensor(spec.shape, spec.dtype));
  }
  if (!Array.isArray(input)) {
    if (typeof input === 'object' && input !== null && 'shape' in input) return [tensor((input as TensorSpec).shape, (input as TensorSpec).dtype)];
    return fail('bad-input', 'input must be a shape array or tensor specs', { path: ['input'], received: typeof input });
  }
  if (input.length === 0) fail('bad-input', 'input shape is empty', { path: ['input'], expected: 'batch-first shape' });
  return [tensor(input as readonly Dim[], dtype)];
}

/** Whether a parameter key falls under one of the frozen prefixes. */
export function frozenBy(prefixes: readonly string[]): (key: string) => boolean {
  return (key) => !prefixes.some((prefix) => prefix === '' || key === prefix || key.startsWith(`${prefix}.`));
}

/**
 * Traces a model with estimate's options (the IR that estimate and the reports read).
 *
 * @example
 * ```ts
 * import { mobilenetV3Small, traceModel } from 'vram-ts';
 * const ir = traceModel(mobilenetV3Small(), { input: [1, 3, 224, 224] });
 * console.log(ir.ops.length > 100); // true
 * ```
 */
export function traceModel(model: Layer, options: EstimateOptions): IR {
  const mode = options.mode ?? 'train';
  if (mode !== 'train' && mode !== 'inference') fail('bad-option', 'mode must be train or inference', { path: ['mode'], received: String(mode) });
  const dtype = checkDType(options.dtype ?? 'float32', ['dtype']);
  const inputDtype = checkDType(options.inputDtype ?? dtype, ['inputDtype']);
  const moduleMode = options.moduleMode ?? (mode === 'train' ? 'train' : 'eval');
  return trace(model, {
    inputs: inputSpecs(options.input, inputDtype),
    training: moduleMode === 'train',
    gradEnabled: mode === 'train',
    device: options.device ?? 'cuda',
    paramDtype: dtype,
    ...(options.inputRequiresGrad !== undefined ? { inputRequiresGrad: options.inputRequiresGrad } : {}),
    ...(options.freeze !== undefined ? { trainable: frozenBy(options.freeze) } : {}),
  });
}

function numelOf(ir: IR, id: number): number {
  let n = 1;
  for (const d of ir.tensors[id]!.spec.shape) n *= typeof d === 'number' ? d : NaN;
  return n;
}

/** Parameters of every module and its subtree, each distinct tensor once (tied or shared weights too). */
function paramsPerModule(ir: IR): { own: number[]; total: number[] } {
  const own = ir.modules.map((m) => m.params.reduce((s, id) => s + numelOf(ir, id), 0));
  const owners = new Map<number, number>();
  let shared = false;
  for (const m of ir.modules) for (const id of m.params) {
    owners.set(id, (owners.get(id) ?? 0) + 1);
    if (owners.get(id)! > 1) shared = true;
  }
  const total = [...own];
  if (!shared) {
    // Modules are in pre-order, so children come after their parent: fold from the end.
    for (let i = ir.modules.length - 1; i >= 0; i -= 1) {
      const parent = ir.modules[i]!.parent;
      if (parent !== null) total[parent]! += total[i]!;
    }
    return { own, total };
  }
  const sets = ir.modules.map((m) => new Set(m.params));
  for (let i = ir.modules.length - 1; i >= 0; i -= 1) {
    const parent = ir.modules[i]!.parent;
    if (parent !== null) for (const id of sets[i]!) sets[parent]!.add(id);
  }
  return { own: ir.modules.map((m) => new Set(m.params)).map((set) => [...set].reduce((s, id) => s + numelOf(ir, id), 0)), total: sets.map((set) => [...set].reduce((s, id) => s + numelOf(ir, id), 0)) };
}

/**
 * Parameters, buffers, input and saved-activation bytes of a model, with per-module
 * rows. Concrete inputs give numbers; symbolic dimensions (see {@link sym}) give
 * expressions that {@link evaluate} turns into the same numbers.
 *
 * @example
 * ```ts
 * import { estimate, mobilenetV3Small } from 'vram-ts';
 * const r = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672], device: 'cpu' });
 * console.log(r.params.total, r.bytes.activations); // 1520931 3461925408
 * ```
 */
export function estimate(model: Layer, options: EstimateOptions): Estimate {
  const ir = traceModel(model, options);
  const saved = savedStorages(ir);
  const byOp = savedBytesByOp(ir, saved);
  let paramElements = 0;
  let trainable = 0;
  const paramBytes: Dim[] = [];
  const bufferBytes: Dim[] = [];
  for (const storage of ir.storages) {
    if (storage.role === 'param') paramBytes.push(storage.bytes);
    if (storage.role === 'buffer') bufferBytes.push(storage.bytes);
  }
  for (const t of ir.tensors) {
    if (t.role !== 'param') continue;
    const n = numelOf(ir, t.id);
    paramElements += n;
    if (ir.storages[t.storage]!.trainable) trainable += n;
  }
  const counts = paramsPerModule(ir);
  const modules = ir.modules.map((m): ModuleRow => {
    let activations: Dim = 0;
    for (let op = m.firstOp; op < m.endOp; op += 1) if (byOp[op] !== 0) activations = add(activations, byOp[op]!);
    const out = m.outputs[0];
    return {
      path: m.path,
      className: m.className,
      depth: m.path.length,
      params: counts.total[m.index]!,
      ownParams: counts.own[m.index]!,
      outputShape: out === undefined ? null : ir.tensors[out]!.spec.shape,
      activations,
    };
  });
  return {
    params: { total: paramElements, trainable },
    bytes: {
      parameters: sum(paramBytes),
      buffers: sum(bufferBytes),
      activations: saved.bytes,
      input: sum(ir.inputs.map((id) => ir.storages[ir.tensors[id]!.storage]!.bytes)),
    },
    modules,
    constraints: ir.constraints,
    ir,
  };
}
