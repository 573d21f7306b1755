import { fail } from '../errors.js';
import type { OpLayer, TensorRef } from '../nn/types.js';
import { AUTOCAST_POLICY } from '../ops/autocast.js';
import { castOp } from '../ops/cast.js';
import type { KernelStep, OpResult, OpRule, OwnedTensor, SavedRef } from '../ops/types.js';
import type { Dim } from '../sym/expr.js';
import { mul } from '../sym/ops.js';
import { isFloating, type DType } from '../tensor/dtype.js';
import { specBytes, tensor, type TensorSpec } from '../tensor/spec.js';
import type { IROp, IRTensor } from './ir.js';
import {
  checkShape,
  closeModule,
  closeRegion,
  current,
  newStorage,
  newTensor,
  opPath,
  openRegion,
  openShared,
  runningPath,
  withPath,
  type SeenLayer,
  type State,
} from './state.js';

/**
 * The parameters or buffers an op owns, by name: new tensors in the module, or the ones a
 * shared layer made the first time, or the weight a tied one names.
 */
function ownedIds(state: State, list: readonly OwnedTensor[] | undefined, role: 'param' | 'buffer', reuse: SeenLayer | undefined): ReadonlyMap<string, number> {
  // Most ops own nothing: skip the Map for them.
  if (list === undefined || list.length === 0) return NO_IDS;
  const { options } = state;
  const owner = state.running.owner;
  const ids = new Map<string, number>();
  for (const owned of list) {
    const key = owner.key === '' ? owned.name : `${owner.key}.${owned.name}`;
    const shared = role === 'param' ? reuse?.params?.get(owned.name) : undefined;
    if (shared !== undefined) {
      ids.set(owned.name, shared);
      owner.params.push(shared);
      continue;
    }
    if (owned.tiedTo !== undefined) {
      // Ties are rare (an LM head tied to the embedding): a scan beats indexing every parameter.
      const tied = state.tensors.find((t) => t.role === 'param' && t.key === owned.tiedTo)?.id;
      if (tied === undefined) fail('unknown-tie', `no parameter ${owned.tiedTo} to tie ${key} to`, { path: runningPath(state), received: owned.tiedTo });
      ids.set(owned.name, tied);
      if (role === 'param') owner.params.push(tied);
      continue;
    }
    checkShape(state, owned.spec);
    // Integer and packed parameters (quantized weights, int8 tables) never get gradients.
    const trainable = role === 'param' && isFloating(owned.spec.dtype) && (options.trainable?.(key) ?? true);
    const storage = newStorage(state, specBytes(owned.storageSpec ?? owned.spec), owned.spec.dtype, role, trainable);
    const id = newTensor(state, owned.spec, storage, role, null, trainable && options.gradEnabled, key, undefined);
    if (owned.gradSpec !== undefined) state.tensors[id] = { ...state.tensors[id]!, gradSpec: owned.gradSpec };
    if (role === 'param') owner.params.push(id);
    else owner.buffers.push(id);
    ids.set(owned.name, id);
  }
  return ids;
}

/**
 * Runs one op rule in the current module: autocast casts first, then the rule on the input
 * specs, then its parameters, outputs (and their storages), what it saves for backward and
 * its record in the IR. Returns the outputs.
 */
export function runOp<A>(state: State, rule: OpRule<A>, attrs: A, given: readonly TensorRef[], reuse?: SeenLayer): TensorRef[] {
  const { options } = state;
  // `x.to(dtype)` with x's own dtype returns x itself: no op, no autograd node, so the gradients
  // of its readers add straight into x's (measured: RMSNorm's upcast of a float32 residual stream).
  if ((rule as OpRule<unknown>) === castOp && given.length === 1 && given[0]!.dtype === (attrs as { dtype?: unknown }).dtype) return [given[0]!];
  const owner = current(state);
  const policy = options.autocast && state.stage === 'model' ? AUTOCAST_POLICY[rule.name] : undefined;
  const castTo = policy === 'lower' ? options.autocast! : policy === 'fp32' ? 'float32' : null;
  // Autocast casts floating inputs to the op's dtype first (a copy, ToCopyBackward saves nothing).
  const inputs = castTo === null ? given : given.map((t) => (isFloating(t.dtype) && t.dtype !== castTo ? runOp(state, castOp, { dtype: castTo }, [t])[0]! : t));
  selectiveRegion(state, rule.name, inputs);
  // What errors and the op context name: set once no nested op (a cast) runs any more.
  state.running.owner = owner;
  state.running.rule = rule.name;
  if (rule.arity !== 'variadic' && inputs.length !== rule.arity) {
    fail('bad-arity', `${rule.name} takes ${rule.arity} input(s)`, { path: runningPath(state), expected: String(rule.arity), received: String(inputs.length) });
  }
  const ctx = state.context;
  ctx.paramDtype = state.adapterDtype ?? options.paramDtype;
  const count = inputs.length;
  const inputTensors: IRTensor[] = new Array(count);
  const inputSpecs: TensorSpec[] = new Array(count);
  const inputIds: number[] = new Array(count);
  const needsInputs: boolean[] = new Array(count);
  const anyInputNeeds = readInputs(state, inputs, inputTensors, inputSpecs, inputIds, needsInputs);
  let result: ReturnType<OpRule<A>['apply']>;
  try {
    result = rule.apply(inputSpecs, attrs, ctx);
  } catch (error) {
    throw withPath(runningPath(state), error);
  }
  if (!isOpResult(result))
    fail('bad-rule', `op rule ${rule.name} returned no op result (outputs and saves)`, { path: runningPath(state), expected: 'OpResult' });
  const index = state.ops.length;
  const params = ownedIds(state, result.params, 'param', reuse);
  const buffers = ownedIds(state, result.buffers, 'buffer', reuse);
  const extras: number[] = [];
  // Autocast runs `lower` ops on 16-bit copies of their weights: a weight that requires grad is
  // cast once and cached until the forward ends (also under no_grad); a frozen one is cast at
  // every use, kept only if the op saves it.
  const copies = policy === 'lower' ? autocastCopies(state, params, castTo!, extras) : NO_COPIES;
  if (result.alias === 'inplace' && options.gradEnabled) checkInPlace(state, rule.name, inputTensors[result.aliasInput ?? 0]!.storage);
  const paramsNeed = params !== NO_IDS && result.paramsUnused !== true && anyParamNeeds(state, params);
  const recorded = options.gradEnabled && result.paramsUnused !== true && (anyInputNeeds || paramsNeed);
  const outputs: number[] = new Array(result.outputs.length);
  const refs = makeOutputs(state, result, inputTensors, index, recorded, outputs);
  const saved = recorded
    ? savedIds(state, rule.name, result.saves({ inputs: needsInputs, params: paramsNeed }) as readonly SavedRef[], {
        index,
        inputs,
        outputs,
        params,
        copies,
        buffers,
        extras,
      })
    : NO_INDICES;
  if (reuse !== undefined && reuse.params === null) reuse.params = params;
  state.ops.push({
    index,
    op: rule.name,
    module: owner.index,
    inputs: inputIds,
    outputs,
    params: params === NO_IDS ? NO_INDICES : [...params.values()],
    buffers: buffers === NO_IDS ? NO_INDICES : [...buffers.values()],
    extras: extras.length === 0 ? NO_INDICES : extras,
    saved: saved.length === 0 ? NO_INDICES : saved,
    alias: result.alias ?? (result.copyWhen === 0 ? 'view' : null),
    recorded,
    macs: result.macs ?? NO_MACS,
    attrs,
    forwardSteps: (recorded ? undefined : result.forwardStepsUnrecorded) ?? result.forwardSteps ?? OUTPUTS_ONLY,
    backward: recorded ? backwardPlan(result, needsInputs, paramsNeed) : null,
    stage: state.stage,
    paramCopies: copies === NO_COPIES ? NO_INDICES : [...copies.values()],
    region: state.region?.id ?? null,
  });
  if (state.region !== null) state.region.endOp = state.ops.length;
  return refs;
}

/** An op layer traced as its own module (the same torch module when the layer object runs again). */
export function runOpModule(state: State, layer: OpLayer<unknown>, name: string, className: string, inputs: readonly TensorRef[]): TensorRef[] {
  const module = openShared(state, layer, name, className, inputs, false);
  const outputs = runOp(state, layer.rule, layer.attrs, inputs, state.seenLayers.get(layer)!);
  closeModule(state, module, outputs);
  return outputs;
}

/** Selective checkpointing: a run of the named ops is one region, closed by the first other op. */
function selectiveRegion(state: State, name: string, inputs: readonly TensorRef[]): void {
  const { options } = state;
  const selective = options.checkpoint?.selective?.includes(name) ?? false;
  if (selective && state.region === null && options.gradEnabled) openRegion(state, inputs, 'selective');
  if (!selective && state.region?.kind === 'selective') closeRegion(state);
}

/** Fills the op's input arrays (dense, one slot per input); returns whether any input needs a gradient. */
function readInputs(state: State, inputs: readonly TensorRef[], tensors: IRTensor[], specs: TensorSpec[], ids: number[], needs: boolean[]): boolean {
  let anyInputNeeds = false;
  for (let i = 0; i < inputs.length; i += 1) {
    const t = state.tensors[inputs[i]!.id]!;
    tensors[i] = t;
    specs[i] = t.spec;
    ids[i] = t.id;
    needs[i] = t.requiresGrad;
    if (t.requiresGrad) anyInputNeeds = true;
  }
  return anyInputNeeds;
}

/**
 * The op's parameters → their autocast copies. autocast's cache (`cached_cast`) keeps the cast of
 * a leaf that requires grad until the autocast region ends, under no_grad too; a frozen weight is
 * cast afresh at every use.
 */
function autocastCopies(state: State, params: ReadonlyMap<string, number>, castTo: DType, extras: number[]): ReadonlyMap<number, number> {
  const copies = new Map<number, number>();
  for (const id of params.values()) {
    const param = state.tensors[id]!;
    if (!isFloating(param.spec.dtype) || param.spec.dtype === castTo) continue;
    // cached_cast: only a leaf that requires grad (a frozen LoRA base weight is cast at every use, kept only where saved).
    const cached = state.storages[param.storage]!.trainable;
    let copy = cached ? state.autocastCopies.get(id) : undefined;
    if (copy === undefined) {
      const spec = tensor(param.spec.shape, castTo);
      const storage = newStorage(state, specBytes(spec), spec.dtype, 'activation');
      copy = newTensor(state, spec, storage, 'activation', state.ops.length, param.requiresGrad, undefined, undefined);
      if (cached) {
        state.autocastCopies.set(id, copy);
        state.holdsToEnd.add(storage);
      }
      extras.push(copy);
    }
    copies.set(id, copy);
  }
  return copies;
}

/** Refuses an in-place op on a storage an earlier op saved for backward, as autograd's version counter would. */
function checkInPlace(state: State, name: string, target: number): void {
  const saverOp = state.savedBy[target];
  if (saverOp !== undefined) {
    const saver = opPath(state, saverOp).join('.');
    fail(
      'inplace-on-saved',
      `${name} overwrites in place a tensor that ${saver} saved for backward; PyTorch would fail in backward ("modified by an inplace operation")`,
      { path: runningPath(state) },
    );
  }
}

function anyParamNeeds(state: State, params: ReadonlyMap<string, number>): boolean {
  let paramsNeed = false;
  for (const id of params.values()) if (state.tensors[id]!.requiresGrad) paramsNeed = true;
  return paramsNeed;
}

/** The op's output tensors (ids into `outputs`): a view or in-place result shares its input's storage, a conditional copy gets its own. */
function makeOutputs(state: State, result: OpResult, inputTensors: readonly IRTensor[], index: number, recorded: boolean, outputs: number[]): TensorRef[] {
  const nonDiff = result.nonDifferentiableOutputs ?? NO_INDICES;
  const copyWhen = result.copyWhen;
  const outputSpecs = result.outputs;
  const refs: TensorRef[] = new Array(outputSpecs.length);
  for (let i = 0; i < outputSpecs.length; i += 1) {
    const spec = outputSpecs[i]!;
    checkShape(state, spec);
    const aliased = i === 0 && (result.alias !== undefined || copyWhen === 0);
    let storage: number;
    if (aliased) storage = inputTensors[result.aliasInput ?? 0]!.storage;
    else if (i === 0 && copyWhen !== undefined && copyWhen !== 1) {
      const viewOf = inputTensors[0]!.storage;
      if (state.storages[viewOf]!.conditional !== undefined) fail('internal', 'a conditional copy of a conditional copy', { path: runningPath(state) });
      storage = newStorage(state, mul(specBytes(spec), copyWhen), spec.dtype, 'activation');
      state.storages[storage] = { ...state.storages[storage]!, conditional: { copyWhen, viewOf } };
    } else storage = newStorage(state, specBytes(spec), spec.dtype, 'activation');
    const id = newTensor(state, spec, storage, 'activation', index, recorded && !nonDiff.includes(i), undefined, undefined);
    outputs[i] = id;
    refs[i] = { id, shape: spec.shape, dtype: spec.dtype };
  }
  return refs;
}

/** What a recorded op's saved references resolve against. */
interface OpTensors {
  readonly index: number;
  readonly inputs: readonly TensorRef[];
  readonly outputs: readonly number[];
  readonly params: ReadonlyMap<string, number>;
  readonly copies: ReadonlyMap<number, number>;
  readonly buffers: ReadonlyMap<string, number>;
  /** Extra saved tensors made here are appended. */
  readonly extras: number[];
}

/** The tensor ids a recorded op saves (extras made for it), each storage marked with its first saver. */
function savedIds(state: State, name: string, items: readonly SavedRef[], op: OpTensors): number[] {
  const { index } = op;
  // A handful per op: an array with includes() is cheaper than a Set.
  const saved: number[] = [];
  for (const item of items) {
    let id: number | undefined;
    if ('input' in item) id = op.inputs[item.input]?.id;
    else if ('output' in item) id = op.outputs[item.output];
    else if ('param' in item) {
      const param = op.params.get(item.param);
      id = param === undefined ? undefined : (op.copies.get(param) ?? param);
    } else if ('buffer' in item) id = op.buffers.get(item.buffer);
    else {
      const storage = newStorage(state, specBytes(item.extra), item.extra.dtype, 'extra');
      id = newTensor(state, item.extra, storage, 'extra', index, false, undefined, item.label);
      op.extras.push(id);
    }
    if (id === undefined) fail('internal', `${name} saves a tensor it does not have`, { path: runningPath(state), received: JSON.stringify(item) });
    if (!saved.includes(id)) saved.push(id);
    const storage = state.tensors[id]!.storage;
    if (state.savedBy[storage] === undefined) state.savedBy[storage] = index;
  }
  return saved;
}

const NO_IDS: ReadonlyMap<string, number> = new Map();
const NO_MACS = (): Dim => 0;
const NO_COPIES: ReadonlyMap<number, number> = new Map();
const NO_INDICES: readonly number[] = [];
const OUTPUTS_ONLY: readonly KernelStep[] = [{ results: 'outputs' }];
const GRADS_ONLY: readonly KernelStep[] = [{ results: 'inputGrads' }, { results: 'paramGrads' }];

function backwardPlan(result: OpResult, needsInputs: readonly boolean[], paramsNeed: boolean): NonNullable<IROp['backward']> {
  const plan = result.backward?.({ inputs: needsInputs, params: paramsNeed }) ?? {};
  const inputGrads = needsInputs.map((needs, i) => (needs ? (plan.inputGrads?.[i] ?? 'new') : 'none'));
  return { inputGrads, steps: plan.steps ?? GRADS_ONLY, contiguousGradOutput: plan.contiguousGradOutput ?? false, stridedFactor: plan.stridedFactor ?? 1 };
}

/** What runOp reads of a rule's result, checked: an op rule may be a user's (opLayer in vram-ts/internals). */
function isOpResult(result: unknown): boolean {
  const r = result as Partial<OpResult> | null;
  if (typeof r !== 'object' || r === null || !Array.isArray(r.outputs) || typeof r.saves !== 'function') return false;
  for (const out of r.outputs as unknown[]) {
    const spec = out as Partial<TensorSpec> | null;
    if (typeof spec !== 'object' || spec === null || !Array.isArray(spec.shape) || typeof spec.dtype !== 'string') return false;
  }
  return (r.params === undefined || Array.isArray(r.params)) && (r.buffers === undefined || Array.isArray(r.buffers));
}
