import { fail } from '../../errors.js';

/** The pipeline schedules of `torch.distributed.pipelining` that vram-ts replays. */
export type PipelineSchedule = 'gpipe' | '1f1b' | 'interleaved-1f1b';

/**
 * One step of a pipeline rank's schedule: a micro-batch's forward or backward through one of
 * its stages, or the moment a send completes (the tensor it held can go): `sent-grad` the
 * gradient of a stage's input sent back, `sent-output` a stage's output sent on.
 */
export interface PipelineAction {
  readonly kind: 'forward' | 'backward' | 'sent-grad' | 'sent-output';
  /** The global stage index (rank r holds stages r, r + pp, …). */
  readonly stage: number;
  readonly micro: number;
}

/**
 * The actions pipeline rank `rank` of `pp` runs for one step of `microBatches` micro-batches, in
 * the order `torch.distributed.pipelining` (PyTorch 2.13, schedules.py) runs them:
 * - `gpipe` (`ScheduleGPipe`): every forward, then every backward in micro-batch order; the
 *   sends' works (holding each output and each gradient sent back) stay until the step returns.
 * - `1f1b` (`Schedule1F1B`): min(m, pp − rank) forwards, then one backward and one forward in
 *   turn, then the remaining backwards; an output is held until the next forward's, a gradient
 *   sent back until the next backward's (Python's names for the last sends).
 * - `interleaved-1f1b` (`ScheduleInterleaved1F1B`, `_get_1f1b_rank_ops`): `virtualStages` stages
 *   per rank, warm-up (v − 1)·mpr + 2(pp − 1 − rank) forwards capped at m·v, depth first; the
 *   runtime waits on every send when the step ends, so each stage's outputs and input gradients
 *   stay until then.
 *
 * @example
 * ```ts
 * import { pipelineActions } from 'vram-ts/internals';
 * const order = pipelineActions('1f1b', 4, 2, 4).filter((a) => a.kind === 'forward' || a.kind === 'backward');
 * console.log(order.map((a) => `${a.kind[0]}${a.micro}`).join(' ')); // f0 f1 b0 f2 b1 f3 b2 b3
 * ```
 */
export function pipelineActions(schedule: PipelineSchedule, pp: number, rank: number, microBatches: number, virtualStages = 1): readonly PipelineAction[] {
  const m = microBatches;
  if (schedule !== 'interleaved-1f1b' && virtualStages !== 1)
    fail('bad-option', `${schedule} runs one stage per rank`, {
      path: ['parallel', 'virtualStages'],
      expected: '1 (or the interleaved-1f1b schedule)',
      received: String(virtualStages),
    });
  switch (schedule) {
    case 'gpipe': {
      // fwd_sends_to_wait and bwd_sends_to_wait keep every send's work (and its tensor) until step
      // returns; the final stage sends nothing, and `output` holds only the last forward's.
      const final = rank === pp - 1;
      const out: PipelineAction[] = [];
      for (let i = 0; i < m; i += 1) {
        out.push({ kind: 'forward', stage: rank, micro: i });
        if (final && i > 0) out.push({ kind: 'sent-output', stage: rank, micro: i - 1 });
      }
      for (let i = 0; i < m; i += 1) out.push({ kind: 'backward', stage: rank, micro: i });
      for (let i = final ? m - 1 : 0; i < m; i += 1) out.push({ kind: 'sent-output', stage: rank, micro: i });
      for (let i = 0; i < m; i += 1) out.push({ kind: 'sent-grad', stage: rank, micro: i });
      return out;
    }
    case '1f1b':
      // Schedule1F1B.__init__ refuses fewer micro-batches than stages.
      if (m < pp)
        fail('bad-option', `the 1F1B schedule needs at least as many micro-batches as stages (${pp})`, {
          path: ['microBatches'],
          expected: `>= ${pp}`,
          received: String(m),
        });
      return oneForwardOneBackward(pp, rank, m);
    case 'interleaved-1f1b':
      return interleaved(pp, rank, m, virtualStages);
  }
}

/**
 * Schedule1F1B._step_microbatches, action for action. Python's names hold the sends' tensors:
 * `output` and the `fwd_sends` P2POps the last forward's output until the next forward's are
 * made, `bwd_sends` (and the cooldown's `send_work`) the last backward's input gradient until
 * the next backward's, and the warm-up's `send_work` (not rebound by its last forward) the
 * work of forward warmup − 2 until the steady loop ends; the last of each until step returns.
 */
export function oneForwardOneBackward(pp: number, rank: number, m: number): PipelineAction[] {
  const out: PipelineAction[] = [];
  const sentOutput = (micro: number) => out.push({ kind: 'sent-output', stage: rank, micro });
  const warmup = Math.min(m, pp - rank);
  const heldByWork = warmup >= 2 ? warmup - 2 : -1;
  const forward = (micro: number) => {
    out.push({ kind: 'forward', stage: rank, micro });
    if (micro > 0 && micro - 1 !== heldByWork) sentOutput(micro - 1);
  };
  const backward = (micro: number) => {
    out.push({ kind: 'backward', stage: rank, micro });
    if (micro > 0) out.push({ kind: 'sent-grad', stage: rank, micro: micro - 1 });
  };
  let f = 0;
  let b = 0;
  for (let k = 0; k < warmup; k += 1) forward(f++);
  for (;;) {
    backward(b++);
    if (f === m) break;
    forward(f++);
  }
  // send_work = _batch_p2p(bwd_sends) lets the warm-up's last kept work go.
  if (heldByWork >= 0) sentOutput(heldByWork);
  while (b < m) backward(b++);
  out.push({ kind: 'sent-output', stage: rank, micro: m - 1 }, { kind: 'sent-grad', stage: rank, micro: m - 1 });
  return out;
}

/** ScheduleInterleaved1F1B._calculate_single_rank_operations without its idle slots. */
function interleaved(pp: number, rank: number, m: number, v: number): PipelineAction[] {
  const rounds = Math.max(1, Math.floor(m / pp));
  if (m % rounds !== 0)
    fail('bad-option', `the interleaved 1F1B schedule needs the micro-batches to be a multiple of its rounds (max(1, m // pp) = ${rounds})`, {
      path: ['microBatches'],
      expected: `a multiple of ${rounds}`,
      received: String(m),
    });
  const perRound = m / rounds;
  const warmup = Math.min((v - 1) * perRound + 2 * (pp - 1 - rank), m * v);
  const total = v * m;
  const forwardStage = (step: number) => (Math.floor(step / perRound) % v) * pp + rank;
  const backwardStage = (step: number) => (v - 1 - (Math.floor((step - warmup) / perRound) % v)) * pp + rank;
  const forwards = new Map<number, number>();
  const backwards = new Map<number, number>();
  const next = (counts: Map<number, number>, stage: number) => {
    const micro = counts.get(stage) ?? 0;
    counts.set(stage, micro + 1);
    return micro;
  };
  const out: PipelineAction[] = [];
  for (let op = 0; op < warmup + total; op += 1) {
    if (op < total) {
      const stage = forwardStage(op);
      out.push({ kind: 'forward', stage, micro: next(forwards, stage) });
    }
    if (op >= warmup) {
      const stage = backwardStage(op);
      out.push({ kind: 'backward', stage, micro: next(backwards, stage) });
    }
  }
  // _PipelineScheduleRuntime waits on its sends when the step ends.
  for (let c = 0; c < v; c += 1) {
    for (let i = 0; i < m; i += 1) {
      out.push({ kind: 'sent-output', stage: c * pp + rank, micro: i });
      out.push({ kind: 'sent-grad', stage: c * pp + rank, micro: i });
    }
  }
  return out;
}

/**
 * How many micro-batches' activations a rank holds at most (forwards whose backward has not
 * run yet), per its actions.
 *
 * @example
 * ```ts
 * import { inFlight, pipelineActions } from 'vram-ts/internals';
 * console.log(inFlight(pipelineActions('1f1b', 4, 0, 8)), inFlight(pipelineActions('gpipe', 4, 0, 8))); // 4 8
 * ```
 */
export function inFlight(actions: readonly PipelineAction[]): number {
  let live = 0;
  let most = 0;
  for (const a of actions) {
    if (a.kind === 'forward') most = Math.max(most, ++live);
    if (a.kind === 'backward') live -= 1;
  }
  return most;
}
