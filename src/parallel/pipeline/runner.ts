import { microBatchPass, type Chunk, type MicroBatchPass } from '../../memory/autograd.js';
import type { RepeatedSpan, StepRun, StepRunner } from '../../memory/simulate.js';
import { idBlocks } from '../../memory/step-plan.js';
import { mul } from '../../sym/ops.js';
import type { PipelineAction } from './schedules.js';
import { relabelCopy, type SteadyActions } from './steady.js';

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
  /** The steady phase written once (see {@link SteadyActions}): runs instead of `actions`. */
  readonly steady?: SteadyActions | null;
}

/** What a rank's receive buffers and kept outputs are, across steps (made by `inputs`, read by `micro`). */
interface RunnerState {
  readonly run: PipelineRun;
  readonly byStage: ReadonlyMap<number, PipelineChunk>;
  /** Per chunk: the shared root inputs (storage → block). */
  readonly roots: Map<number, Map<number, number>>;
  /** Per chunk: the receive buffers of its input activation, one per micro-batch. */
  readonly received: Map<number, number[]>;
  /** Per chunk: the receive buffers of its outputs' gradients, one list per micro-batch. */
  readonly gradBuffers: Map<number, number[][]>;
  /** Per final chunk: `output_chunks`, kept to the next step. */
  readonly kept: Map<number, number[]>;
}

/** One step's actions in flight: the passes begun, what the schedule's names hold, the losses. */
interface StepState {
  readonly step: StepRun;
  readonly passes: Map<string, MicroBatchPass>;
  readonly heldGrads: Map<string, readonly number[]>;
  readonly heldOutputs: Map<string, number[]>;
  readonly sentOutput: ReadonlySet<string>;
  readonly losses: number[];
  readonly lastBackward: number;
}

const storageOf = (step: StepRun, tensor: number) => step.ir.tensors[tensor]!.storage;
const bytesOf = (step: StepRun, tensor: number) => step.ir.storages[storageOf(step, tensor)]!.bytes;
const outputsKept = (run: PipelineRun, chunk: PipelineChunk) => run.keepOutputs && chunk.final;

/** The receive buffers of every chunk, its share of the batch, and last step's output_chunks. */
function allocateInputs(r: RunnerState, step: StepRun): void {
  const { ledger } = step;
  const m = step.microBatches;
  for (const chunk of r.run.chunks) {
    const shared = new Map<number, number>();
    // tensor_split views of the whole batch (and of the whole target).
    for (const t of chunk.roots) shared.set(storageOf(step, t), ledger.alloc(mul(bytesOf(step, t), m), 'input'));
    r.roots.set(chunk.stage, shared);
    if (chunk.received !== null)
      r.received.set(
        chunk.stage,
        Array.from({ length: m }, () => ledger.alloc(bytesOf(step, chunk.received!), 'communication')),
      );
    if (!chunk.final)
      r.gradBuffers.set(
        chunk.stage,
        Array.from({ length: m }, () => chunk.sent.map((t) => ledger.alloc(bytesOf(step, t), 'communication'))),
      );
    // Last step's output_chunks, until this step's clear_runtime_states.
    if (outputsKept(r.run, chunk))
      r.kept.set(chunk.stage, Array.from({ length: m }, () => chunk.outputs.map((t) => ledger.alloc(bytesOf(step, t), 'activations'))).flat());
  }
}

/** A micro-batch's forward through one chunk, and what the schedule holds of it afterwards. */
function forwardAction(r: RunnerState, s: StepState, action: PipelineAction, prefix: string): void {
  const { step } = s;
  const { ir, plan, ledger, residency, opUnit } = step;
  const chunk = r.byStage.get(action.stage)!;
  const key = `${action.stage}/${action.micro}`;
  const blocks = idBlocks(ir.storages.length);
  for (const storage of step.storageBlock.keys()) blocks.set(storage, step.storageBlock.get(storage)!);
  for (const [storage, block] of r.roots.get(chunk.stage)!) blocks.set(storage, block);
  if (chunk.received !== null) blocks.set(storageOf(step, chunk.received), r.received.get(chunk.stage)![action.micro]!);
  const loss = chunk.final && ir.lossOutput !== null ? [ir.lossOutput] : [];
  // The final stage's outputs go to the loss, yet the schedule's names hold them too.
  const withGrads: typeof chunk = {
    ...chunk,
    kept: [...(chunk.final ? chunk.outputs : []), ...loss],
    receivedGrads: (i) => r.gradBuffers.get(chunk.stage)?.[i] ?? [],
  };
  const pass = microBatchPass({ ir, plan, ledger, storageBlock: blocks, residency, micro: prefix, opUnit, chunk: withGrads, index: action.micro });
  pass.forward();
  s.passes.set(key, pass);
  // The schedule's names (a send's work, `output`) hold the output until its sent-output.
  const outputs = chunk.final ? chunk.outputs : chunk.sent;
  const blockOf = (t: number) => pass.blockOf(storageOf(step, t));
  const held = s.sentOutput.has(key) ? outputs.map(blockOf).filter((b): b is number => b !== undefined) : [];
  for (const block of held) ledger.retain(block);
  s.heldOutputs.set(key, held);
  // output_chunks keeps the final stage's outputs to the next step.
  if (outputsKept(r.run, chunk)) {
    const chunkBlocks = outputs.map(blockOf).filter((b): b is number => b !== undefined);
    for (const block of chunkBlocks) ledger.retain(block);
    r.kept.set(chunk.stage, [...(r.kept.get(chunk.stage) ?? []), ...chunkBlocks]);
  }
  // The schedule's _internal_losses keeps each micro-batch's loss until the step's end.
  for (const t of loss) {
    const block = pass.blockOf(storageOf(step, t));
    if (block === undefined) continue;
    ledger.retain(block);
    s.losses.push(block);
  }
}

/** One action of the schedule: a forward, a backward, or a send completing (what it held goes). */
function runAction(r: RunnerState, s: StepState, action: PipelineAction, k: number, labelled: number): void {
  const { ledger, residency } = s.step;
  const key = `${action.stage}/${action.micro}`;
  const prefix = `stage ${action.stage} micro-batch ${labelled + 1}: `;
  switch (action.kind) {
    case 'forward':
      forwardAction(r, s, action, prefix);
      return;
    case 'backward': {
      const pass = s.passes.get(key)!;
      s.passes.delete(key);
      s.heldGrads.set(key, pass.backward(prefix));
      ledger.record('backward', `${prefix}graph freed`);
      residency.endBackward(prefix, k === s.lastBackward);
      return;
    }
    case 'sent-grad':
      for (const block of s.heldGrads.get(key) ?? []) ledger.release(block);
      s.heldGrads.delete(key);
      return;
    case 'sent-output':
      for (const block of s.heldOutputs.get(key) ?? []) ledger.release(block);
      s.heldOutputs.delete(key);
      return;
  }
}

/** The step's actions in order, after last step's outputs go; then the sends waited on and the outputs merged. */
function runActions(r: RunnerState, step: StepRun): RepeatedSpan | undefined {
  const { ledger } = step;
  const { run } = r;
  const steady = run.steady ?? null;
  const actions = steady?.actions ?? run.actions;
  for (const blocks of r.kept.values()) for (const block of blocks) ledger.release(block);
  r.kept.clear();
  if (run.chunks.some((chunk) => outputsKept(run, chunk))) ledger.record('forward', "pipeline: last step's outputs cleared (clear_runtime_states)");
  const s: StepState = {
    step,
    passes: new Map(),
    heldGrads: new Map(),
    heldOutputs: new Map(),
    sentOutput: new Set(actions.filter((a) => a.kind === 'sent-output').map((a) => `${a.stage}/${a.micro}`)),
    losses: [],
    lastBackward: actions.reduce((last, a, k) => (a.kind === 'backward' ? k : last), -1),
  };
  const at = () => ledger.program().log.length;
  // Log positions of the unit's twin, the unit and its end; the losses the unit keeps.
  const marks: number[] = [];
  const unitLosses = new Set<number>();
  actions.forEach((action, k) => {
    if (steady !== null && (k === steady.check || k === steady.from)) marks.push(at());
    const losses = s.losses.length;
    runAction(r, s, action, k, steady?.micros[k] ?? action.micro);
    if (steady === null || k < steady.from || k >= steady.to) return;
    for (const block of s.losses.slice(losses)) unitLosses.add(block);
    if (k !== steady.to - 1) return;
    marks.push(at());
    // The unit's other copies finish their backwards too (the engines count micro-batches).
    step.countOver((steady.times - 1) * actions.slice(steady.from, steady.to).filter((a) => a.kind === 'backward').length);
  });
  ledger.record('backward', 'pipeline: sends waited on');
  // Each copy of the unit keeps its loss to here: their frees count once per copy.
  const perCopy: number[] = [];
  for (const block of s.losses) {
    if (unitLosses.has(block)) perCopy.push(at());
    ledger.release(block);
  }
  for (const chunk of run.chunks) {
    if (!outputsKept(run, chunk)) continue;
    // step() returns merge_chunks(output_chunks): torch.cat of every micro-batch's output.
    const merged = chunk.outputs.map((t) => ledger.alloc(mul(bytesOf(step, t), step.microBatches), 'activations'));
    ledger.record('backward', `stage ${chunk.stage}: outputs merged (return_outputs)`);
    for (const block of merged) ledger.release(block);
  }
  if (steady === null) return undefined;
  const [check, from, to] = marks as [number, number, number];
  return { check, from, to, times: steady.times, perCopy, relabel: relabelCopy };
}

/**
 * The micro-batches of a pipeline rank's step as `torch.distributed.pipelining` (PyTorch 2.13)
 * runs them: every stage allocates one receive buffer per micro-batch for its input activation
 * (non-first stages) and for the gradient of each output (non-final stages) when the schedule
 * first runs, and keeps them (stage.py `_setup_forward_recv_info`, `_create_grad_recv_info`); the
 * received activation is the stage's input itself, a leaf whose `.grad` becomes the gradient sent
 * back (`stage_backward`), held until its send is waited on; a stage's output stays in
 * `fwd_cache` until its backward; the first stage's micro-batches are views of the whole batch.
 * Returns the two halves simulateStep calls: allocating the inputs, and running the actions (with
 * a steady phase, written once: the span of the log that stands for its periods, and the whole run).
 */
export function pipelineRunner(run: PipelineRun): StepRunner {
  const r: RunnerState = {
    run,
    byStage: new Map(run.chunks.map((c) => [c.stage, c])),
    roots: new Map(),
    received: new Map(),
    gradBuffers: new Map(),
    kept: new Map(),
  };
  const runner = { inputs: (step: StepRun) => allocateInputs(r, step), micro: (step: StepRun) => runActions(r, step) };
  // The same step micro-batch by micro-batch, for what reads every event (timeline, allocator replay).
  return run.steady == null ? runner : { ...runner, whole: pipelineRunner({ ...run, steady: null }) };
}
