import { mul } from '../sym/ops.js';
import { microBatchPass, type Chunk, type MicroBatchPass } from './autograd.js';
import type { PipelineAction } from './schedules.js';
import type { StepRun } from './simulate.js';
import { idBlocks } from './step-plan.js';

/** One of a pipeline rank's stages, as a run of its traced model's ops (see {@link Chunk}). */
export interface PipelineChunk extends Chunk {
  /** The global stage index. */
  readonly stage: number;
  /** Tensors the stage gets from the data loader (the first stage's input, the final stage's targets). */
  readonly roots: readonly number[];
  /** What the stage returns (the final stage's outputs are what `output_chunks` keeps). */
  readonly outputs: readonly number[];
  /** The activation the stage receives from the previous one (null on the first stage). */
  readonly received: number | null;
  /** The final stage (it computes the loss). */
  readonly final: boolean;
}

/** A pipeline rank's step: its stages, the schedule's actions, and what the schedule keeps. */
export interface PipelineRun {
  readonly chunks: readonly PipelineChunk[];
  readonly actions: readonly PipelineAction[];
  /**
   * `schedule.step(..., return_outputs=True)` (torch's default): the final stage keeps every
   * micro-batch's output (`output_chunks`) until the next step clears it, and concatenates them
   * into the value step() returns.
   */
  readonly keepOutputs: boolean;
}

/**
 * The micro-batches of a pipeline rank's step as `torch.distributed.pipelining` (PyTorch 2.13)
 * runs them: every stage allocates one receive buffer per micro-batch for its input activation
 * (non-first stages) and for the gradient of each output (non-final stages) when the schedule
 * first runs, and keeps them (stage.py `_setup_forward_recv_info`, `_create_grad_recv_info`); the
 * received activation is the stage's input itself, a leaf whose `.grad` becomes the gradient sent
 * back (`stage_backward`), held until its send is waited on; a stage's output stays in
 * `fwd_cache` until its backward; the first stage's micro-batches are views of the whole batch.
 * Returns the two halves simulateStep calls: allocating the inputs, and running the actions.
 */
export function pipelineRunner(run: PipelineRun): { readonly inputs: (step: StepRun) => void; readonly micro: (step: StepRun) => void } {
  const byStage = new Map(run.chunks.map((c) => [c.stage, c]));
  const m = (step: StepRun) => step.microBatches;
  // Per chunk: the shared root inputs, the receive buffers for activations and gradients.
  const roots = new Map<number, Map<number, number>>();
  const received = new Map<number, number[]>();
  const gradBuffers = new Map<number, number[][]>();
  const kept = new Map<number, number[]>();
  const storageOf = (step: StepRun, tensor: number) => step.ir.tensors[tensor]!.storage;
  const bytesOf = (step: StepRun, tensor: number) => step.ir.storages[storageOf(step, tensor)]!.bytes;
  const outputsKept = (chunk: PipelineChunk) => run.keepOutputs && chunk.final;
  return {
    inputs(step) {
      const { ledger } = step;
      for (const chunk of run.chunks) {
        const shared = new Map<number, number>();
        // tensor_split views of the whole batch (and of the whole target).
        for (const t of chunk.roots) shared.set(storageOf(step, t), ledger.alloc(mul(bytesOf(step, t), m(step)), 'input'));
        roots.set(chunk.stage, shared);
        if (chunk.received !== null) received.set(chunk.stage, Array.from({ length: m(step) }, () => ledger.alloc(bytesOf(step, chunk.received!), 'communication')));
        if (!chunk.final) gradBuffers.set(chunk.stage, Array.from({ length: m(step) }, () => chunk.sent.map((t) => ledger.alloc(bytesOf(step, t), 'communication'))));
        // Last step's output_chunks, until this step's clear_runtime_states.
        if (outputsKept(chunk)) kept.set(chunk.stage, Array.from({ length: m(step) }, () => chunk.outputs.map((t) => ledger.alloc(bytesOf(step, t), 'activations'))).flat());
      }
    },
    micro(step) {
      const { ir, plan, ledger, residency, opUnit } = step;
      const micro = m(step);
      for (const blocks of kept.values()) for (const block of blocks) ledger.release(block);
      kept.clear();
      if (run.chunks.some(outputsKept)) ledger.record('forward', 'pipeline: last step\'s outputs cleared (clear_runtime_states)');
      const passes = new Map<string, MicroBatchPass>();
      const heldGrads = new Map<string, readonly number[]>();
      const heldOutputs = new Map<string, number[]>();
      const sentOutput = new Set(run.actions.filter((a) => a.kind === 'sent-output').map((a) => `${a.stage}/${a.micro}`));
      const backwards = new Map<number, number>();
      const losses: number[] = [];
      const lastBackward = run.actions.reduce((last, a, k) => (a.kind === 'backward' ? k : last), -1);
      run.actions.forEach((action, k) => {
        const chunk = byStage.get(action.stage)!;
        const key = `${action.stage}/${action.micro}`;
        const prefix = `stage ${action.stage} micro-batch ${action.micro + 1}: `;
        switch (action.kind) {
          case 'forward': {
            const blocks = idBlocks(ir.storages.length);
            for (const storage of step.storageBlock.keys()) blocks.set(storage, step.storageBlock.get(storage)!);
            for (const [storage, block] of roots.get(chunk.stage)!) blocks.set(storage, block);
            if (chunk.received !== null) blocks.set(storageOf(step, chunk.received), received.get(chunk.stage)![action.micro]!);
            const loss = chunk.final && ir.lossOutput !== null ? [ir.lossOutput] : [];
            // The final stage's outputs go to the loss, yet the schedule's names hold them too.
            const withGrads: typeof chunk = { ...chunk, kept: [...(chunk.final ? chunk.outputs : []), ...loss], receivedGrads: (i) => gradBuffers.get(chunk.stage)?.[i] ?? [] };
            const pass = microBatchPass({ ir, plan, ledger, storageBlock: blocks, residency, micro: prefix, opUnit, chunk: withGrads, index: action.micro });
            pass.forward();
            passes.set(key, pass);
            // The schedule's names (a send's work, `output`) hold the output until its sent-output.
            const outputs = chunk.final ? chunk.outputs : chunk.sent;
            const blockOf = (t: number) => pass.blockOf(storageOf(step, t));
            const held = sentOutput.has(key) ? outputs.map(blockOf).filter((b): b is number => b !== undefined) : [];
            for (const block of held) ledger.retain(block);
            heldOutputs.set(key, held);
            // output_chunks keeps the final stage's outputs to the next step.
            if (outputsKept(chunk)) {
              const chunkBlocks = outputs.map(blockOf).filter((b): b is number => b !== undefined);
              for (const block of chunkBlocks) ledger.retain(block);
              kept.set(chunk.stage, [...(kept.get(chunk.stage) ?? []), ...chunkBlocks]);
            }
            // The schedule's _internal_losses keeps each micro-batch's loss until the step's end.
            for (const t of loss) {
              const block = pass.blockOf(storageOf(step, t));
              if (block === undefined) continue;
              ledger.retain(block);
              losses.push(block);
            }
            return;
          }
          case 'backward': {
            const pass = passes.get(key)!;
            passes.delete(key);
            heldGrads.set(key, pass.backward());
            ledger.record('backward', `${prefix}graph freed`);
            const done = (backwards.get(chunk.stage) ?? 0) + 1;
            backwards.set(chunk.stage, done);
            residency.endBackward(prefix, k === lastBackward);
            return;
          }
          case 'sent-grad':
            for (const block of heldGrads.get(key) ?? []) ledger.release(block);
            heldGrads.delete(key);
            return;
          case 'sent-output':
            for (const block of heldOutputs.get(key) ?? []) ledger.release(block);
            heldOutputs.delete(key);
            return;
        }
      });
      ledger.record('backward', 'pipeline: sends waited on');
      for (const block of losses) ledger.release(block);
      for (const chunk of run.chunks) {
        if (!outputsKept(chunk)) continue;
        // step() returns merge_chunks(output_chunks): torch.cat of every micro-batch's output.
        const merged = chunk.outputs.map((t) => ledger.alloc(mul(bytesOf(step, t), micro), 'activations'));
        ledger.record('backward', `stage ${chunk.stage}: outputs merged (return_outputs)`);
        for (const block of merged) ledger.release(block);
      }
    },
  };
}
