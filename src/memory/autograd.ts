import type { Dim } from '../sym/expr.js';
import { mul, sum } from '../sym/ops.js';
import type { KernelStep } from '../ops/types.js';
import type { IR, IROp } from '../trace/ir.js';
import { resultsOnly, runKernel } from './kernel.js';
import type { Category, Ledger } from './ledger.js';
import type { Residency } from './residency/types.js';
import { idBlocks, tensorBytes, viewKeeper, type IdBlocks, type Plan } from './step-plan.js';

/** A contiguous run of a rank's ops that runs as one pipeline stage (a model chunk). */
export interface Chunk {
  /** The chunk's first op and the op after its last (its loss ops included on the final stage). */
  readonly firstOp: number;
  readonly endOp: number;
  /** Outputs sent to the next stage: kept until this micro-batch's backward, which they root. */
  readonly sent: readonly number[];
  /** Outputs the schedule keeps besides (the final stage's `output_chunks`): not freed by the forward either. */
  readonly kept?: readonly number[];
  /** The gradient block that arrives for each sent output (a receive buffer, held elsewhere). */
  readonly receivedGrads?: (micro: number) => readonly number[];
}

/** One micro-batch of a chunk: its forward, and later its backward (a pipeline runs others between). */
export interface MicroBatchPass {
  readonly forward: () => void;
  /**
   * Runs the backward; returns the gradients of the chunk's inputs (leaves), which the caller frees
   * when sent. `micro`: its events' label prefix, if not the forward's (a pipeline's steady phase
   * written once runs a micro-batch standing for a later one).
   */
  readonly backward: (micro?: string) => readonly number[];
  /** The block an activation storage of this micro-batch lives in, if it does. */
  readonly blockOf: (storage: number) => number | undefined;
}

/** What one micro-batch's pass runs over: the step's IR, plan and ledger, its storages, and where it sits. */
export interface PassSetup {
  readonly ir: IR;
  readonly plan: Plan;
  readonly ledger: Ledger;
  /** This micro-batch's storages (the pinned ones it shares, such as buffers, already in it). */
  readonly storageBlock: IdBlocks;
  readonly residency: Residency;
  /** The event-label prefix of the micro-batch (`micro-batch 2: `, or empty). */
  readonly micro: string;
  /** op index → the unit (rank) its events count on, or null for one unit. */
  readonly opUnit: Int8Array | null;
  /** The pipeline stage's chunk, or null for the whole IR. */
  readonly chunk?: Chunk | null;
  /** The micro-batch's index (for the chunk's received gradients). */
  readonly index?: number;
}

/**
 * One forward + backward over the IR, with the ledger of the step: activations made, saved and
 * freed, activation gradients, checkpoint regions rerun; everything about parameters (their
 * storage, gradients, an engine's buffers) goes through the residency's hooks.
 */
export function forwardBackward(setup: PassSetup): void {
  const pass = microBatchPass(setup);
  pass.forward();
  for (const block of pass.backward()) setup.ledger.release(block);
  setup.ledger.record('backward', `${setup.micro}graph freed`);
}

/**
 * One micro-batch over the IR or over one chunk of it (a pipeline stage), its forward and its
 * backward as two calls: a pipeline schedule runs other micro-batches' passes between them.
 */
export function microBatchPass(setup: PassSetup): MicroBatchPass {
  return new Pass(setup);
}

/**
 * The state of one micro-batch's pass, shared by its handlers: the storages it made, the
 * activation gradients in flight, the checkpoint regions it reran.
 */
class Pass implements MicroBatchPass {
  private readonly ir: IR;
  private readonly plan: Plan;
  private readonly ledger: Ledger;
  private readonly storageBlock: IdBlocks;
  private readonly residency: Residency;
  private micro: string;
  private readonly opUnit: Int8Array | null;
  private readonly chunk: Chunk | null;
  private readonly index: number;
  private readonly firstOp: number;
  private readonly endOp: number;
  /** Storages sent to the next stage or kept by the schedule: the forward does not free them. */
  private readonly sent: Set<number>;
  // Activation gradients: PyTorch 1.13 (the CPU oracle) sums them out of place; 2.x's
  // InputBuffer adds into a buffer it holds alone.
  private readonly inPlaceAccumulation: boolean;
  private readonly savedLeft: Int32Array;
  private readonly keepViews: (storage: number) => void;
  private readonly lossStorage: number;
  /** tensor → its gradient block. */
  private readonly grads: IdBlocks;
  // Tensors whose gradient is a strided view (a slice of cat's gradient), until summed: the
  // factor is 1, or a 0/1 expression when it depends on the symbols.
  private readonly strided = new Map<number, Dim>();
  // Checkpoint regions rerun their forward (recording, saving) when backward first reaches them.
  private readonly recomputed: IdBlocks;
  private readonly recomputedSavers = new Map<number, number>();
  private readonly rerun = new Set<number>();
  // Whether the op's kernel steps let go of its saved tensors already ({ release: 'saved' }).
  private savedReleased = false;
  // Gradients a node made that InputBuffer added in place into the tensor's buffer: the engine
  // adds them after the node's function returned (its temporaries gone) and after it let go of
  // its incoming gradient and saved tensors, so they live until then.
  private readonly addedInPlace: number[] = [];

  constructor(setup: PassSetup) {
    const { ir, plan, ledger, storageBlock, chunk = null } = setup;
    this.ir = ir;
    this.plan = plan;
    this.ledger = ledger;
    this.storageBlock = storageBlock;
    this.residency = setup.residency;
    this.micro = setup.micro;
    this.opUnit = setup.opUnit;
    this.chunk = chunk;
    this.index = setup.index ?? 0;
    this.firstOp = chunk?.firstOp ?? 0;
    this.endOp = chunk?.endOp ?? ir.ops.length;
    this.sent = new Set([...(chunk?.sent ?? []), ...(chunk?.kept ?? [])].map((t) => ir.tensors[t]!.storage));
    this.inPlaceAccumulation = (ir.settings.framework ?? 'torch-2') === 'torch-2';
    this.savedLeft = Int32Array.from(plan.savers);
    this.keepViews = viewKeeper(ir, ledger, (storage) => storageBlock.has(storage));
    this.lossStorage = ir.lossOutput === null ? -1 : ir.tensors[ir.lossOutput]!.storage;
    this.grads = idBlocks(ir.tensors.length);
    this.recomputed = idBlocks(ir.storages.length);
  }

  blockOf(storage: number): number | undefined {
    return this.storageBlock.get(storage);
  }

  // Forward (and the loss): outputs and saved extras come to life, inputs die after their last reader.
  forward(): void {
    for (let i = this.firstOp; i < this.endOp; i += 1) this.forwardOp(this.ir.ops[i]!);
    if (this.opUnit !== null) this.ledger.setUnit(-1);
  }

  // Backward: reverse creation order, as the autograd engine runs a single-device graph.
  backward(micro = this.micro): readonly number[] {
    this.micro = micro;
    this.seed();
    for (let i = this.endOp - 1; i >= this.firstOp; i -= 1) this.backwardOp(this.ir.ops[i]!, i);
    if (this.opUnit !== null) this.ledger.setUnit(-1);
    return this.freeGraph();
  }

  private ensure(storage: number, category: Category): void {
    if (!this.storageBlock.has(storage)) this.storageBlock.set(storage, this.ledger.alloc(this.ir.storages[storage]!.bytes, category));
  }

  private dropStorage(storage: number): void {
    const block = this.storageBlock.get(storage);
    if (block === undefined) return;
    this.storageBlock.delete(storage);
    this.keepViews(storage);
    this.ledger.release(block);
  }

  private maybeFree(storage: number, opIndex: number): void {
    // The loss stays referenced by the training loop until the step ends.
    if (
      storage === this.lossStorage ||
      this.plan.pinned[storage] ||
      this.savedLeft[storage]! > 0 ||
      this.plan.lastUse[storage]! > opIndex ||
      this.sent.has(storage)
    )
      return;
    this.dropStorage(storage);
  }

  private labelOf(op: IROp): string {
    const { micro, plan } = this;
    return micro === '' ? plan.labels[op.index]! : `${micro}${plan.labels[op.index]!}`;
  }

  private makeOutputs(op: IROp): void {
    const { ir } = this;
    for (const id of op.outputs) this.ensure(ir.tensors[id]!.storage, 'activations');
    for (const id of op.extras) if (op.region === null || op.paramCopies.includes(id)) this.ensure(ir.tensors[id]!.storage, 'activations');
  }

  private forwardOp(op: IROp): void {
    const { ledger, plan, residency, micro } = this;
    if (this.opUnit !== null) ledger.setUnit(this.opUnit[op.index]!);
    const phase = op.stage === 'loss' ? 'loss' : 'forward';
    const label = this.labelOf(op);
    residency.beforeForward(op, micro);
    if (resultsOnly(op.forwardSteps)) this.makeOutputs(op);
    else
      runKernel(ledger, op.forwardSteps, phase, label, {
        outputs: () => this.makeOutputs(op),
        releaseInput: (k) => this.maybeFree(this.ir.tensors[op.inputs[k]!]!.storage, op.index),
      });
    ledger.record(phase, label);
    for (let k = plan.dieStart[op.index]!; k < plan.dieStart[op.index + 1]!; k += 1) this.maybeFree(plan.dying[k]!, op.index);
    residency.afterForward(op, micro);
  }

  private seed(): void {
    const { ir, ledger, grads, chunk } = this;
    const lossTensor = ir.lossOutput;
    if (
      lossTensor !== null &&
      ir.tensors[lossTensor]!.producer !== null &&
      ir.tensors[lossTensor]!.producer! >= this.firstOp &&
      ir.tensors[lossTensor]!.producer! < this.endOp
    )
      grads.set(lossTensor, ledger.alloc(4, 'activationGrads'));
    // A stage that sends its outputs gets their gradients in receive buffers it does not own.
    const received = chunk?.receivedGrads?.(this.index) ?? [];
    chunk?.sent.forEach((t, k) => {
      const block = received[k];
      if (block === undefined) return;
      ledger.retain(block);
      grads.set(t, block);
    });
  }

  private accumulate(tensor: number, block: number, stridedFactor: Dim | null = null): void {
    const { ledger, grads } = this;
    const existing = grads.get(tensor);
    if (existing === undefined) {
      grads.set(tensor, block);
      if (stridedFactor !== null) this.strided.set(tensor, stridedFactor);
      return;
    }
    if (this.inPlaceAccumulation && ledger.refs(existing) === 1) {
      // InputBuffer (PyTorch 2.x) adds in place when it holds the only reference, once the node returned.
      this.addedInPlace.push(block);
      return;
    }
    this.strided.delete(tensor);
    const summed = ledger.alloc(tensorBytes(this.ir, tensor), 'activationGrads');
    ledger.release(existing);
    ledger.release(block);
    grads.set(tensor, summed);
  }

  private recompute(regionId: number): void {
    this.rerun.add(regionId);
    const region = this.ir.regions[regionId]!;
    const inRegionLastUse = this.countRegion(region.firstOp, region.endOp);
    for (let k = region.firstOp; k < region.endOp; k += 1) this.recomputeOp(this.ir.ops[k]!, k, inRegionLastUse);
  }

  /** A rerun region's storages → the op that uses them last in it; counts the savers of the rerun. */
  private countRegion(firstOp: number, endOp: number): Map<number, number> {
    const { ir, recomputedSavers } = this;
    const inRegionLastUse = new Map<number, number>();
    for (let k = firstOp; k < endOp; k += 1) {
      const op = ir.ops[k]!;
      for (const id of [...op.inputs, ...op.outputs, ...op.extras]) inRegionLastUse.set(ir.tensors[id]!.storage, k);
      if (op.recorded)
        for (const id of op.saved) {
          const storage = ir.tensors[id]!.storage;
          recomputedSavers.set(storage, (recomputedSavers.get(storage) ?? 0) + 1);
        }
    }
    // What the forward kept longer than its last reader (a module's arguments until it returns, held
    // locals) lives as long in the rerun, up to the region's end.
    const { lastUse } = this.plan;
    for (const [storage, last] of inRegionLastUse) {
      const held = Math.min(lastUse[storage]!, endOp - 1);
      if (held > last) inRegionLastUse.set(storage, held);
    }
    return inRegionLastUse;
  }

  private recomputeOp(op: IROp, k: number, inRegionLastUse: ReadonlyMap<number, number>): void {
    const { ir, ledger, plan, recomputed } = this;
    const label = `${this.labelOf(op)} (recompute)`;
    runKernel(ledger, op.forwardSteps, 'backward', label, {
      outputs: () => {
        for (const id of [...op.outputs, ...op.extras]) {
          const storage = ir.tensors[id]!.storage;
          // Autocast's weight copies are cast again in the rerun (its own autocast context) unless still alive.
          if (plan.pinned[storage] || recomputed.has(storage) || (op.paramCopies.includes(id) && this.storageBlock.has(storage))) continue;
          recomputed.set(storage, ledger.alloc(ir.storages[storage]!.bytes, 'activations'));
        }
      },
    });
    // The rerun's live total after each op: its intermediates die inside the region, so a peak of the
    // recomputation is seen only here (measured: a LoRA MLP's float32 dropout path under checkpoint).
    ledger.record('backward', label);
    for (const [storage, last] of inRegionLastUse) {
      if (last !== k || (this.recomputedSavers.get(storage) ?? 0) > 0) continue;
      const block = recomputed.get(storage);
      if (block === undefined) continue;
      recomputed.delete(storage);
      ledger.release(block);
    }
  }

  private releaseSaved(storage: number): void {
    const { recomputedSavers, recomputed } = this;
    const left = recomputedSavers.get(storage);
    if (left !== undefined) {
      recomputedSavers.set(storage, left - 1);
      if (left - 1 === 0) {
        recomputedSavers.delete(storage);
        const block = recomputed.get(storage);
        if (block !== undefined) {
          recomputed.delete(storage);
          this.ledger.release(block);
        }
      }
      return;
    }
    this.savedLeft[storage]! -= 1;
    this.maybeFree(storage, Number.MAX_SAFE_INTEGER);
  }

  private releaseSavedOf(op: IROp): void {
    for (const id of op.saved) this.releaseSaved(this.ir.tensors[id]!.storage);
  }

  // The gradients that reached the op go once it ran (or earlier, where a step says so).
  private releaseIncoming(op: IROp, incoming: (number | undefined)[]): void {
    op.outputs.forEach((id, k) => {
      const block = incoming[k];
      if (block === undefined) return;
      this.grads.delete(id);
      this.strided.delete(id);
      this.ledger.release(block);
      incoming[k] = undefined;
    });
  }

  private makeInputGrads(op: IROp, incoming: readonly (number | undefined)[]): void {
    const { ir, ledger } = this;
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
      this.accumulate(input, block, kind === 'strided' ? backward.stridedFactor : null);
    }
  }

  private backwardOp(op: IROp, i: number): void {
    if (!op.recorded || op.backward === null) return;
    const { ir, ledger, residency } = this;
    const incoming = op.outputs.map((id) => this.grads.get(id));
    if (incoming.every((g) => g === undefined)) return;
    if (this.opUnit !== null) ledger.setUnit(this.opUnit[i]!);
    residency.beforeBackward(op, this.micro);
    // Non-reentrant checkpoint reruns the region when a node first unpacks a saved tensor: nodes that
    // saved nothing (an add, a product with a number) run before it (measured: a LoRA MLP's output).
    if (op.region !== null && !this.rerun.has(op.region) && op.saved.length > 0) this.recompute(op.region);
    const label = this.labelOf(op);
    this.backwardKernel(op, incoming, label);
    ledger.record('backward', label);
    this.releaseIncoming(op, incoming);
    if (!this.savedReleased) this.releaseSavedOf(op);
    this.savedReleased = false;
    for (const block of this.addedInPlace) ledger.release(block);
    this.addedInPlace.length = 0;
    residency.afterBackward(op, label);
    // The region is done once its first op ran backward: checkpoint lets go of its inputs.
    const region = op.region === null ? undefined : ir.regions[op.region];
    if (region !== undefined && region.firstOp === op.index) for (const id of region.inputs) this.releaseSaved(ir.tensors[id]!.storage);
  }

  /**
   * Autocast weight copies: MmBackward0 makes the 16-bit weight gradients, then lets go of its
   * incoming gradient and its saved tensors (the 16-bit weight copy among them) before each
   * ToCopyBackward0 makes the fp32 gradient (measured: torch 2.13 CPU, transformers 5.18 lm_head).
   */
  private castWeightGradients(op: IROp, incoming: (number | undefined)[], label: string): void {
    const { ir, ledger } = this;
    // Only a weight that requires grad gets one (a frozen LoRA base weight's copy gets none).
    const copies = op.paramCopies.filter((id) => ir.tensors[id]!.requiresGrad).map((id) => ledger.alloc(tensorBytes(ir, id), 'activationGrads'));
    ledger.record('backward', `${label} (16-bit weight gradient)`);
    this.releaseIncoming(op, incoming);
    this.savedReleased = true;
    this.releaseSavedOf(op);
    this.residency.paramGrads(op, label);
    for (const block of copies) ledger.release(block);
  }

  private backwardKernel(op: IROp, incoming: (number | undefined)[], label: string): void {
    const { ir, ledger, residency, strided } = this;
    const backward = op.backward!;
    // A kernel that needs a contiguous gradient copies a strided one for its duration.
    const stridedOut = backward.contiguousGradOutput && strided.size > 0 ? op.outputs.filter((id) => strided.has(id)) : NONE;
    if (stridedOut.length === 0 && resultsOnly(backward.steps)) {
      this.makeInputGrads(op, incoming);
      if (op.paramCopies.length > 0) this.castWeightGradients(op, incoming, label);
      else residency.paramGrads(op, label);
      return;
    }
    const steps: readonly KernelStep[] =
      stridedOut.length === 0
        ? backward.steps
        : [
            {
              alloc: 'contiguous gradient',
              bytes: sum(stridedOut.map((id) => mul(tensorBytes(ir, id), strided.get(id)!))),
            },
            ...backward.steps,
          ];
    runKernel(ledger, steps, 'backward', label, {
      inputGrads: () => this.makeInputGrads(op, incoming),
      incomingGrads: () => this.releaseIncoming(op, incoming),
      paramGrads: () => residency.paramGrads(op, label),
      saved: () => {
        this.savedReleased = true;
        this.releaseSavedOf(op);
      },
    });
  }

  // Whatever is left (saved by nodes no gradient reached) goes with the graph; the gradients
  // of the inputs (leaves: a pipeline sends them back) go to the caller.
  private freeGraph(): readonly number[] {
    const { ir, ledger, grads } = this;
    for (const block of this.recomputed.values()) ledger.release(block);
    const inputGrads: number[] = [];
    const inputs = new Set(ir.inputs);
    for (const id of grads.keys()) {
      const block = grads.get(id)!;
      if (inputs.has(id)) inputGrads.push(block);
      else ledger.release(block);
    }
    for (const storage of this.storageBlock.keys()) {
      if (!this.plan.pinned[storage]) this.dropStorage(storage);
    }
    return inputGrads;
  }
}

const NONE: readonly number[] = [];
