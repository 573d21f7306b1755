import { fail } from '../errors.js';
import type { Layer, TensorRef } from '../nn/types.js';
import { LIMITS } from '../limits.js';
import { isExpr } from '../sym/expr.js';
import { checkDType } from '../tensor/dtype.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { checkDepth } from './depth.js';
import type { IR, IRModule } from './ir.js';
import type { TraceOptions } from './options.js';
import { traceLayer } from './layers.js';
import { ATTENTION_PROJECTIONS } from './lora.js';
import { addLoss } from './loss.js';
import { closeModule, closeRegion, newStorage, newTensor, openModule, ref, type MutableModule, type State } from './state.js';

// The tracer's entry: trace() from the inputs to the IR. Its options are in options.ts, the walk
// in layers.ts, one op in run-op.ts, the tracer's state in state.ts.

export type { CheckpointPlan, LoraPlan, TraceOptions } from './options.js';

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
 * import { bn, conv2d, seq, tensor } from 'vram-ts';
 * import { trace } from 'vram-ts/internals';
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
    if (error instanceof RangeError)
      fail('too-deep', 'the model nests too deeply to trace', { path: ['model'], expected: `at most ${LIMITS.depth} levels`, received: error.message });
    throw error;
  }
}

function traceChecked(model: Layer, options: TraceOptions): IR {
  const state = newState(options);
  checkDType(options.paramDtype, ['dtype']);
  const inputRefs = traceInputs(state);
  let outputs: TensorRef[];
  // An inline branch opens no module of its own: at the root it runs in the root module, as a residual does.
  const ownModule =
    (model.kind === 'op' && model.className !== null) || model.kind === 'seq' || (model.kind === 'branch' && model.inline !== true) || model.kind === 'module';
  if (ownModule) {
    outputs = traceLayer(state, model, inputRefs, '');
  } else {
    const root = openModule(state, '', rootClassName(model), inputRefs);
    outputs = traceLayer(state, model, inputRefs, undefined);
    closeModule(state, root, outputs);
  }
  closeRegion(state);
  // PEFT refuses a config whose targets match no module; so does this.
  if (options.lora !== undefined && state.adapted === 0) {
    fail('no-lora-target', 'no Linear layer matches the LoRA targets', {
      path: ['lora', 'targets'],
      expected: [...state.linearNames].join(' | ') || 'a model with Linear layers',
      received: JSON.stringify(options.lora.targets ?? ATTENTION_PROJECTIONS),
    });
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
    lossOutput:
      lossOutputs !== null ? lossOutputs.loss : options.gradEnabled && outputs[0] !== undefined && outputs[0].shape.length === 0 ? outputs[0].id : null,
    holds: [...state.holds, ...[...state.holdsToEnd].map((storage) => ({ storage, until: lastModelOp }))],
    regions: state.regions.map((r) => ({ id: r.id, firstOp: r.firstOp, endOp: r.endOp, inputs: r.inputs })),
    targets: lossOutputs === null ? [] : [lossOutputs.target],
    settings: {
      training: options.training,
      gradEnabled: options.gradEnabled,
      device: options.device,
      framework: options.framework ?? 'torch-2',
      paramDtype: options.paramDtype,
    },
    constraints: [...state.constraints.values()],
  };
}

/** A tracer's empty state, with the one context every op rule reads. */
function newState(options: TraceOptions): State {
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
  return state;
}

/** The model's inputs as tensors of the trace, their dtypes and dimensions checked. */
function traceInputs(state: State): TensorRef[] {
  const { options } = state;
  const needsGrad = (i: number) => (typeof options.inputRequiresGrad === 'object' ? options.inputRequiresGrad[i] : options.inputRequiresGrad) ?? false;
  return options.inputs.map((spec, i) => {
    checkDType(spec.dtype, ['input', i]);
    for (const dim of spec.shape) {
      if (typeof dim === 'number' ? !Number.isSafeInteger(dim) || dim < 1 : !isExpr(dim)) {
        fail('bad-dimension', 'input dimensions must be integers >= 1 or symbols', { path: ['input', i], expected: 'integer >= 1', received: String(dim) });
      }
    }
    const storage = newStorage(state, specBytes(spec), spec.dtype, 'input');
    return ref(state, newTensor(state, tensor(spec.shape, spec.dtype), storage, 'input', null, needsGrad(i) && options.gradEnabled, undefined, undefined));
  });
}

/** The IR module list typed for readers. */
export type { IRModule };
