/**
 * transformers' `Trainer` step (5.18 trainer.py `_inner_training_loop`): the accumulation's
 * micro-batches fetched up front, forward and loss (`compute_loss`), backward, gradient
 * clipping, the optimizer step, and `model.zero_grad()` at the END of the step — so between steps
 * no gradient exists.
 */
import { blockBytes } from '../memory/ledger.js';
import type { ModuleLayer } from '../nn/types.js';
import type { Device } from '../ops/types.js';
import { fail } from '../errors.js';
import { resolveTrainerArgs, type ResolvedTrainerArgs, type TrainerArgs } from './args.js';
import { integer } from '../validate.js';
import {
  checkLiger,
  layersOf,
  phaseTotals,
  releaseOptions,
  runStep,
  stepInputs,
  stepOptions,
  withHead,
  type TrainerOptions,
  type TrainerPhase,
  type TrainerStepEstimate,
} from './step.js';
import type { Estimate } from '../estimate-types.js';

/** Options of {@link trainerStep}. */
export interface TrainerStepOptions extends TrainerOptions {
  /** Tokens per example (every example this long: the batch's padded length). */
  readonly sequence: number;
}

/**
 * The bytes the Trainer's batches hold beyond the input ids the model reads: every micro-batch
 * of the step is fetched before the first forward (`get_batch_samples`), and accelerate's loader
 * has read one more ahead (accelerate data_loader.py:584-600), each with input_ids,
 * attention_mask and labels (int64 [B, S]); `num_items_in_batch` (int64 scalars).
 */
export function trainerBatchBytes(batch: number, sequence: number, accumulation: number, device: Device): number {
  const rounded = device === 'cuda';
  const ids = blockBytes(batch * sequence * 8, rounded) as number;
  return (3 * (accumulation + 1) - 1) * ids + 2 * (blockBytes(8, rounded) as number);
}

/**
 * `clip_grad_norm_` (torch/nn/utils/clip_grad.py, foreach): one 0-dim norm per gradient, their
 * stack, the total norm; the gradients are scaled in place.
 */
export function clipBytes(gradients: number, device: Device): number {
  const rounded = device === 'cuda';
  return gradients * (blockBytes(4, rounded) as number) + (blockBytes(gradients * 4, rounded) as number) + (blockBytes(4, rounded) as number);
}

/** The trainable parameter tensors of an estimate's IR (what `clip_grad_norm_` walks). */
export function gradientTensors(e: Estimate<number>): number {
  return e.ir.storages.filter((s) => s.role === 'param' && s.trainable).length;
}

/**
 * The Trainer's phases from the step's estimate: forward+loss, backward, clip, optimizer,
 * zero_grad at the end. `extra`: the trainer's tensors through the step (its batches);
 * `persistent`: those of them kept between steps.
 */
export function trainerPhases(
  e: Estimate<number>,
  r: ResolvedTrainerArgs,
  extra: number,
  device: Device,
  persistent = 0,
): { phases: TrainerPhase[]; between: number } {
  const totals = phaseTotals(e.timeline);
  const get = (p: Parameters<typeof totals.get>[0]) => totals.get(p) ?? fail('internal', `no ${p} phase in the step`);
  const zero = get('zero_grad');
  const forward = get('forward');
  const loss = totals.get('loss');
  const backward = get('backward');
  const step = get('step');
  const after = totals.get('end') ?? step;
  // The step's batches go with the step (the model's input ids among them); what the trainer keeps
  // across steps (`persistent`) stays.
  const between = zero.end - e.bytes.input + persistent;
  // Without clipping the Trainer still takes the norm for its logs (trainer.py `_get_grad_norm`).
  const clip = clipBytes(gradientTensors(e), device);
  const phases: TrainerPhase[] = [
    { name: 'forward', start: zero.end + extra, peak: Math.max(forward.peak, loss?.peak ?? 0) + extra, detail: 'compute_loss: the forward and the loss' },
    { name: 'backward', start: (loss ?? forward).end + extra, peak: backward.peak + extra, detail: 'accelerator.backward' },
  ];
  phases.push({
    name: 'clip',
    start: backward.end + extra,
    peak: backward.end + extra + clip,
    detail: r.maxGradNorm > 0 ? 'clip_grad_norm_ (foreach norms)' : 'the gradient norm for the logs (max_grad_norm 0: no clipping)',
  });
  phases.push(
    { name: 'optimizer', start: backward.end + extra, peak: step.peak + extra, detail: 'optimizer.step' },
    { name: 'zero_grad', start: after.end + extra, peak: after.end + extra, detail: 'model.zero_grad() at the end of the step' },
  );
  return { phases, between };
}

/** The resident bytes of a step's estimate. */
export function residentOf(e: Estimate<number>, extra: number, reference = 0): TrainerStepEstimate['resident'] {
  return { parameters: e.bytes.parameters, buffers: e.bytes.buffers, optimizer: e.bytes.optimizer, gradients: e.bytes.gradients, reference, batch: extra };
}

/** A Trainer-shaped step's result (the Trainer's, SFTTrainer's): its batches, phases, resident bytes and peak. */
export function trainerResult(trainer: 'trainer' | 'sft', r: ResolvedTrainerArgs, e: Estimate<number>, sequence: number, device: Device): TrainerStepEstimate {
  const extra = trainerBatchBytes(r.batch, sequence, r.accumulation, device);
  const { phases, between } = trainerPhases(e, r, extra, device);
  return { trainer, args: r, params: e.params, resident: residentOf(e, extra), phases, ...peakOf(phases), between };
}

/** The highest phase. */
export function peakOf(phases: readonly TrainerPhase[]): Pick<TrainerStepEstimate, 'peak' | 'peakPhase'> {
  let best = phases[0]!;
  for (const p of phases) if (p.peak > best.peak) best = p;
  return { peak: best.peak, peakPhase: best.name };
}

/**
 * One step of transformers' `Trainer` (causal LM, labels = the input ids), from its own
 * `TrainingArguments` fields: `per_device_train_batch_size`, `gradient_accumulation_steps`,
 * `gradient_checkpointing`, `bf16` (accelerate's autocast), `optim` (default
 * `adamw_torch_fused`), `max_grad_norm`; PEFT's LoraConfig as `options.peft`. Any other field
 * must be at its default or not memory-relevant; an unknown field is an error naming it.
 *
 * @example
 * ```ts
 * import { llm, trainerStep } from 'vram-ts';
 * const t = trainerStep(llm('qwen2.5-0.5b'), { per_device_train_batch_size: 2, bf16: true }, { sequence: 1024 });
 * console.log(t.phases.map((p) => p.name).join(' ')); // forward backward clip optimizer zero_grad
 * ```
 */
export function trainerStep(model: ModuleLayer, args: TrainerArgs, options: TrainerStepOptions): TrainerStepEstimate {
  stepInputs(model, options, { sequence: integer(2) }, ['sequence'], 'trainerStep');
  const r = resolveTrainerArgs('trainer', args, releaseOptions(options));
  const device = options.device ?? 'cuda';
  const sequence = options.sequence;
  checkLiger(r, device);
  // use_liger_kernel: transformers patches the forward with Liger's fused linear cross-entropy (no logits in training).
  const headed = r.liger
    ? withHead(model, { kind: 'liger-flce', autocast: r.bf16 }, 'trainerStep')
    : r.bf16
      ? withHead(model, { kind: 'loss', autocast: true }, 'trainerStep')
      : model;
  const e = runStep(headed, stepOptions(r, [r.batch, sequence], device, r.accumulation, layersOf(model)));
  return trainerResult('trainer', r, e, sequence, device);
}
