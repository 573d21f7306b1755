import { VramError, fail } from '../errors.js';
import type { Layer, TensorRef } from '../nn/types.js';
import type { OpContext } from '../ops/types.js';
import { bounds } from '../sym/bounds.js';
import type { Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import type { DType } from '../tensor/dtype.js';
import type { TensorSpec } from '../tensor/spec.js';
import type { IROp, IRStorage, IRTensor, TensorRole } from './ir.js';
import type { TraceOptions } from './options.js';
import { show } from '../validate.js';

// The tracer's state and its module tree: modules opened and closed, checkpoint regions,
// tensors and storages made, paths for errors.

/** A module while it is traced (its IR record once closed). */
export interface MutableModule {
  index: number;
  name: string;
  path: string[];
  /** `path.join('.')`, kept for parameter keys. */
  key: string;
  className: string;
  isSequential: boolean;
  parent: number | null;
  children: number[];
  params: number[];
  buffers: number[];
  firstOp: number;
  endOp: number;
  inputs: number[];
  outputs: number[];
  finishOrder: number;
  sharedWith: number | null;
  /** Whether it opened a checkpoint region (by its path, or as the first of a group). */
  regionRole?: 'whole' | 'group';
  /** Storages its forward keeps referenced until it returns. */
  held: number[];
  childOrder?: readonly string[];
  idleChildren?: readonly string[];
  functionalChildren?: readonly string[];
}

/** The tracer's state for one trace: what it made so far, the open modules and region, the settings. */
export interface State {
  readonly options: TraceOptions;
  readonly tensors: IRTensor[];
  readonly storages: IRStorage[];
  readonly ops: IROp[];
  readonly modules: MutableModule[];
  readonly constraints: Map<string, Dim>;
  readonly stack: number[];
  /** Layer objects already run: their first module, and (op layers) the parameters it made. */
  readonly seenLayers: Map<Layer, SeenLayer>;
  finished: number;
  stage: 'model' | 'loss';
  /** storage → index of the first op that saved it (its path is built only for the error). */
  readonly savedBy: (number | undefined)[];
  /** param tensor id → its autocast copy (the cast weight cached for the forward). */
  readonly autocastCopies: Map<number, number>;
  /** Storages kept until the model's forward returns (autocast cache, held locals). */
  readonly holdsToEnd: Set<number>;
  /** Tensors held until an op index. */
  readonly holds: { storage: number; until: number }[];
  /** dtype for parameters created now (LoRA adapters may differ from the base). */
  adapterDtype: DType | null;
  /** Inside a LoRA layer (its own Linear modules are not adapted again). */
  adapting: boolean;
  /** LoRA layers made, and the names of the Linear/Conv1D layers seen (for the error when no target matches). */
  adapted: number;
  readonly linearNames: Set<string>;
  /** Checkpoint regions: the open one, and all. */
  region: MutableRegion | null;
  readonly regions: MutableRegion[];
  /** The op being run (for error paths), and the context every op rule gets (its dtype set per op). */
  readonly running: { owner: MutableModule; rule: string };
  readonly context: { -readonly [K in keyof OpContext]: OpContext[K] };
}

/** A checkpoint region while it is traced. */
export interface MutableRegion {
  id: number;
  firstOp: number;
  endOp: number;
  inputs: number[];
  kind: 'module' | 'selective';
}

/** A new storage of the trace; returns its id. */
export function newStorage(state: State, bytes: Dim, dtype: DType, role: TensorRole, trainable = false): number {
  const id = state.storages.length;
  state.storages.push({ id, bytes, dtype, role, trainable });
  return id;
}

/** A new tensor of the trace over a storage; returns its id. */
export function newTensor(
  state: State,
  spec: TensorSpec,
  storage: number,
  role: TensorRole,
  producer: number | null,
  requiresGrad: boolean,
  key: string | undefined,
  label: string | undefined,
): number {
  const id = state.tensors.length;
  state.tensors.push({ id, spec, storage, role, producer, requiresGrad, key, label });
  return id;
}

/** The layer-facing reference of a tensor. */
export function ref(state: State, id: number): TensorRef {
  const t = state.tensors[id]!;
  return { id, shape: t.spec.shape, dtype: t.spec.dtype };
}

/**
 * A graph callback's tensor argument: a ref this trace handed out (its id in range and its
 * shape the tensor's own), or a VramError at `where()` (built only on failure: this is the hot path).
 * A forged or stale ref would read another tensor.
 */
export function checkRef(state: State, t: unknown, where: () => readonly (string | number)[]): TensorRef {
  const given = t as Partial<TensorRef> | null;
  const id = typeof given === 'object' && given !== null ? given.id : undefined;
  const known = typeof id === 'number' && Number.isSafeInteger(id) && id >= 0 && id < state.tensors.length ? state.tensors[id]! : undefined;
  if (known === undefined || given!.shape !== known.spec.shape)
    fail('bad-tensor', 'must be a tensor of this trace (a ref the graph builder returned)', { path: where(), expected: 'TensorRef', received: show(t) });
  return given as TensorRef;
}

/** A list of refs of this trace (see {@link checkRef}), each failure at `where()` plus its index. */
export function checkRefs(state: State, refs: unknown, where: () => readonly (string | number)[]): readonly TensorRef[] {
  if (!Array.isArray(refs)) fail('bad-tensor', 'must be a list of tensors', { path: where(), expected: 'TensorRef[]', received: show(refs) });
  for (let i = 0; i < refs.length; i += 1) checkRef(state, refs[i], () => [...where(), i]);
  return refs as readonly TensorRef[];
}

/** The module being traced (the top of the stack). */
export function current(state: State): MutableModule {
  return state.modules[state.stack[state.stack.length - 1]!]!;
}

/** The path of the module being traced (empty at the root). */
export function modulePath(state: State): string[] {
  return state.stack.length === 0 ? [] : current(state).path;
}

/** Opens a child module of the current one (the root when none is open), and maybe a checkpoint region. */
export function openModule(state: State, name: string, className: string, inputs: readonly TensorRef[], isSequential = false): MutableModule {
  const parent = state.stack.length === 0 ? null : state.stack[state.stack.length - 1]!;
  const parentModule = parent === null ? null : state.modules[parent]!;
  const module: MutableModule = {
    index: state.modules.length,
    name: parent === null ? '' : name,
    path: parentModule === null ? [] : [...parentModule.path, name],
    key: parentModule === null ? '' : parentModule.key === '' ? name : `${parentModule.key}.${name}`,
    className,
    isSequential,
    parent,
    children: [],
    params: [],
    buffers: [],
    firstOp: state.ops.length,
    endOp: state.ops.length,
    inputs: inputs.map((t) => t.id),
    outputs: [],
    finishOrder: -1,
    sharedWith: null,
    held: [],
  };
  if (parent !== null) state.modules[parent]!.children.push(module.index);
  state.modules.push(module);
  state.stack.push(module.index);
  maybeStartRegion(state, module, inputs);
  return module;
}

/** Opens a checkpoint region at the next op. */
export function openRegion(state: State, inputs: readonly TensorRef[], kind: MutableRegion['kind']): void {
  const region: MutableRegion = { id: state.regions.length, firstOp: state.ops.length, endOp: state.ops.length, inputs: inputs.map((t) => t.id), kind };
  state.regions.push(region);
  state.region = region;
}

/** Closes the open region; its inputs are every tensor its ops read that was made outside it. */
export function closeRegion(state: State): void {
  const region = state.region;
  if (region === null) return;
  state.region = null;
  const inputs = new Set<number>();
  for (let i = region.firstOp; i < region.endOp; i += 1) {
    for (const id of state.ops[i]!.inputs) {
      const producer = state.tensors[id]!.producer;
      if (producer === null || producer < region.firstOp) inputs.add(id);
    }
  }
  region.inputs = [...inputs];
}

/** Whether a module just opened starts a checkpoint region (by path, or as the first of k children). */
export function maybeStartRegion(state: State, module: MutableModule, inputs: readonly TensorRef[]): void {
  const plan = state.options.checkpoint;
  if (plan === undefined || !state.options.gradEnabled || state.region !== null || module.parent === null) return;
  const parent = state.modules[module.parent]!;
  const position = parent.children.length - 1;
  const byPath = plan.modules?.includes(module.key) ?? false;
  const byGroup = plan.within !== undefined && parent.key === plan.within && position % Math.max(1, plan.every ?? 1) === 0;
  if (byPath || byGroup) {
    openRegion(state, inputs, 'module');
    module.regionRole = byPath ? 'whole' : 'group';
  }
}

/** Closes the open region when the module that ends is its last (its path, the last of a group, or the container). */
export function maybeEndRegion(state: State, module: MutableModule): void {
  const plan = state.options.checkpoint;
  if (state.region === null || plan === undefined) return;
  if (state.region.kind === 'selective') {
    closeRegion(state);
    return;
  }
  if (module.regionRole === 'whole') closeRegion(state);
  else if (module.parent !== null && state.modules[module.parent]!.key === plan.within) {
    const position = state.modules[module.parent]!.children.indexOf(module.index);
    const k = Math.max(1, plan.every ?? 1);
    if (position % k === k - 1) closeRegion(state);
  } else if (module.key === plan.within) closeRegion(state);
}

/** Closes the current module: its region, its ops, its held storages, its outputs. */
export function closeModule(state: State, module: MutableModule, outputs: readonly TensorRef[]): void {
  maybeEndRegion(state, module);
  module.endOp = state.ops.length;
  for (const storage of module.held) state.holds.push({ storage, until: state.ops.length - 1 });
  module.outputs = outputs.map((t) => t.id);
  module.finishOrder = state.finished;
  state.finished += 1;
  state.stack.pop();
}

/** The name a child gets when its layer has none: its position among the module's children. */
export function defaultName(state: State): string {
  return state.stack.length === 0 ? '' : String(current(state).children.length);
}

/** Refuses negative or never-positive dimensions; a symbol that may be below 1 becomes a constraint of the IR. */
export function checkShape(state: State, spec: TensorSpec): void {
  for (let i = 0; i < spec.shape.length; i += 1) {
    const dim = spec.shape[i]!;
    if (typeof dim === 'number') {
      if (!Number.isSafeInteger(dim) || dim < 0) {
        fail('bad-dimension', 'a dimension must be a non-negative integer', { path: runningPath(state), expected: 'integer >= 0', received: String(dim) });
      }
    } else if (bounds(dim).min < 1) {
      if (bounds(dim).max < 1) fail('bad-dimension', 'a dimension is never positive', { path: runningPath(state), expected: '>= 1', received: formatDim(dim) });
      state.constraints.set(dim.key, dim);
    }
  }
}

/** An error from inside an op rule, with the op's path put in front of paths that lack it. */
export function withPath(path: readonly (string | number)[], error: unknown): unknown {
  if (!(error instanceof VramError)) return error;
  return new VramError(error.issues.map((issue) => (issue.path.length >= path.length ? issue : { ...issue, path: [...path, ...issue.path] })));
}

/** The module path of an op already recorded, with the op's name last. */
export function opPath(state: State, index: number): string[] {
  const op = state.ops[index]!;
  return [...state.modules[op.module]!.path, op.op];
}

/** A layer object already traced: its first module, and the parameters its op made. */
export interface SeenLayer {
  readonly module: number;
  params: ReadonlyMap<string, number> | null;
}

/** The path of the op being run, with its name last: built only for an error. */
export function runningPath(state: State): string[] {
  return [...state.running.owner.path, state.running.rule];
}

/** Opens a module for a layer object; a second run of the same object is the same torch module. */
export function openShared(state: State, layer: Layer, name: string, className: string, inputs: readonly TensorRef[], isSequential: boolean): MutableModule {
  const module = openModule(state, name, className, inputs, isSequential);
  const seen = state.seenLayers.get(layer);
  if (seen === undefined) state.seenLayers.set(layer, { module: module.index, params: null });
  else module.sharedWith = seen.module;
  return module;
}

/** A layer's first output, refused when it made none. */
export function first(outputs: readonly TensorRef[], path: readonly string[]): TensorRef {
  const out = outputs[0];
  if (out === undefined) fail('no-output', 'a layer produced no tensor', { path });
  return out;
}
