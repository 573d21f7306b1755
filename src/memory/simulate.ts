import { dimKey, type Dim } from '../sym/expr.js';
import { deepFreeze } from '../freeze.js';
import type { TensorSpec } from '../tensor/spec.js';
import type { Framework } from '../ops/types.js';
import { mul, sub, sum } from '../sym/ops.js';
import { bytesOf } from '../tensor/dtype.js';
import { numel } from '../tensor/spec.js';
import type { IR, IROp } from '../trace/ir.js';
import type { ReducedBlocks } from '../trace/blocks.js';
import { parameterOrder } from '../trace/uses.js';
import type { KernelStep } from '../ops/types.js';
import { MARK, createLedger, zeroTotals, type Category, type Ledger, type PeakPoint, type Phase, type StepProgram } from './ledger.js';
import { paramUpdate, type OptimizerSpec, type ParamUpdate } from './optimizers.js';
import { programEnds, programPeak } from './peak.js';
import { once, sweepConcrete, withBytes, type Repetition } from './program.js';

/** How the step runs. */
export interface StepSettings {
  readonly optimizer: OptimizerSpec | null;
  /** Count allocations in CUDA's 512-byte blocks. */
  readonly rounded: boolean;
  /** Micro-batches per optimizer step (gradient accumulation, default 1). */
  readonly microBatches?: number;
  /** Symbolic sizes: build the peak expression (false leaves only the replayable program). */
  readonly peakExpression?: boolean;
  /** The IR is a model's repeated blocks reduced to three: which block each op and storage is in. */
  readonly blocks?: ReducedBlocks;
}


/** The simulated step. */
export interface StepResult {
  /** The peak (for symbolic sizes: the undominated candidates; `bytes` is their max). */
  readonly peak: PeakPoint;
  readonly candidates: readonly PeakPoint[];
  /** Live bytes before the step. */
  readonly baseline: Dim;
  /** Live bytes after it (the next step's baseline). */
  readonly end: Dim;
  /** The log of the step, replayable at any symbol values. */
  readonly program: StepProgram;
  /** With reduced blocks: how the program stands for the full model's. */
  readonly repeat?: Repetition;
  /** Training: the first step, derived from this (steady) one when asked for. */
  readonly first?: () => StepResult;
  /** Training: bytes of the optimizer state on the device (of the full model, with reduced blocks). */
  readonly optimizerState?: Dim;
}

const NOT_COMPUTED: PeakPoint = { bytes: 0, phase: 'end', label: 'not computed', event: 0, byCategory: zeroTotals() };

/**
 * The peak and the live totals at the ends of a recorded program (of the full model, with
 * repetition). Symbolic: the totals at the ends are expressions made when read.
 */
function finish(program: StepProgram, repeat: Repetition | undefined, peakExpression: boolean): StepResult {
  const base = repeat === undefined ? { program } : { program, repeat };
  if (program.sizes.every((s) => typeof s === 'number')) {
    const sweep = sweepConcrete(program, repeat);
    return { ...base, peak: sweep.peak, candidates: [sweep.peak], baseline: sweep.first, end: sweep.last };
  }
  const { bytes, candidates } = peakExpression ? programPeak(program, repeat) : { bytes: 0, candidates: [NOT_COMPUTED] };
  const ends = once(() => programEnds(program, repeat));
  const result = { ...base, peak: withBytes(candidates[0]!, bytes), candidates } as Omit<StepResult, 'baseline' | 'end'>;
  Object.defineProperty(result, 'baseline', { enumerable: true, get: () => ends().first });
  Object.defineProperty(result, 'end', { enumerable: true, get: () => ends().last });
  return result as StepResult;
}

function repetition(ledger: Ledger, blocks: ReducedBlocks | undefined): Repetition | undefined {
  return blocks === undefined ? undefined : { units: ledger.units(), times: blocks.times, relabel: blocks.relabel };
}

interface Plan {
  /** storage → index of the last forward op that reads it (or makes it, when nothing reads it). */
  readonly lastUse: Int32Array;
  /** storage → number of recorded ops that save it. */
  readonly savers: Int32Array;
  /** Storages held for the whole step (inputs, targets, parameters, buffers). */
  readonly pinned: Uint8Array;
  /** Trainable parameter tensor ids in registration order. */
  readonly trainable: readonly number[];
  /** Storages whose last forward use op i is: `dying[dieStart[i] .. dieStart[i + 1] - 1]`, ascending. */
  readonly dieStart: Int32Array;
  readonly dying: Int32Array;
  /** op index → its event label (module key and op). */
  readonly labels: readonly string[];
}

function planOf(ir: IR): Plan {
  const n = ir.storages.length;
  const lastUse = new Int32Array(n).fill(-1);
  const savers = new Int32Array(n);
  const pinned = new Uint8Array(n);
  for (const s of ir.storages) if (s.role === 'param' || s.role === 'buffer' || s.role === 'input') pinned[s.id] = 1;
  // Module.__call__ keeps its arguments referenced until forward returns, so a module's
  // inputs live at least until its last op (nn.Sequential included).
  for (const module of ir.modules) {
    if (module.endOp <= module.firstOp) continue;
    for (const id of module.inputs) {
      const s = ir.tensors[id]!.storage;
      if (lastUse[s]! < module.endOp - 1) lastUse[s] = module.endOp - 1;
    }
  }
  for (const op of ir.ops) {
    for (const id of op.inputs) if (lastUse[ir.tensors[id]!.storage]! < op.index) lastUse[ir.tensors[id]!.storage] = op.index;
    for (const id of op.outputs) {
      const s = ir.tensors[id]!.storage;
      if (lastUse[s]! < op.index) lastUse[s] = op.index;
    }
    for (const id of op.extras) {
      const s = ir.tensors[id]!.storage;
      if (lastUse[s]! < op.index) lastUse[s] = op.index;
    }
    // Ops in a checkpoint region save nothing in forward: they save when the region reruns.
    if (op.recorded && op.region === null) for (const id of op.saved) savers[ir.tensors[id]!.storage]! += 1;
  }
  for (const region of ir.regions) for (const id of region.inputs) savers[ir.tensors[id]!.storage]! += 1;
  for (const hold of ir.holds) if (lastUse[hold.storage]! < hold.until) lastUse[hold.storage] = hold.until;
  // The optimizer walks model.parameters(): registration order.
  const trainable = parameterOrder(ir).filter((id) => ir.storages[ir.tensors[id]!.storage]!.trainable);
  // Storages by the op of their last use, as one sorted list with an offset per op.
  const dieStart = new Int32Array(ir.ops.length + 1);
  for (let storage = 0; storage < n; storage += 1) if (lastUse[storage]! >= 0) dieStart[lastUse[storage]! + 1]! += 1;
  for (let op = 0; op < ir.ops.length; op += 1) dieStart[op + 1]! += dieStart[op]!;
  const dying = new Int32Array(dieStart[ir.ops.length]!);
  const fill = dieStart.slice(0, ir.ops.length);
  for (let storage = 0; storage < n; storage += 1) if (lastUse[storage]! >= 0) dying[fill[lastUse[storage]!]!++] = storage;
  return { lastUse, savers, pinned, trainable, dieStart, dying, labels: ir.ops.map((op) => opLabel(ir, op)) };
}

/**
 * Conditional copies (IRStorage.conditional): where the copy is a view, the storage it views
 * lives until the copy goes. When that storage is dropped while a copy of it is still live, a
 * block of its bytes times (1 − copyWhen) stands in for it until the last such copy is dropped.
 * Returns the hook to call on every drop, before the storage's own block is released.
 */
function viewKeeper(ir: IR, ledger: Ledger, live: (storage: number) => boolean): (storage: number) => void {
  const viewers = new Map<number, number[]>();
  for (const storage of ir.storages) {
    const c = storage.conditional;
    if (c !== undefined) viewers.set(c.viewOf, [...(viewers.get(c.viewOf) ?? []), storage.id]);
  }
  if (viewers.size === 0) return () => undefined;
  const standIn = new Map<number, number>();
  return (storage) => {
    const copies = viewers.get(storage);
    if (copies !== undefined) {
      const alive = copies.filter(live);
      if (alive.length > 0) {
        const when = ir.storages[alive[0]!]!.conditional!.copyWhen;
        standIn.set(storage, ledger.alloc(mul(ir.storages[storage]!.bytes, sub(1, when)), categoryOf(ir.storages[storage]!.role), alive.length));
      }
    }
    const c = ir.storages[storage]!.conditional;
    const block = c === undefined ? undefined : standIn.get(c.viewOf);
    if (block !== undefined) {
      ledger.release(block);
      if (ledger.refs(block) === 0) standIn.delete(c!.viewOf);
    }
  };
}

function categoryOf(role: IR['storages'][number]['role']): Category {
  return role === 'param' ? 'parameters' : role === 'buffer' ? 'buffers' : role === 'input' ? 'input' : 'activations';
}

/**
 * Ledger blocks by dense id (storage or tensor): a typed array where a Map hashed every number,
 * keys listed in the order they were first set (what a Map's iteration gives, but for a key set
 * again after a delete, which only moves a free among frees with no event between them).
 */
interface IdBlocks {
  readonly has: (id: number) => boolean;
  readonly get: (id: number) => number | undefined;
  readonly set: (id: number, block: number) => void;
  readonly delete: (id: number) => void;
  readonly keys: () => number[];
  readonly values: () => number[];
}

function idBlocks(size: number): IdBlocks {
  const block = new Int32Array(size).fill(-1);
  const order: number[] = [];
  const keys = () => {
    const seen = new Uint8Array(size);
    const out: number[] = [];
    for (const id of order) {
      if (block[id] === -1 || seen[id]) continue;
      seen[id] = 1;
      out.push(id);
    }
    return out;
  };
  return {
    has: (id) => block[id] !== -1,
    get: (id) => (block[id] === -1 ? undefined : block[id]),
    set: (id, value) => {
      if (block[id] === -1) order.push(id);
      block[id] = value;
    },
    delete: (id) => {
      block[id] = -1;
    },
    keys,
    values: () => keys().map((id) => block[id]!),
  };
}

function tensorBytes(ir: IR, id: number): Dim {
  const spec = ir.tensors[id]!.spec;
  return bytesOf(numel(spec), spec.dtype);
}

/** One forward + backward over the IR, with the ledger of the step. */
function forwardBackward(ir: IR, plan: Plan, ledger: Ledger, storageBlock: IdBlocks, paramGrads: IdBlocks, micro: string, opUnit: Int8Array | null): void {
  // Activation gradients: PyTorch 1.13 (the CPU oracle) sums them out of place; 2.x's
  // InputBuffer adds into a buffer it holds alone.
  const inPlaceAccumulation = (ir.settings.framework ?? 'torch-2') === 'torch-2';
  const savedLeft = Int32Array.from(plan.savers);
  const ensure = (storage: number, category: Category) => {
    if (!storageBlock.has(storage)) storageBlock.set(storage, ledger.alloc(ir.storages[storage]!.bytes, category));
  };
  const keepViews = viewKeeper(ir, ledger, (storage) => storageBlock.has(storage));
  const dropStorage = (storage: number) => {
    const block = storageBlock.get(storage);
    if (block === undefined) return;
    storageBlock.delete(storage);
    keepViews(storage);
    ledger.release(block);
  };
  const lossStorage = ir.lossOutput === null ? -1 : ir.tensors[ir.lossOutput]!.storage;
  const maybeFree = (storage: number, opIndex: number) => {
    // The loss stays referenced by the training loop until the step ends.
    if (storage === lossStorage || plan.pinned[storage] || savedLeft[storage]! > 0 || plan.lastUse[storage]! > opIndex) return;
    dropStorage(storage);
  };

  const labelOf = (op: IROp) => (micro === '' ? plan.labels[op.index]! : `${micro}${plan.labels[op.index]!}`);
  const makeOutputs = (op: IROp) => {
    for (const id of op.outputs) ensure(ir.tensors[id]!.storage, 'activations');
    for (const id of op.extras) if (op.region === null || op.paramCopies.includes(id)) ensure(ir.tensors[id]!.storage, 'activations');
  };
  // Forward (and the loss): outputs and saved extras come to life, inputs die after their last reader.
  for (const op of ir.ops) {
    if (opUnit !== null) ledger.setUnit(opUnit[op.index]!);
    const phase = op.stage === 'loss' ? 'loss' : 'forward';
    const label = labelOf(op);
    if (resultsOnly(op.forwardSteps)) makeOutputs(op);
    else runKernel(ledger, op.forwardSteps, phase, label, { outputs: () => makeOutputs(op) });
    ledger.record(phase, label);
    for (let k = plan.dieStart[op.index]!; k < plan.dieStart[op.index + 1]!; k += 1) maybeFree(plan.dying[k]!, op.index);
  }

  if (opUnit !== null) ledger.setUnit(-1);
  // Backward: reverse creation order, as the autograd engine runs a single-device graph.
  const grads = idBlocks(ir.tensors.length);
  const lossTensor = ir.lossOutput;
  if (lossTensor !== null) grads.set(lossTensor, ledger.alloc(4, 'activationGrads'));
  // Tensors whose gradient is a strided view (a slice of cat's gradient), until summed: the
  // factor is 1, or a 0/1 expression when it depends on the symbols.
  const strided = new Map<number, Dim>();
  const accumulate = (tensor: number, block: number, stridedFactor: Dim | null = null) => {
    const existing = grads.get(tensor);
    if (existing === undefined) {
      grads.set(tensor, block);
      if (stridedFactor !== null) strided.set(tensor, stridedFactor);
      return;
    }
    if (inPlaceAccumulation && ledger.refs(existing) === 1) {
      // InputBuffer (PyTorch 2.x) adds in place when it holds the only reference.
      ledger.release(block);
      return;
    }
    strided.delete(tensor);
    const summed = ledger.alloc(tensorBytes(ir, tensor), 'activationGrads');
    ledger.release(existing);
    ledger.release(block);
    grads.set(tensor, summed);
  };
  // Checkpoint regions rerun their forward (recording, saving) when backward first reaches them.
  const recomputed = idBlocks(ir.storages.length);
  const recomputedSavers = new Map<number, number>();
  const rerun = new Set<number>();
  const recompute = (regionId: number) => {
    rerun.add(regionId);
    const region = ir.regions[regionId]!;
    const inRegionLastUse = new Map<number, number>();
    for (let k = region.firstOp; k < region.endOp; k += 1) {
      const op = ir.ops[k]!;
      for (const id of [...op.inputs, ...op.outputs, ...op.extras]) inRegionLastUse.set(ir.tensors[id]!.storage, k);
      if (op.recorded) for (const id of op.saved) {
        const storage = ir.tensors[id]!.storage;
        recomputedSavers.set(storage, (recomputedSavers.get(storage) ?? 0) + 1);
      }
    }
    for (let k = region.firstOp; k < region.endOp; k += 1) {
      const op = ir.ops[k]!;
      const label = `${labelOf(op)} (recompute)`;
      runKernel(ledger, op.forwardSteps, 'backward', label, {
        outputs: () => {
          for (const id of [...op.outputs, ...op.extras]) {
            const storage = ir.tensors[id]!.storage;
            if (plan.pinned[storage] || recomputed.has(storage) || op.paramCopies.includes(id)) continue;
            recomputed.set(storage, ledger.alloc(ir.storages[storage]!.bytes, 'activations'));
          }
        },
      });
      for (const [storage, last] of inRegionLastUse) {
        if (last !== k || (recomputedSavers.get(storage) ?? 0) > 0) continue;
        const block = recomputed.get(storage);
        if (block === undefined) continue;
        recomputed.delete(storage);
        ledger.release(block);
      }
    }
  };
  const releaseSaved = (storage: number) => {
    const left = recomputedSavers.get(storage);
    if (left !== undefined) {
      recomputedSavers.set(storage, left - 1);
      if (left - 1 === 0) {
        recomputedSavers.delete(storage);
        const block = recomputed.get(storage);
        if (block !== undefined) {
          recomputed.delete(storage);
          ledger.release(block);
        }
      }
      return;
    }
    savedLeft[storage]! -= 1;
    maybeFree(storage, Number.MAX_SAFE_INTEGER);
  };
  const accumulations: [number, number, number][] = [];
  // The gradients that reached the op go once it ran (or earlier, where a step says so).
  const releaseIncoming = (op: IROp, incoming: (number | undefined)[]) => {
    op.outputs.forEach((id, k) => {
      const block = incoming[k];
      if (block === undefined) return;
      grads.delete(id);
      strided.delete(id);
      ledger.release(block);
      incoming[k] = undefined;
    });
  };
  const makeInputGrads = (op: IROp, incoming: readonly (number | undefined)[]) => {
    const backward = op.backward!;
    for (let k = 0; k < backward.inputGrads.length; k += 1) {
      const kind = backward.inputGrads[k]!;
      const input = op.inputs[k]!;
      if (kind === 'none' || !ir.tensors[input]!.requiresGrad) continue;
      let block: number;
      if ((kind === 'alias' || kind === 'strided') && incoming[0] !== undefined) {
        block = incoming[0];
        ledger.retain(block);
      } else {
        block = ledger.alloc(tensorBytes(ir, input), 'activationGrads');
      }
      accumulate(input, block, kind === 'strided' ? backward.stridedFactor : null);
    }
  };
  const makeParamGrads = (op: IROp, label: string) => {
    // Autocast: the weight gradient comes out in 16 bits, then ToCopyBackward makes the fp32 one.
    const copyGrads = op.paramCopies.length === 0 ? NONE : op.paramCopies.map((id) => ledger.alloc(tensorBytes(ir, id), 'activationGrads'));
    for (const param of op.params) {
      const storage = ir.tensors[param]!.storage;
      if (!ir.storages[storage]!.trainable) continue;
      const existing = paramGrads.get(param);
      if (existing === undefined) paramGrads.set(param, ledger.alloc(tensorBytes(ir, param), 'gradients'));
      else accumulations.push([param, existing, ledger.alloc(tensorBytes(ir, param), 'temporaries')]);
    }
    if (copyGrads.length > 0) ledger.record('backward', `${label} (weight gradient cast)`);
    for (const block of copyGrads) ledger.release(block);
  };
  for (let i = ir.ops.length - 1; i >= 0; i -= 1) {
    const op = ir.ops[i]!;
    if (!op.recorded || op.backward === null) continue;
    const incoming = op.outputs.map((id) => grads.get(id));
    if (incoming.every((g) => g === undefined)) continue;
    if (opUnit !== null) ledger.setUnit(opUnit[i]!);
    if (op.region !== null && !rerun.has(op.region)) recompute(op.region);
    const label = labelOf(op);
    const backward = op.backward;
    // A kernel that needs a contiguous gradient copies a strided one for its duration.
    const stridedOut = backward.contiguousGradOutput && strided.size > 0 ? op.outputs.filter((id) => strided.has(id)) : NONE;
    if (stridedOut.length === 0 && resultsOnly(backward.steps)) {
      makeInputGrads(op, incoming);
      makeParamGrads(op, label);
    } else {
      const steps: readonly KernelStep[] =
        stridedOut.length === 0 ? backward.steps : [{ alloc: 'contiguous gradient', bytes: sum(stridedOut.map((id) => mul(tensorBytes(ir, id), strided.get(id)!))) }, ...backward.steps];
      runKernel(ledger, steps, 'backward', label, {
        inputGrads: () => makeInputGrads(op, incoming),
        incomingGrads: () => releaseIncoming(op, incoming),
        paramGrads: () => makeParamGrads(op, label),
      });
    }
    ledger.record('backward', label);
    releaseIncoming(op, incoming);
    for (const id of op.saved) releaseSaved(ir.tensors[id]!.storage);
    // A second gradient for the same parameter (tied or shared weights): AccumulateGrad runs
    // after the node let go of its inputs, as `.grad + new` out of place, a third tensor
    // before the two are freed. Measured on PyTorch 1.13 (CPU, real transformers 4.40.2
    // traces) and 2.11 (CUDA traces of tied embeddings in test/fixtures/cuda/traces).
    for (const [param, existing, fresh] of accumulations) {
      const summed = ledger.alloc(tensorBytes(ir, param), 'gradients');
      ledger.record('backward', `${label} (accumulate grad)`);
      ledger.release(existing);
      ledger.release(fresh);
      paramGrads.set(param, summed);
    }
    accumulations.length = 0;
    // The region is done once its first op ran backward: checkpoint lets go of its inputs.
    const region = op.region === null ? undefined : ir.regions[op.region];
    if (region !== undefined && region.firstOp === op.index) for (const id of region.inputs) releaseSaved(ir.tensors[id]!.storage);
  }
  if (opUnit !== null) ledger.setUnit(-1);
  for (const block of recomputed.values()) ledger.release(block);
  // Whatever is left (saved by nodes no gradient reached, gradients of leaves) goes with the graph.
  for (const block of grads.values()) ledger.release(block);
  for (const storage of storageBlock.keys()) {
    if (!plan.pinned[storage]) dropStorage(storage);
  }
  ledger.record('backward', `${micro}graph freed`);
}

type Results = Partial<Record<'outputs' | 'inputGrads' | 'paramGrads' | 'incomingGrads', () => void>>;

const RESULT_ORDER = ['outputs', 'inputGrads', 'paramGrads'] as const;
const NONE: readonly number[] = [];

/** Whether a kernel only makes its results (no temporaries, no local high to record). */
function resultsOnly(steps: readonly KernelStep[]): boolean {
  return steps.length <= 2 && (steps.length < 1 || 'results' in steps[0]!) && (steps.length < 2 || 'results' in steps[1]!);
}

/** Runs a kernel's steps; records the live total at each local high (before a free, and at the end). */
function runKernel(ledger: Ledger, steps: readonly KernelStep[], phase: Phase, label: string, results: Results): void {
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
    } else if ('release' in step) {
      mark();
      results.incomingGrads?.();
      done.add('incomingGrads');
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

function opLabel(ir: IR, op: IROp): string {
  const key = ir.modules[op.module]!.key;
  return key === '' ? op.op : `${key} ${op.op}`;
}

/**
 * paramUpdate, kept per optimizer spec object and parameter shape: a model has many tensors of
 * the same shape, and a spec named by a string is one object (optimizerSpec), so a second
 * estimate with the same optimizer reuses its updates. Frozen: shared between estimates.
 */
const updates = new WeakMap<OptimizerSpec, Map<string, ParamUpdate>>();

function updateOf(spec: OptimizerSpec, param: TensorSpec, framework: Framework): ParamUpdate {
  let bySpec = updates.get(spec);
  if (bySpec === undefined) {
    bySpec = new Map();
    updates.set(spec, bySpec);
  }
  let key = `${framework}|${param.dtype}`;
  for (let i = 0; i < param.shape.length; i += 1) key += `|${dimKey(param.shape[i]!)}`;
  let update = bySpec.get(key);
  if (update === undefined) {
    update = deepFreeze(paramUpdate(spec, param, framework));
    if (bySpec.size >= 10_000) bySpec.clear();
    bySpec.set(key, update);
  }
  return update;
}

/**
 * Simulates one training step the way PyTorch runs it: `zero_grad(set_to_none=True)`,
 * forward (saved tensors accumulate, others die after their last reader), loss,
 * backward in reverse order (gradients made and freed, saved tensors released, parameter
 * gradients kept), optimizer step (state, temporaries).
 */
export function simulateStep(ir: IR, settings: StepSettings): StepResult {
  const plan = planOf(ir);
  const ledger = createLedger(settings.rounded);
  const blocks = settings.blocks;
  if (blocks !== undefined) ledger.setUnit(-1);
  const ownerOf = (storage: number) => (blocks === undefined ? -1 : blocks.storageUnit[storage]!);
  const storageBlock = idBlocks(ir.storages.length);
  for (const s of ir.storages) {
    if (s.role === 'param') storageBlock.set(s.id, ledger.alloc(s.bytes, 'parameters', 1, ownerOf(s.id)));
    if (s.role === 'buffer') storageBlock.set(s.id, ledger.alloc(s.bytes, 'buffers', 1, ownerOf(s.id)));
    if (s.role === 'input') storageBlock.set(s.id, ledger.alloc(s.bytes, 'input', 1, ownerOf(s.id)));
  }
  // The optimizer's update of every trainable parameter, in model.parameters() order.
  const optimizer = settings.optimizer;
  const updates: readonly ParamUpdate[] = optimizer === null ? [] : plan.trainable.map((id) => updateOf(optimizer, ir.tensors[id]!.spec, ir.settings.framework ?? 'torch-2'));
  const updated = optimizer === null ? [] : plan.trainable;
  const paramGrads = idBlocks(ir.tensors.length);
  // The steady step: last step's gradients and the optimizer state exist before it starts.
  const gradBlocks = new Set<number>();
  const stateBlocks: number[] = [];
  for (const id of plan.trainable) {
    const block = ledger.alloc(tensorBytes(ir, id), 'gradients', 1, ownerOf(ir.tensors[id]!.storage));
    paramGrads.set(id, block);
    gradBlocks.add(block);
  }
  // Optimizer state on the device (on the CPU, host-side scalars such as Adam's step share the memory).
  const stateBytes: Dim[] = [];
  for (let u = 0; u < updates.length; u += 1) {
    const owner = ownerOf(ir.tensors[updated[u]!]!.storage);
    for (const state of updates[u]!.state) {
      if (state.place !== 'device' && ir.settings.device !== 'cpu') continue;
      stateBlocks.push(ledger.alloc(state.bytes, 'optimizer', 1, owner));
      stateBytes.push(owner === 1 && blocks !== undefined ? mul(state.bytes, blocks.times) : state.bytes);
    }
  }
  ledger.record('start', 'before the step');

  for (const id of plan.trainable) {
    ledger.release(paramGrads.get(id)!);
    paramGrads.delete(id);
  }
  ledger.record('zero_grad', 'zero_grad(set_to_none=True)');

  const micro = Math.max(1, settings.microBatches ?? 1);
  const opUnit = blocks?.opUnit ?? null;
  for (let m = 0; m < micro; m += 1) forwardBackward(ir, plan, ledger, storageBlock, paramGrads, micro > 1 ? `micro-batch ${m + 1}: ` : '', opUnit);

  const stepMark = ledger.program().events.length;
  ledger.record('step', 'optimizer step begins');
  if (settings.optimizer !== null) {
    // The list-wide intermediates of the whole model: the interior block's share as many times as it repeats.
    const listTemps = sum(updates.map((u, i) => (ownerOf(ir.tensors[updated[i]!]!.storage) === 1 && blocks !== undefined ? mul(u.listTemps, blocks.times) : u.listTemps)));
    if (listTemps !== 0) {
      const block = ledger.alloc(listTemps, 'temporaries');
      ledger.record('step', `${settings.optimizer.name} (foreach intermediates)`);
      ledger.release(block);
    }
    // A loop variable (Adam's `denom`) survives into the next tensor's update.
    let carried: number | null = null;
    for (let u = 0; u < updates.length; u += 1) {
      const id = updated[u]!;
      const update = updates[u]!;
      if (update.temps.length === 0) continue;
      if (blocks !== undefined) ledger.setUnit(ownerOf(ir.tensors[id]!.storage));
      const temps = update.temps.map((bytes) => ledger.alloc(bytes, 'temporaries'));
      ledger.record('step', `${settings.optimizer.name} ${ir.tensors[id]!.key ?? id}`);
      const kept = update.carriesLast ? temps.pop()! : null;
      for (const block of temps) ledger.release(block);
      if (carried !== null) ledger.release(carried);
      carried = kept;
    }
    if (blocks !== undefined) ledger.setUnit(-1);
    if (carried !== null) ledger.release(carried);
  }
  ledger.record('end', 'after the step');
  const program = ledger.program();
  const repeat = repetition(ledger, blocks);
  const peakExpression = settings.peakExpression ?? true;
  const steady = finish(program, repeat, peakExpression);
  // Added to the result, not spread into a copy: its symbolic totals are made when read.
  return Object.assign(steady, { optimizerState: sum(stateBytes), first: once(() => firstStep(program, repeat, gradBlocks, stateBlocks, stepMark, peakExpression)) });
}

/**
 * The first step from the steady one: the same allocations without last step's gradients,
 * and with the optimizer state created lazily as the step begins.
 */
function firstStep(program: StepProgram, repeat: Repetition | undefined, gradBlocks: ReadonlySet<number>, stateBlocks: readonly number[], stepMark: number, peakExpression: boolean): StepResult {
  // Flags by block id: 1 = a gradient (never freed before the step), 2 = optimizer state (born at the step).
  const kind = new Uint8Array(program.sizes.length);
  for (const block of gradBlocks) kind[block] = 1;
  for (const block of stateBlocks) kind[block] = 2;
  const owner = new Int8Array(program.sizes.length).fill(-1);
  if (repeat !== undefined) program.log.forEach((entry, k) => {
    if (entry >= 0) owner[entry] = repeat.units[k]!;
  });
  const log: number[] = [];
  const units: number[] = [];
  let event = 0;
  program.log.forEach((entry, k) => {
    if (entry === MARK) {
      if (event === stepMark) for (const block of stateBlocks) {
        log.push(block);
        units.push(owner[block]!);
      }
      log.push(MARK);
      units.push(repeat?.units[k] ?? -1);
      event += 1;
    } else if (entry >= 0 ? kind[entry] === 0 : kind[-1 - entry] !== 1) {
      log.push(entry);
      units.push(repeat?.units[k] ?? -1);
    }
  });
  return finish({ ...program, log }, repeat === undefined ? undefined : { ...repeat, units }, peakExpression);
}

/** Inference: a no-grad forward; the peak is the largest set of tensors alive at once. */
export function simulateInference(ir: IR, rounded: boolean, peakExpression = true, blocks?: ReducedBlocks): StepResult {
  const plan = planOf(ir);
  const ledger = createLedger(rounded);
  if (blocks !== undefined) ledger.setUnit(-1);
  const ownerOf = (storage: number) => (blocks === undefined ? -1 : blocks.storageUnit[storage]!);
  const storageBlock = idBlocks(ir.storages.length);
  for (const s of ir.storages) {
    if (s.role === 'param') storageBlock.set(s.id, ledger.alloc(s.bytes, 'parameters', 1, ownerOf(s.id)));
    if (s.role === 'buffer') storageBlock.set(s.id, ledger.alloc(s.bytes, 'buffers', 1, ownerOf(s.id)));
    if (s.role === 'input') storageBlock.set(s.id, ledger.alloc(s.bytes, 'input', 1, ownerOf(s.id)));
  }
  ledger.record('start', 'before the forward');
  const outputs = new Set(ir.outputs.map((o) => ir.tensors[o]!.storage));
  const keepViews = viewKeeper(ir, ledger, (storage) => storageBlock.has(storage));
  for (const op of ir.ops) {
    if (blocks !== undefined) ledger.setUnit(blocks.opUnit[op.index]!);
    const makeOutputs = () => {
      for (const id of op.outputs) {
        const storage = ir.tensors[id]!.storage;
        if (!storageBlock.has(storage)) storageBlock.set(storage, ledger.alloc(ir.storages[storage]!.bytes, 'activations'));
      }
    };
    if (resultsOnly(op.forwardSteps)) makeOutputs();
    else runKernel(ledger, op.forwardSteps, 'forward', plan.labels[op.index]!, { outputs: makeOutputs });
    ledger.record('forward', plan.labels[op.index]!);
    for (let k = plan.dieStart[op.index]!; k < plan.dieStart[op.index + 1]!; k += 1) {
      const storage = plan.dying[k]!;
      const block = storageBlock.get(storage);
      if (block === undefined || plan.pinned[storage] || outputs.has(storage)) continue;
      storageBlock.delete(storage);
      keepViews(storage);
      ledger.release(block);
    }
  }
  if (blocks !== undefined) ledger.setUnit(-1);
  ledger.record('end', 'after the forward');
  const repeat = repetition(ledger, blocks);
  return finish(ledger.program(), repeat, peakExpression);
}
