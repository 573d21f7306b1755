import type { Dim } from '../sym/expr.js';
import { floorDiv, mul } from '../sym/ops.js';
import { DTYPE_BITS, type DType } from '../tensor/dtype.js';
import type { IR, IRStorage } from '../trace/ir.js';
import type { ReducedBlocks } from '../trace/blocks.js';
import { forwardBackward } from './autograd.js';
import { resultsOnly, runKernel } from './kernel.js';
import { MARK, createLedger, zeroTotals, type Ledger, type PeakPoint, type StepProgram } from './ledger.js';
import type { OptimizerSpec } from './optimizers.js';
import { programEnds, programPeak } from './peak.js';
import { once, spanRepetition, sweepConcrete, withBytes, type LogSpan, type Repetition } from './program.js';
import { singleDevice } from './residency/single.js';
import { withDefaults, type EngineHooks, type HostBytes, type RankContext, type Residency } from './residency/types.js';
import { idBlocks, planOf, viewKeeper, type IdBlocks, type Plan } from './step-plan.js';

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
  /** How the device holds parameters, gradients and optimizer state (default: one device holding all). */
  readonly residency?: (ctx: RankContext) => EngineHooks;
  /**
   * The dtype buffers traced in the parameter dtype are kept in (FSDP2 mixed precision casts
   * parameters for compute; the module's floating buffers keep the model's dtype).
   */
  readonly bufferDtype?: DType;
  /**
   * Runs the step's micro-batches and allocates the model's inputs (default: one input, the
   * micro-batches one after another, as gradient accumulation does). A pipeline rank replays
   * its schedule here.
   */
  readonly run?: StepRunner;
}

/**
 * A step's own micro-batches (a pipeline rank's schedule): `micro` may write a steady phase once
 * and return the span of the log that stands for its copies; `whole` is then the same runner
 * writing every copy out (what reads every event runs it: the timeline, the allocator's replay).
 */
export interface StepRunner {
  readonly inputs: (step: StepRun) => void;
  readonly micro: (step: StepRun) => RepeatedSpan | undefined;
  readonly whole?: StepRunner;
}

/**
 * Log entries `[from, to)` that happen `times` times in a row in the step (each copy logging the
 * same sizes, its events' micro-batches `copy` on: `relabel`), written once; `[check, from)` is the
 * copy before, logged out, which must match it (else the step is simulated whole). `perCopy`: the
 * later frees of what each copy keeps to the step's end (written for copy 0, they count `times` over).
 */
export type RepeatedSpan = LogSpan;

/** What a step's micro-batches run with: the shared storages (buffers) in `storageBlock`. */
export interface StepRun {
  readonly ir: IR;
  readonly plan: Plan;
  readonly ledger: Ledger;
  readonly residency: Residency;
  readonly storageBlock: IdBlocks;
  readonly opUnit: Int8Array | null;
  readonly microBatches: number;
  /** Micro-batches a repeated span's unwritten copies finish (counted for the engines: RankContext.microDone). */
  readonly countOver: (microBatches: number) => void;
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
  /** With a repeated span: the same step simulated whole, every event written out (made when asked for). */
  readonly full?: () => StepResult;
  /** Training: bytes of the optimizer state on the device (of the full model, with reduced blocks). */
  readonly optimizerState?: Dim;
  /** Training under a sharding engine: the parameters and gradients this device keeps. */
  readonly resident?: { readonly parameters: Dim; readonly gradients: Dim };
  /** Training with offloading: what the device's rank keeps in host memory. */
  readonly host?: HostBytes;
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
  const kept = settings.bufferDtype;
  const bufferBytes = (s: IRStorage) =>
    kept === undefined || s.dtype !== ir.settings.paramDtype || kept === s.dtype ? s.bytes : floorDiv(mul(s.bytes, DTYPE_BITS[kept]), DTYPE_BITS[s.dtype]);
  let microDone = 0;
  const trainable = (param: number) => ir.storages[ir.tensors[param]!.storage]!.trainable;
  const engine = withDefaults(
    (settings.residency ?? singleDevice)({
      ir,
      plan,
      ledger,
      optimizer: settings.optimizer,
      owner: ownerOf,
      times: blocks?.times ?? 1,
      microBatches: Math.max(1, settings.microBatches ?? 1),
      unitOfOp: blocks === undefined ? null : (op) => blocks.opUnit[op]!,
      microDone: () => microDone,
      trainable,
    }),
  );
  // The simulator counts micro-batches for every engine: reset at zero_grad, one more after each backward.
  const residency: Residency = {
    ...engine,
    zeroGrad() {
      microDone = 0;
      engine.zeroGrad();
    },
    endBackward(micro, last) {
      engine.endBackward(micro, last);
      microDone += 1;
    },
  };
  const storageBlock = idBlocks(ir.storages.length);
  for (const s of ir.storages) {
    if (s.role === 'param') residency.param(s.id);
    if (s.role === 'buffer') storageBlock.set(s.id, ledger.alloc(bufferBytes(s), 'buffers', 1, ownerOf(s.id)));
    if (s.role === 'input' && settings.run === undefined) storageBlock.set(s.id, ledger.alloc(s.bytes, 'input', 1, ownerOf(s.id)));
  }
  const micro = Math.max(1, settings.microBatches ?? 1);
  const opUnit = blocks?.opUnit ?? null;
  const countOver = (count: number) => {
    microDone += count;
  };
  const run: StepRun = { ir, plan, ledger, residency, storageBlock, opUnit, microBatches: micro, countOver };
  settings.run?.inputs(run);
  const { grads: gradBlocks, state: stateBlocks } = residency.start();
  ledger.record('start', 'before the step');

  residency.zeroGrad();
  ledger.record('zero_grad', 'zero_grad(set_to_none=True)');

  let span: RepeatedSpan | undefined;
  if (settings.run !== undefined) span = settings.run.micro(run);
  else {
    for (let m = 0; m < micro; m += 1) {
      const prefix = micro > 1 ? `micro-batch ${m + 1}: ` : '';
      forwardBackward({ ir, plan, ledger, storageBlock, residency, micro: prefix, opUnit });
      residency.endBackward(prefix, m === micro - 1);
    }
  }

  const stepMark = ledger.program().events.length;
  ledger.record('step', 'optimizer step begins');
  residency.step();
  ledger.record('end', 'after the step');
  const program = ledger.program();
  const whole = settings.run?.whole;
  if (span !== undefined && whole === undefined) throw new Error('simulateStep: a repeated span without the whole runner (a bug)');
  const spanned = span === undefined || blocks !== undefined ? undefined : spanRepetition(program, span);
  // A span that did not log as its twin (or over reduced blocks): the step simulated whole instead.
  if (span !== undefined && spanned === undefined) return simulateStep(ir, { ...settings, run: whole! });
  const repeat = spanned ?? repetition(ledger, blocks);
  const peakExpression = settings.peakExpression ?? true;
  const steady = finish(program, repeat, peakExpression);
  const full = whole === undefined || spanned === undefined ? undefined : once(() => simulateStep(ir, { ...settings, run: whole }));
  const first = once(() => firstStep(program, repeat, new Set(gradBlocks), stateBlocks, stepMark, peakExpression));
  // Added to the result, not spread into a copy: its symbolic totals are made when read.
  return Object.assign(steady, {
    optimizerState: residency.optimizerState(),
    ...(residency.resident !== undefined ? { resident: residency.resident() } : {}),
    ...(residency.host !== undefined ? { host: residency.host() } : {}),
    first: full === undefined ? first : once(() => Object.assign(first(), { full: () => full().first!() })),
    ...(full !== undefined ? { full } : {}),
  });
}

/**
 * The first step from the steady one: the same allocations without last step's gradients,
 * and with the optimizer state created lazily as the step begins.
 */
function firstStep(
  program: StepProgram,
  repeat: Repetition | undefined,
  gradBlocks: ReadonlySet<number>,
  stateBlocks: readonly number[],
  stepMark: number,
  peakExpression: boolean,
): StepResult {
  // Flags by block id: 1 = a gradient (never freed before the step), 2 = optimizer state (born at the step).
  const kind = new Uint8Array(program.sizes.length);
  for (const block of gradBlocks) kind[block] = 1;
  for (const block of stateBlocks) kind[block] = 2;
  const owner = new Int8Array(program.sizes.length).fill(-1);
  if (repeat !== undefined)
    program.log.forEach((entry, k) => {
      if (entry >= 0) owner[entry] = repeat.units[k]!;
    });
  const log: number[] = [];
  const units: number[] = [];
  let event = 0;
  program.log.forEach((entry, k) => {
    if (entry === MARK) {
      if (event === stepMark)
        for (const block of stateBlocks) {
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
    // Autocast's 16-bit weight copies (cached to the forward's end, or for this op only).
    for (const id of op.extras) {
      const storage = ir.tensors[id]!.storage;
      if (!storageBlock.has(storage)) storageBlock.set(storage, ledger.alloc(ir.storages[storage]!.bytes, 'activations'));
    }
    const free = (storage: number) => {
      const block = storageBlock.get(storage);
      if (block === undefined || plan.pinned[storage] || outputs.has(storage)) return;
      storageBlock.delete(storage);
      keepViews(storage);
      ledger.release(block);
    };
    const releaseInput = (k: number) => {
      const storage = ir.tensors[op.inputs[k]!]!.storage;
      if (plan.lastUse[storage] === op.index) free(storage);
    };
    if (resultsOnly(op.forwardSteps)) makeOutputs();
    else runKernel(ledger, op.forwardSteps, 'forward', plan.labels[op.index]!, { outputs: makeOutputs, releaseInput });
    // Ops after the model's forward returned (a trainer's loss on the logits) are the `loss` phase.
    ledger.record(op.stage === 'loss' ? 'loss' : 'forward', plan.labels[op.index]!);
    for (let k = plan.dieStart[op.index]!; k < plan.dieStart[op.index + 1]!; k += 1) free(plan.dying[k]!);
  }
  if (blocks !== undefined) ledger.setUnit(-1);
  ledger.record('end', 'after the forward');
  const repeat = repetition(ledger, blocks);
  return finish(ledger.program(), repeat, peakExpression);
}
