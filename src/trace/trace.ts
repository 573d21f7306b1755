import { VramError, fail } from '../errors.js';
import type { BranchLayer, Layer, OpLayer, QuantizationPlan, TensorRef } from '../nn/types.js';
import type { KernelStep, OpContext, OpResult, OpRule, OwnedTensor, SavedRef } from '../ops/types.js';
import { AUTOCAST_POLICY } from '../ops/autocast.js';
import { LIMITS } from '../limits.js';
import { castRule } from '../ops/cast.js';
import { dropoutRule } from '../ops/dropout.js';
import { linearRule, type LinearAttrs } from '../ops/linear.js';
import type { QuantScheme } from '../ops/quant.js';
import { mulScalarRule } from '../ops/pointwise.js';
import { opLayer } from '../nn/op.js';
import { logSoftmaxRule, nllLossRule } from '../ops/loss.js';
import { addRule, catRule, mulRule } from '../ops/merge.js';
import { bounds } from '../sym/bounds.js';
import { isExpr, type Dim } from '../sym/expr.js';
import { mul } from '../sym/ops.js';
import { formatDim } from '../sym/format.js';
import { checkDType, isFloating, type DType } from '../tensor/dtype.js';
import { specBytes, tensor, type TensorSpec } from '../tensor/spec.js';
import type { IR, IRModule, IROp, IRStorage, IRTensor, TensorRole, TraceSettings } from './ir.js';

/** How to trace: the settings of {@link IR} plus the input and which parameters train. */
export interface TraceOptions extends TraceSettings {
  readonly inputs: readonly TensorSpec[];
  /** Whether the inputs themselves need gradients (default false: data); per input, or for all. */
  readonly inputRequiresGrad?: boolean | readonly boolean[];
  /** Whether the parameter with this key trains (default: all). */
  readonly trainable?: (key: string) => boolean;
  /**
   * The loss the training step computes on the model's output: `cross_entropy` over
   * classes (dim 1) against int64 targets. Skipped when the model already returns a
   * scalar loss, or when autograd is off.
   */
  readonly loss?: 'cross_entropy' | 'none';
  /** torch.autocast dtype for the forward (mixed precision), or none. */
  readonly autocast?: DType | null;
  /** Which modules run under activation checkpointing, and which ops are recomputed. */
  readonly checkpoint?: CheckpointPlan;
  /** LoRA adapters on Linear layers (PEFT), optionally over a 4-bit base (QLoRA). */
  readonly lora?: LoraPlan;
  /** Which Linear/Conv1D layers are stored quantized, and how (a `quantization_config`, or QLoRA's 4-bit base). */
  readonly quantize?: QuantizationPlan;
}



/** PEFT LoRA: adapters lora_A [r, in] and lora_B [out, r] beside frozen Linear layers. */
export interface LoraPlan {
  readonly rank: number;
  /**
   * Module names adapted (estimate's default: PEFT's for the model family — q_proj and v_proj
   * for Llama/Qwen2/Mistral, c_attn for GPT-2 — else q_proj, k_proj, v_proj, o_proj);
   * `'all-linear'` as PEFT defines it: every `nn.Linear` and `Conv1D` (bitsandbytes' quantized
   * Linear4bit/Linear8bitLt included, GPTQ/AWQ QuantLinear not) except the output embedding.
   */
  readonly targets?: readonly string[] | 'all-linear';
  /** lora_dropout (default 0: PEFT uses nn.Identity). */
  readonly dropout?: number;
  /**
   * QLoRA: the model is loaded in bitsandbytes 4-bit (NF4, double quantisation), which
   * quantizes every Linear but the output embedding, whatever the adapters target.
   */
  readonly quantizeBase?: boolean;
  /** dtype of the adapters (PEFT's autocast_adapter_dtype keeps them in float32 over a 16-bit base). */
  readonly adapterDtype?: DType;
}

const ATTENTION_PROJECTIONS = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];

/** Activation checkpointing: module paths, groups of k children of a container, or op names. */
export interface CheckpointPlan {
  /** Module paths (`features.3`, `model.layers.0`) each checkpointed as one region. */
  readonly modules?: readonly string[];
  /** Checkpoint the children of this container (path) in runs of `every` consecutive blocks. */
  readonly within?: string;
  readonly every?: number;
  /** Op names (`matmul`, `softmax`, `dropout`) whose runs inside one module are recomputed (selective). */
  readonly selective?: readonly string[];
}

interface MutableModule {
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

interface State {
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

interface MutableRegion {
  id: number;
  firstOp: number;
  endOp: number;
  inputs: number[];
  kind: 'module' | 'selective';
}

function newStorage(state: State, bytes: Dim, dtype: DType, role: TensorRole, trainable = false): number {
  const id = state.storages.length;
  state.storages.push({ id, bytes, dtype, role, trainable });
  return id;
}

function newTensor(state: State, spec: TensorSpec, storage: number, role: TensorRole, producer: number | null, requiresGrad: boolean, key: string | undefined, label: string | undefined): number {
  const id = state.tensors.length;
  state.tensors.push({ id, spec, storage, role, producer, requiresGrad, key, label });
  return id;
}

function ref(state: State, id: number): TensorRef {
  const t = state.tensors[id]!;
  return { id, shape: t.spec.shape, dtype: t.spec.dtype };
}

function current(state: State): MutableModule {
  return state.modules[state.stack[state.stack.length - 1]!]!;
}

function modulePath(state: State): string[] {
  return state.stack.length === 0 ? [] : current(state).path;
}

function openModule(state: State, name: string, className: string, inputs: readonly TensorRef[], isSequential = false): MutableModule {
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

function openRegion(state: State, inputs: readonly TensorRef[], kind: MutableRegion['kind']): void {
  const region: MutableRegion = { id: state.regions.length, firstOp: state.ops.length, endOp: state.ops.length, inputs: inputs.map((t) => t.id), kind };
  state.regions.push(region);
  state.region = region;
}

/** Closes the open region; its inputs are every tensor its ops read that was made outside it. */
function closeRegion(state: State): void {
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
function maybeStartRegion(state: State, module: MutableModule, inputs: readonly TensorRef[]): void {
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

function maybeEndRegion(state: State, module: MutableModule): void {
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

function closeModule(state: State, module: MutableModule, outputs: readonly TensorRef[]): void {
  maybeEndRegion(state, module);
  module.endOp = state.ops.length;
  for (const storage of module.held) state.holds.push({ storage, until: state.ops.length - 1 });
  module.outputs = outputs.map((t) => t.id);
  module.finishOrder = state.finished;
  state.finished += 1;
  state.stack.pop();
}

/** The name a child gets when its layer has none: its position among the module's children. */
function defaultName(state: State): string {
  return state.stack.length === 0 ? '' : String(current(state).children.length);
}

function checkShape(state: State, spec: TensorSpec): void {
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
function withPath(path: readonly (string | number)[], error: unknown): unknown {
  if (!(error instanceof VramError)) return error;
  return new VramError(error.issues.map((issue) => (issue.path.length >= path.length ? issue : { ...issue, path: [...path, ...issue.path] })));
}

/** The module path of an op already recorded, with the op's name last. */
function opPath(state: State, index: number): string[] {
  const op = state.ops[index]!;
  return [...state.modules[op.module]!.path, op.op];
}

interface SeenLayer {
  readonly module: number;
  params: ReadonlyMap<string, number> | null;
}

/** The path of the op being run, with its name last: built only for an error. */
function runningPath(state: State): string[] {
  return [...state.running.owner.path, state.running.rule];
}

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

function runOp<A>(state: State, rule: OpRule<A>, attrs: A, given: readonly TensorRef[], reuse?: SeenLayer): TensorRef[] {
  const { options } = state;
  const owner = current(state);
  const policy = options.autocast && state.stage === 'model' ? AUTOCAST_POLICY[rule.name] : undefined;
  const castTo = policy === 'lower' ? options.autocast! : policy === 'fp32' ? 'float32' : null;
  // Autocast casts floating inputs to the op's dtype first (a copy, ToCopyBackward saves nothing).
  const inputs = castTo === null ? given : given.map((t) => (isFloating(t.dtype) && t.dtype !== castTo ? runOp(state, castRule, { dtype: castTo }, [t])[0]! : t));
  const selective = options.checkpoint?.selective?.includes(rule.name) ?? false;
  if (selective && state.region === null && options.gradEnabled) openRegion(state, inputs, 'selective');
  if (!selective && state.region?.kind === 'selective') closeRegion(state);
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
  let anyInputNeeds = false;
  for (let i = 0; i < count; i += 1) {
    const t = state.tensors[inputs[i]!.id]!;
    inputTensors[i] = t;
    inputSpecs[i] = t.spec;
    inputIds[i] = t.id;
    needsInputs[i] = t.requiresGrad;
    if (t.requiresGrad) anyInputNeeds = true;
  }
  let result: ReturnType<OpRule<A>['apply']>;
  try {
    result = rule.apply(inputSpecs, attrs, ctx);
  } catch (error) {
    throw withPath(runningPath(state), error);
  }
  const index = state.ops.length;
  const params = ownedIds(state, result.params, 'param', reuse);
  const buffers = ownedIds(state, result.buffers, 'buffer', reuse);
  // Autocast runs `lower` ops on 16-bit copies of their weights, cached until the forward ends.
  const copies = policy === 'lower' && options.gradEnabled ? new Map<number, number>() : NO_COPIES;
  const extras: number[] = [];
  if (copies !== NO_COPIES) {
    for (const id of params.values()) {
      const param = state.tensors[id]!;
      if (!isFloating(param.spec.dtype) || param.spec.dtype === castTo) continue;
      let copy = state.autocastCopies.get(id);
      if (copy === undefined) {
        const spec = tensor(param.spec.shape, castTo!);
        const storage = newStorage(state, specBytes(spec), spec.dtype, 'activation');
        copy = newTensor(state, spec, storage, 'activation', state.ops.length, param.requiresGrad, undefined, undefined);
        state.autocastCopies.set(id, copy);
        state.holdsToEnd.add(storage);
        extras.push(copy);
      }
      (copies as Map<number, number>).set(id, copy);
    }
  }

  if (result.alias === 'inplace' && options.gradEnabled) {
    const target = inputTensors[0]!.storage;
    const saverOp = state.savedBy[target];
    if (saverOp !== undefined) {
      const saver = opPath(state, saverOp).join('.');
      fail('inplace-on-saved', `${rule.name} overwrites in place a tensor that ${saver} saved for backward; PyTorch would fail in backward ("modified by an inplace operation")`, { path: runningPath(state) });
    }
  }
  let paramsNeed = false;
  if (params !== NO_IDS) for (const id of params.values()) if (state.tensors[id]!.requiresGrad) paramsNeed = true;
  const recorded = options.gradEnabled && (anyInputNeeds || paramsNeed);
  const nonDiff = result.nonDifferentiableOutputs ?? NO_INDICES;
  const copyWhen = result.copyWhen;
  const outputSpecs = result.outputs;
  const outputs: number[] = new Array(outputSpecs.length);
  const refs: TensorRef[] = new Array(outputSpecs.length);
  for (let i = 0; i < outputSpecs.length; i += 1) {
    const spec = outputSpecs[i]!;
    checkShape(state, spec);
    const aliased = i === 0 && (result.alias !== undefined || copyWhen === 0);
    let storage: number;
    if (aliased) storage = inputTensors[0]!.storage;
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

  // A handful per op: an array with includes() is cheaper than a Set.
  const saved: number[] = [];
  if (recorded) {
    for (const item of result.saves({ inputs: needsInputs, params: paramsNeed }) as readonly SavedRef[]) {
      let id: number | undefined;
      if ('input' in item) id = inputs[item.input]?.id;
      else if ('output' in item) id = outputs[item.output];
      else if ('param' in item) {
        const param = params.get(item.param);
        id = param === undefined ? undefined : copies.get(param) ?? param;
      }
      else if ('buffer' in item) id = buffers.get(item.buffer);
      else {
        const storage = newStorage(state, specBytes(item.extra), item.extra.dtype, 'extra');
        id = newTensor(state, item.extra, storage, 'extra', index, false, undefined, item.label);
        extras.push(id);
      }
      if (id === undefined) fail('internal', `${rule.name} saves a tensor it does not have`, { path: runningPath(state), received: JSON.stringify(item) });
      if (!saved.includes(id)) saved.push(id);
      const storage = state.tensors[id]!.storage;
      if (state.savedBy[storage] === undefined) state.savedBy[storage] = index;
    }
  }

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
    alias: result.alias ?? (copyWhen === 0 ? 'view' : null),
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

const NO_IDS: ReadonlyMap<string, number> = new Map();
const NO_MACS = (): Dim => 0;
const NO_COPIES: ReadonlyMap<number, number> = new Map();
const NO_INDICES: readonly number[] = [];
const OUTPUTS_ONLY: readonly KernelStep[] = [{ results: 'outputs' }];
const GRADS_ONLY: readonly KernelStep[] = [{ results: 'inputGrads' }, { results: 'paramGrads' }];

function backwardPlan(result: OpResult, needsInputs: readonly boolean[], paramsNeed: boolean): NonNullable<IROp['backward']> {
  const plan = result.backward?.({ inputs: needsInputs, params: paramsNeed }) ?? {};
  const inputGrads = needsInputs.map((needs, i) => (needs ? plan.inputGrads?.[i] ?? 'new' : 'none'));
  return { inputGrads, steps: plan.steps ?? GRADS_ONLY, contiguousGradOutput: plan.contiguousGradOutput ?? false, stridedFactor: plan.stridedFactor ?? 1 };
}

/** The scheme a Linear/Conv1D with this module key is stored in, or undefined when it stays in the model's dtype. */
function quantFor(state: State, key: string): QuantScheme | undefined {
  const plan = state.options.quantize;
  if (plan === undefined) return undefined;
  const within = plan.within ?? [''];
  if (!within.some((prefix) => prefix === '' || key === prefix || key.startsWith(`${prefix}.`))) return undefined;
  const skip = plan.skip ?? ['lm_head'];
  if (skip.some((entry) => key === entry || `${key}.`.includes(`${entry}.`))) return undefined;
  return plan.scheme;
}

function childKey(state: State, name: string): string {
  const parent = state.stack.length === 0 ? '' : current(state).key;
  return parent === '' ? name : `${parent}.${name}`;
}

function isLinear(layer: OpLayer<unknown>): boolean {
  return layer.rule.name === 'linear' && (layer.className === 'Linear' || layer.className === 'Conv1D');
}

function loraTarget(state: State, layer: OpLayer<unknown>, name: string): boolean {
  const plan = state.options.lora;
  if (plan === undefined || state.adapting || !isLinear(layer)) return false;
  if (plan.targets === 'all-linear') {
    // PEFT matches nn.Linear and Conv1D subclasses: bitsandbytes layers are, GPTQ/AWQ QuantLinear are not.
    const scheme = quantFor(state, childKey(state, name));
    return name !== 'lm_head' && (scheme === undefined || scheme.method === 'bnb-4bit' || scheme.method === 'bnb-8bit');
  }
  return (plan.targets ?? ATTENTION_PROJECTIONS).includes(name);
}

/** The class a quantized layer becomes (bitsandbytes, GPTQ, AWQ, FP8 modules). */
const QUANT_CLASS: Readonly<Record<QuantScheme['method'], string>> = {
  'bnb-4bit': 'Linear4bit',
  'bnb-8bit': 'Linear8bitLt',
  gptq: 'QuantLinear',
  awq: 'WQLinear_GEMM',
  fp8: 'FP8Linear',
  'fbgemm-fp8': 'FbgemmFp8Linear',
};

/**
 * PEFT's lora.Linear: `base_layer(x) + lora_B(lora_A(dropout(x))) * scaling`, the input cast
 * to the adapters' dtype first (a copy lora_A keeps when it differs).
 */
function traceLora(state: State, layer: OpLayer<unknown>, inputs: readonly TensorRef[], name: string): TensorRef[] {
  const plan = state.options.lora!;
  const attrs = layer.attrs as LinearAttrs;
  const module = openModule(state, name, 'Linear', inputs);
  state.adapting = true;
  const scheme = quantFor(state, module.key);
  const baseAttrs: LinearAttrs = scheme !== undefined ? { ...attrs, quant: scheme } : attrs;
  const base = first(traceLayer(state, opLayer(linearRule, scheme !== undefined ? QUANT_CLASS[scheme.method] : layer.className ?? 'Linear', baseAttrs, { name: 'base_layer' }), inputs, undefined), module.path);
  let x = first(inputs, module.path);
  const adapterDtype = plan.adapterDtype ?? state.options.paramDtype;
  if ((plan.dropout ?? 0) > 0) x = first(traceLayer(state, opLayer(dropoutRule, 'Dropout', { p: plan.dropout! }, { name: 'lora_dropout.default' }), [x], undefined), module.path);
  if (x.dtype !== adapterDtype) x = runOp(state, castRule, { dtype: adapterDtype }, [x])[0]!;
  const previous = state.adapterDtype;
  state.adapterDtype = adapterDtype;
  const a = first(traceLayer(state, opLayer(linearRule, 'Linear', { out: plan.rank, bias: false }, { name: 'lora_A.default' }), [x], undefined), module.path);
  const b = first(traceLayer(state, opLayer(linearRule, 'Linear', { out: attrs.out, bias: false }, { name: 'lora_B.default' }), [a], undefined), module.path);
  state.adapterDtype = previous;
  let scaled = runOp(state, mulScalarRule, {}, [b])[0]!;
  if (scaled.dtype !== base.dtype) scaled = runOp(state, castRule, { dtype: base.dtype }, [scaled])[0]!;
  const outputs = runOp(state, addRule, {}, [base, scaled]);
  state.adapting = false;
  closeModule(state, module, outputs);
  return outputs;
}

function traceOp(state: State, given: OpLayer<unknown>, inputs: readonly TensorRef[], name: string): TensorRef[] {
  if (given.className === null) return runOp(state, given.rule, given.attrs, inputs);
  if (state.options.lora !== undefined && !state.adapting && isLinear(given)) state.linearNames.add(name);
  if (loraTarget(state, given, name)) {
    state.adapted += 1;
    return traceLora(state, given, inputs, name);
  }
  let layer = given;
  let className = given.className;
  if (!state.adapting && state.options.quantize !== undefined && isLinear(given)) {
    const scheme = quantFor(state, childKey(state, name));
    if (scheme !== undefined) {
      className = QUANT_CLASS[scheme.method];
      layer = opLayer(linearRule, className, { ...(given.attrs as LinearAttrs), quant: scheme }, { name });
    }
  }
  const module = openShared(state, layer, name, className, inputs, false);
  const outputs = runOp(state, layer.rule, layer.attrs, inputs, state.seenLayers.get(layer)!);
  closeModule(state, module, outputs);
  return outputs;
}

/** Opens a module for a layer object; a second run of the same object is the same torch module. */
function openShared(state: State, layer: Layer, name: string, className: string, inputs: readonly TensorRef[], isSequential: boolean): MutableModule {
  const module = openModule(state, name, className, inputs, isSequential);
  const seen = state.seenLayers.get(layer);
  if (seen === undefined) state.seenLayers.set(layer, { module: module.index, params: null });
  else module.sharedWith = seen.module;
  return module;
}

function first(outputs: readonly TensorRef[], path: readonly string[]): TensorRef {
  const out = outputs[0];
  if (out === undefined) fail('no-output', 'a layer produced no tensor', { path });
  return out;
}

/** A sequence's children run in the enclosing module (named by their names or indexes); any other layer is traced as it is. */
function traceInline(state: State, layer: Layer, inputs: readonly TensorRef[], slot: string | undefined): TensorRef[] {
  if (layer.kind !== 'seq') return traceLayer(state, layer, inputs, slot);
  let current = inputs;
  layer.children.forEach((child, i) => {
    current = traceLayer(state, child, [first(current, modulePath(state))], String(i));
  });
  return [...current];
}

/** A branch's merge of its path outputs: concat along channels, or add/mul left to right. */
function mergePaths(state: State, layer: BranchLayer, outs: readonly TensorRef[], path: readonly string[]): TensorRef[] {
  if (outs.length === 0) fail('empty-branch', 'a branch needs at least one path', { path });
  if (layer.merge === 'concat') return runOp(state, catRule, { dim: 1 }, outs);
  const rule = layer.merge === 'add' ? addRule : mulRule;
  let merged: TensorRef[] = [outs[0]!];
  for (const next of outs.slice(1)) merged = runOp(state, rule, {}, [merged[0]!, next]);
  return merged;
}

function traceLayer(state: State, layer: Layer, inputs: readonly TensorRef[], slot: string | undefined): TensorRef[] {
  const name = layer.name ?? slot ?? defaultName(state);
  switch (layer.kind) {
    case 'op':
      return traceOp(state, layer, inputs, name);
    case 'seq': {
      const module = openShared(state, layer, name, layer.className, inputs, layer.isSequential);
      let current = inputs;
      layer.children.forEach((child, i) => {
        current = traceLayer(state, child, [first(current, module.path)], String(i));
      });
      closeModule(state, module, current);
      return [...current];
    }
    case 'module': {
      const module = openShared(state, layer, name, layer.className, inputs, false);
      if (layer.childOrder !== undefined) module.childOrder = layer.childOrder;
      if (layer.idleChildren !== undefined) module.idleChildren = layer.idleChildren;
      if (layer.functionalChildren !== undefined) module.functionalChildren = layer.functionalChildren;
      const outputs = traceLayer(state, layer.body, inputs, undefined);
      closeModule(state, module, outputs);
      return outputs;
    }
    case 'residual': {
      const x = first(inputs, modulePath(state));
      const shortcut = layer.shortcut ? first(traceLayer(state, layer.shortcut, [x], undefined), modulePath(state)) : x;
      const body = first(layer.inline === true ? traceInline(state, layer.body, [x], layer.name ?? slot) : traceLayer(state, layer.body, [x], layer.name ?? slot), modulePath(state));
      // torchvision's blocks: `out = body(x); identity = self.downsample(x); out += identity`.
      const identity = layer.downsample ? first(traceLayer(state, layer.downsample, [x], undefined), modulePath(state)) : shortcut;
      return runOp(state, addRule, { inplace: layer.inplace }, [body, identity]);
    }
    case 'branch': {
      if (layer.inline === true) {
        const x = first(inputs, modulePath(state));
        const outs = layer.paths.map((path, i) => first(traceInline(state, path, [x], String(i)), modulePath(state)));
        return mergePaths(state, layer, outs, modulePath(state));
      }
      const module = openShared(state, layer, name, layer.className, inputs, false);
      const x = first(inputs, module.path);
      const outs = layer.paths.map((path, i) => first(traceLayer(state, path, [x], String(i)), module.path));
      let merged: TensorRef[];
      if (outs.length === 0) fail('empty-branch', 'a branch needs at least one path', { path: module.path });
      if (layer.merge === 'concat') merged = runOp(state, catRule, { dim: 1 }, outs);
      else {
        const rule = layer.merge === 'add' ? addRule : mulRule;
        merged = [outs[0]!];
        for (const next of outs.slice(1)) merged = runOp(state, rule, {}, [merged[0]!, next]);
      }
      closeModule(state, module, merged);
      return merged;
    }
    case 'graph': {
      const built = layer.build(
        {
          apply: (child, ...args) => first(traceLayer(state, child, args, undefined), modulePath(state)),
          applyAll: (child, ...args) => traceLayer(state, child, args, undefined),
          call: (rule, args, attrs) => runOp(state, rule, attrs, args),
          training: state.options.training,
          gradEnabled: state.options.gradEnabled,
          checkpointing: state.options.gradEnabled && state.options.checkpoint !== undefined,
          hold: (t, until = 'module') => {
            const storage = state.tensors[t.id]!.storage;
            if (until === 'forward') state.holdsToEnd.add(storage);
            else current(state).held.push(storage);
          },
          touch: (t) => {
            state.holds.push({ storage: state.tensors[t.id]!.storage, until: state.ops.length - 1 });
          },
          require: (value, message) => {
            if (typeof value === 'number' ? value < 1 : bounds(value).max < 1) fail('bad-input', message, { path: modulePath(state), expected: '>= 1', received: formatDim(value) });
            if (typeof value !== 'number' && bounds(value).min < 1) state.constraints.set(value.key, value);
          },
        },
        inputs,
      );
      return Array.isArray(built) ? [...(built as readonly TensorRef[])] : [built as TensorRef];
    }
    default:
      return fail('bad-layer', 'not a vram-ts layer', { path: modulePath(state), received: String((layer as { kind?: unknown }).kind) });
  }
}

/** Appends the training loss (log_softmax + nll_loss, what F.cross_entropy runs) after the model. */
function addLoss(state: State, outputs: readonly TensorRef[]): { loss: number; target: number } | null {
  const { options } = state;
  const out = outputs[0];
  if (!options.gradEnabled || (options.loss ?? 'none') === 'none' || out === undefined || out.shape.length === 0) return null;
  if (out.shape.length < 2) fail('bad-loss', 'cross_entropy needs an output of at least [batch, classes]', { path: ['loss'], received: `[${out.shape.map(formatDim).join(', ')}]` });
  const targetSpec = tensor([out.shape[0]!, ...out.shape.slice(2)], 'int64');
  const targetStorage = newStorage(state, specBytes(targetSpec), 'int64', 'input');
  const target = newTensor(state, targetSpec, targetStorage, 'input', null, false, 'target', undefined);
  state.stage = 'loss';
  state.stack.push(0);
  const logp = runOp(state, logSoftmaxRule, { dim: 1 }, [out]);
  const loss = runOp(state, nllLossRule, {}, [logp[0]!, ref(state, target)]);
  state.stack.pop();
  return { loss: loss[0]!.id, target };
}

/** Class name of the root when the model's top layer is not a module by itself. */
function rootClassName(layer: Layer): string {
  switch (layer.kind) {
    case 'op':
      return layer.className ?? 'Model';
    case 'seq':
    case 'module':
    case 'branch':
      return layer.className;
    case 'residual':
      return 'Residual';
    case 'graph':
      return 'Graph';
  }
}

/**
 * Walks a model with input specs and returns the flat IR: every tensor with its
 * storage, producer and role, every op with what it saves, and the module tree.
 *
 * @example
 * ```ts
 * import { bn, conv2d, seq, tensor, trace } from 'vram-ts';
 * const ir = trace(seq(conv2d({ out: 8, kernel: 3, padding: 1 }), bn()), {
 *   inputs: [tensor([1, 3, 16, 16])], training: true, gradEnabled: true, device: 'cuda', paramDtype: 'float32',
 * });
 * console.log(ir.ops.map((op) => op.op)); // [ 'conv2d', 'batch_norm' ]
 * ```
 */
export function trace(model: Layer, options: TraceOptions): IR {
  checkDepth(model);
  try {
    return traceChecked(model, options);
  } catch (error) {
    // A graph layer can nest without limit; the JavaScript stack cannot.
    if (error instanceof RangeError) fail('too-deep', 'the model nests too deeply to trace', { path: ['model'], expected: `at most ${LIMITS.depth} levels`, received: error.message });
    throw error;
  }
}

/** The nesting depth of the layers that can be walked without tracing, refused past LIMITS.depth. */
/** Models already checked: a model is immutable data, so its depth is checked once. */
const checkedDepth = new WeakSet<Layer>();

function checkDepth(model: Layer): void {
  if (checkedDepth.has(model)) return;
  checkDepthOnce(model);
  checkedDepth.add(model);
}

function checkDepthOnce(model: Layer): void {
  const stack: [Layer, number][] = [[model, 1]];
  while (stack.length > 0) {
    const [layer, depth] = stack.pop()!;
    if (depth > LIMITS.depth) fail('too-deep', 'the model nests too deeply', { path: ['model'], expected: `at most ${LIMITS.depth} levels`, received: `more than ${LIMITS.depth}` });
    if (typeof layer !== 'object' || layer === null) continue;
    if (layer.kind === 'seq') for (const child of layer.children) stack.push([child, depth + 1]);
    else if (layer.kind === 'module') stack.push([layer.body, depth + 1]);
    else if (layer.kind === 'residual') {
      stack.push([layer.body, depth + 1]);
      if (layer.shortcut !== undefined) stack.push([layer.shortcut, depth + 1]);
      if (layer.downsample !== undefined) stack.push([layer.downsample, depth + 1]);
    } else if (layer.kind === 'branch') for (const path of layer.paths) stack.push([path, depth + 1]);
  }
}

function traceChecked(model: Layer, options: TraceOptions): IR {
  const state: State = {
    options,
    tensors: [],
    storages: [],
    ops: [],
    modules: [],
    constraints: new Map(),
    stack: [],
    seenLayers: new Map(),
    finished: 0,
    stage: 'model',
    savedBy: [],
    autocastCopies: new Map(),
    holdsToEnd: new Set(),
    holds: [],
    region: null,
    regions: [],
    adapterDtype: null,
    adapting: false,
    adapted: 0,
    linearNames: new Set(),
    running: { owner: null as unknown as MutableModule, rule: '' },
    context: null as unknown as State['context'],
  };
  const running = state.running;
  // One context for all ops: rules read it while they run (their path only for an error).
  (state as { context: State['context'] }).context = {
    training: options.training,
    gradEnabled: options.gradEnabled,
    device: options.device,
    framework: options.framework ?? 'torch-2',
    paramDtype: options.paramDtype,
    get path() {
      return [...running.owner.path, running.rule];
    },
  } as State['context'];
  checkDType(options.paramDtype, ['dtype']);
  const needsGrad = (i: number) => (typeof options.inputRequiresGrad === 'object' ? options.inputRequiresGrad[i] : options.inputRequiresGrad) ?? false;
  const inputRefs = options.inputs.map((spec, i) => {
    checkDType(spec.dtype, ['input', i]);
    for (const dim of spec.shape) {
      if (typeof dim === 'number' ? !Number.isSafeInteger(dim) || dim < 1 : !isExpr(dim)) {
        fail('bad-dimension', 'input dimensions must be integers >= 1 or symbols', { path: ['input', i], expected: 'integer >= 1', received: String(dim) });
      }
    }
    const storage = newStorage(state, specBytes(spec), spec.dtype, 'input');
    return ref(state, newTensor(state, tensor(spec.shape, spec.dtype), storage, 'input', null, needsGrad(i) && options.gradEnabled, undefined, undefined));
  });
  let outputs: TensorRef[];
  if ((model.kind === 'op' && model.className !== null) || model.kind === 'seq' || model.kind === 'branch' || model.kind === 'module') {
    outputs = traceLayer(state, model, inputRefs, '');
  } else {
    const root = openModule(state, '', rootClassName(model), inputRefs);
    outputs = traceLayer(state, model, inputRefs, undefined);
    closeModule(state, root, outputs);
  }
  closeRegion(state);
  // PEFT refuses a config whose targets match no module; so does this.
  if (options.lora !== undefined && state.adapted === 0) {
    fail('no-lora-target', 'no Linear layer matches the LoRA targets', { path: ['lora', 'targets'], expected: [...state.linearNames].join(' | ') || 'a model with Linear layers', received: JSON.stringify(options.lora.targets ?? ATTENTION_PROJECTIONS) });
  }
  const lastModelOp = state.ops.length - 1;
  const lossOutputs = addLoss(state, outputs);
  return {
    tensors: state.tensors,
    storages: state.storages,
    ops: state.ops,
    modules: state.modules,
    inputs: inputRefs.map((t) => t.id),
    outputs: outputs.map((t) => t.id),
    // A model that returns a scalar (a Hugging Face causal LM given labels) computed its own loss.
    lossOutput: lossOutputs !== null ? lossOutputs.loss : options.gradEnabled && outputs[0] !== undefined && outputs[0].shape.length === 0 ? outputs[0].id : null,
    holds: [...state.holds, ...[...state.holdsToEnd].map((storage) => ({ storage, until: lastModelOp }))],
    regions: state.regions.map((r) => ({ id: r.id, firstOp: r.firstOp, endOp: r.endOp, inputs: r.inputs })),
    targets: lossOutputs === null ? [] : [lossOutputs.target],
    settings: { training: options.training, gradEnabled: options.gradEnabled, device: options.device, framework: options.framework ?? 'torch-2', paramDtype: options.paramDtype },
    constraints: [...state.constraints.values()],
  };
}

/** The IR module list typed for readers. */
export type { IRModule };
