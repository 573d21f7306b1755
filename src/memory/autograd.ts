import type { Dim } from "../sym/expr.js";
import { mul, sum } from "../sym/ops.js";
import type { KernelStep } from "../ops/types.js";
import type { IR, IROp } from "../trace/ir.js";
import { resultsOnly, runKernel } from "./kernel.js";
import type { Category, Ledger } from "./ledger.js";
import type { Residency } from "./residency/types.js";
import {
  idBlocks,
  tensorBytes,
  viewKeeper,
  type IdBlocks,
  type Plan,
} from "./step-plan.js";

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
  /** Runs the backward; returns the gradients of the chunk's inputs (leaves), which the caller frees when sent. */
  readonly backward: () => readonly number[];
  /** The block an activation storage of this micro-batch lives in, if it does. */
  readonly blockOf: (storage: number) => number | undefined;
}

/**
 * One forward + backward over the IR, with the ledger of the step: activations made, saved and
 * freed, activation gradients, checkpoint regions rerun; everything about parameters (their
 * storage, gradients, an engine's buffers) goes through the residency's hooks.
 */
export function forwardBackward(
  ir: IR,
  plan: Plan,
  ledger: Ledger,
  storageBlock: IdBlocks,
  residency: Residency,
  micro: string,
  opUnit: Int8Array | null
): void {
  const pass = microBatchPass(
    ir,
    plan,
    ledger,
    storageBlock,
    residency,
    micro,
    opUnit,
    null,
    0
  );
  pass.forward();
  for (const block of pass.backward()) ledger.release(block);
  ledger.record("backward", `${micro}graph freed`);
}

/**
 * One micro-batch over the IR or over one chunk of it (a pipeline stage), its forward and its
 * backward as two calls: a pipeline schedule runs other micro-batches' passes between them.
 * `storageBlock` holds this micro-batch's storages (the pinned ones it shares, such as
 * buffers, already in it).
 */
export function microBatchPass(
  ir: IR,
  plan: Plan,
  ledger: Ledger,
  storageBlock: IdBlocks,
  residency: Residency,
  micro: string,
  opUnit: Int8Array | null,
  chunk: Chunk | null,
  index: number
): MicroBatchPass {
  const firstOp = chunk?.firstOp ?? 0;
  const endOp = chunk?.endOp ?? ir.ops.length;
  const sent = new Set([...(chunk?.sent ?? []), ...(chunk?.kept ?? [])].map((t) => ir.tensors[t]!.storage));
  // Activation gradients: PyTorch 1.13 (the CPU oracle) sums them out of place; 2.x's
  // InputBuffer adds into a buffer it holds alone.
  const inPlaceAccumulation =
    (ir.settings.framework ?? "torch-2") === "torch-2";
  const savedLeft = Int32Array.from(plan.savers);
  const ensure = (storage: number, category: Category) => {
    if (!storageBlock.has(storage))
      storageBlock.set(
        storage,
        ledger.alloc(ir.storages[storage]!.bytes, category)
      );
  };
  const keepViews = viewKeeper(ir, ledger, (storage) =>
    storageBlock.has(storage)
  );
  const dropStorage = (storage: number) => {
    const block = storageBlock.get(storage);
    if (block === undefined) return;
    storageBlock.delete(storage);
    keepViews(storage);
    ledger.release(block);
  };
  const lossStorage =
    ir.lossOutput === null ? -1 : ir.tensors[ir.lossOutput]!.storage;
  const maybeFree = (storage: number, opIndex: number) => {
    // The loss stays referenced by the training loop until the step ends.
    if (
      storage === lossStorage ||
      plan.pinned[storage] ||
      savedLeft[storage]! > 0 ||
      plan.lastUse[storage]! > opIndex ||
      sent.has(storage)
    )
      return;
    dropStorage(storage);
  };

  const labelOf = (op: IROp) =>
    micro === "" ? plan.labels[op.index]! : `${micro}${plan.labels[op.index]!}`;
  const makeOutputs = (op: IROp) => {
    for (const id of op.outputs) ensure(ir.tensors[id]!.storage, "activations");
    for (const id of op.extras)
      if (op.region === null || op.paramCopies.includes(id))
        ensure(ir.tensors[id]!.storage, "activations");
  };
  // Forward (and the loss): outputs and saved extras come to life, inputs die after their last reader.
  const forward = () => {
    for (let i = firstOp; i < endOp; i += 1) {
      const op = ir.ops[i]!;
      if (opUnit !== null) ledger.setUnit(opUnit[op.index]!);
      const phase = op.stage === "loss" ? "loss" : "forward";
      const label = labelOf(op);
      residency.beforeForward(op, micro);
      if (resultsOnly(op.forwardSteps)) makeOutputs(op);
      else
        runKernel(ledger, op.forwardSteps, phase, label, {
          outputs: () => makeOutputs(op),
        });
      ledger.record(phase, label);
      for (
        let k = plan.dieStart[op.index]!;
        k < plan.dieStart[op.index + 1]!;
        k += 1
      )
        maybeFree(plan.dying[k]!, op.index);
      residency.afterForward(op, micro);
    }
    if (opUnit !== null) ledger.setUnit(-1);
  };

  // Backward: reverse creation order, as the autograd engine runs a single-device graph.
  const grads = idBlocks(ir.tensors.length);
  const seed = () => {
    const lossTensor = ir.lossOutput;
    if (
      lossTensor !== null &&
      ir.tensors[lossTensor]!.producer !== null &&
      ir.tensors[lossTensor]!.producer! >= firstOp &&
      ir.tensors[lossTensor]!.producer! < endOp
    )
      grads.set(lossTensor, ledger.alloc(4, "activationGrads"));
    // A stage that sends its outputs gets their gradients in receive buffers it does not own.
    const received = chunk?.receivedGrads?.(index) ?? [];
    chunk?.sent.forEach((t, k) => {
      const block = received[k];
      if (block === undefined) return;
      ledger.retain(block);
      grads.set(t, block);
    });
  };
  // Tensors whose gradient is a strided view (a slice of cat's gradient), until summed: the
  // factor is 1, or a 0/1 expression when it depends on the symbols.
  const strided = new Map<number, Dim>();
  const accumulate = (
    tensor: number,
    block: number,
    stridedFactor: Dim | null = null
  ) => {
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
    const summed = ledger.alloc(tensorBytes(ir, tensor), "activationGrads");
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
      for (const id of [...op.inputs, ...op.outputs, ...op.extras])
        inRegionLastUse.set(ir.tensors[id]!.storage, k);
      if (op.recorded)
        for (const id of op.saved) {
          const storage = ir.tensors[id]!.storage;
          recomputedSavers.set(
            storage,
            (recomputedSavers.get(storage) ?? 0) + 1
          );
        }
    }
    for (let k = region.firstOp; k < region.endOp; k += 1) {
      const op = ir.ops[k]!;
      const label = `${labelOf(op)} (recompute)`;
      runKernel(ledger, op.forwardSteps, "backward", label, {
        outputs: () => {
          for (const id of [...op.outputs, ...op.extras]) {
            const storage = ir.tensors[id]!.storage;
            if (
              plan.pinned[storage] ||
              recomputed.has(storage) ||
              op.paramCopies.includes(id)
            )
              continue;
            recomputed.set(
              storage,
              ledger.alloc(ir.storages[storage]!.bytes, "activations")
            );
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
  const makeInputGrads = (
    op: IROp,
    incoming: readonly (number | undefined)[]
  ) => {
    const backward = op.backward!;
    for (let k = 0; k < backward.inputGrads.length; k += 1) {
      const kind = backward.inputGrads[k]!;
      const input = op.inputs[k]!;
      if (kind === "none" || !ir.tensors[input]!.requiresGrad) continue;
      let block: number;
      if (
        (kind === "alias" || kind === "strided") &&
        incoming[0] !== undefined
      ) {
        block = incoming[0];
        ledger.retain(block);
      } else {
        block = ledger.alloc(tensorBytes(ir, input), "activationGrads");
      }
      accumulate(
        input,
        block,
        kind === "strided" ? backward.stridedFactor : null
      );
    }
  };
  // Whether the op's kernel steps let go of its saved tensors already ({ release: 'saved' }).
  let savedReleased = false;
  const backward = (): readonly number[] => {
    seed();
    for (let i = endOp - 1; i >= firstOp; i -= 1) {
      const op = ir.ops[i]!;
      if (!op.recorded || op.backward === null) continue;
      const incoming = op.outputs.map((id) => grads.get(id));
      if (incoming.every((g) => g === undefined)) continue;
      if (opUnit !== null) ledger.setUnit(opUnit[i]!);
      residency.beforeBackward(op, micro);
      if (op.region !== null && !rerun.has(op.region)) recompute(op.region);
      const label = labelOf(op);
      const backward = op.backward;
      // A kernel that needs a contiguous gradient copies a strided one for its duration.
      const stridedOut =
        backward.contiguousGradOutput && strided.size > 0
          ? op.outputs.filter((id) => strided.has(id))
          : NONE;
      if (stridedOut.length === 0 && resultsOnly(backward.steps)) {
        makeInputGrads(op, incoming);
        residency.paramGrads(op, label);
      } else {
        const steps: readonly KernelStep[] =
          stridedOut.length === 0
            ? backward.steps
            : [
                {
                  alloc: "contiguous gradient",
                  bytes: sum(
                    stridedOut.map((id) =>
                      mul(tensorBytes(ir, id), strided.get(id)!)
                    )
                  ),
                },
                ...backward.steps,
              ];
        runKernel(ledger, steps, "backward", label, {
          inputGrads: () => makeInputGrads(op, incoming),
          incomingGrads: () => releaseIncoming(op, incoming),
          paramGrads: () => residency.paramGrads(op, label),
          saved: () => {
            savedReleased = true;
            for (const id of op.saved) releaseSaved(ir.tensors[id]!.storage);
          },
        });
      }
      ledger.record("backward", label);
      releaseIncoming(op, incoming);
      if (!savedReleased) for (const id of op.saved) releaseSaved(ir.tensors[id]!.storage);
      savedReleased = false;
      residency.afterBackward(op, label);
      // The region is done once its first op ran backward: checkpoint lets go of its inputs.
      const region = op.region === null ? undefined : ir.regions[op.region];
      if (region !== undefined && region.firstOp === op.index)
        for (const id of region.inputs) releaseSaved(ir.tensors[id]!.storage);
    }
    if (opUnit !== null) ledger.setUnit(-1);
    for (const block of recomputed.values()) ledger.release(block);
    // Whatever is left (saved by nodes no gradient reached) goes with the graph; the gradients
    // of the inputs (leaves: a pipeline sends them back) go to the caller.
    const inputGrads: number[] = [];
    const inputs = new Set(ir.inputs);
    for (const id of grads.keys()) {
      const block = grads.get(id)!;
      if (inputs.has(id)) inputGrads.push(block);
      else ledger.release(block);
    }
    for (const storage of storageBlock.keys()) {
      if (!plan.pinned[storage]) dropStorage(storage);
    }
    return inputGrads;
  };
  return { forward, backward, blockOf: (storage) => storageBlock.get(storage) };
}

const NONE: readonly number[] = [];
