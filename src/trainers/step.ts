/**
 * What every trainer shares: the estimate options its arguments mean (precision, optimizer,
 * checkpointing, LoRA, accumulation), the phases of one simulated step read off its timeline, and
 * the phase records the trainers return.
 */
import { estimate } from '../estimate.js';
import type { Estimate, EstimateOptions } from '../estimate-types.js';
import type { Phase, TimelineEvent } from '../memory/ledger.js';
import type { OptimizerSpec } from '../memory/optimizers.js';
import type { LmHead, ModuleLayer } from '../nn/types.js';
import type { Device } from '../ops/types.js';
import { fail } from '../errors.js';
import { decoderModel, optionsObject } from '../catalog/decoder-check.js';
import { type Check, object, oneOf, string, validate } from '../validate.js';
import { loraOrNull, type ResolvedTrainerArgs } from './args.js';

/** A phase of a trainer's step (names as the trainers' methods: see each trainer). */
export type TrainerPhaseName =
  | 'weight_sync'
  | 'generate'
  | 'prefill'
  | 'decode'
  | 'rollout'
  | 'old_logps'
  | 'ref_logps'
  | 'forward'
  | 'backward'
  | 'clip'
  | 'optimizer'
  | 'zero_grad';

/** One phase: the live bytes as it begins and at its highest point, and what is resident. */
export interface TrainerPhase {
  readonly name: TrainerPhaseName;
  readonly start: number;
  readonly peak: number;
  readonly detail: string;
}

/** What stays allocated through a step, by kind. */
export interface TrainerResident {
  readonly parameters: number;
  readonly buffers: number;
  readonly optimizer: number;
  /** The gradients while they exist (backward to zero_grad, which the Trainer runs at the end of a step). */
  readonly gradients: number;
  /** GRPO with beta ≠ 0 and no PEFT: the reference model's weights. */
  readonly reference: number;
  /** The batch tensors the trainer holds beyond what the model reads (attention mask, labels, generated completions). */
  readonly batch: number;
  /** A rollout engine colocated on this GPU (GRPO with vLLM colocate): its whole share. */
  readonly rollout?: number;
}

/** A trainer's step, phase by phase. */
export interface TrainerStepEstimate {
  readonly trainer: ResolvedTrainerArgs['trainer'];
  readonly args: ResolvedTrainerArgs;
  readonly params: Estimate['params'];
  readonly resident: TrainerResident;
  readonly phases: readonly TrainerPhase[];
  /** The highest phase peak, and the phase. */
  readonly peak: number;
  readonly peakPhase: TrainerPhaseName;
  /** Live bytes between two steps (the Trainer has freed the gradients). */
  readonly between: number;
}

/**
 * Options around a trainer's arguments. Every trainer step weighs the model's parameters in float32,
 * whatever dtype the model was built with (the Trainer's `bf16` is autocast over them; a model loaded
 * in 16 bits is not modelled: the CLI refuses `--dtype` other than float32).
 */
export interface TrainerOptions {
  /** TRL release whose trainers and defaults to follow (default {@link DEFAULT_TRL}). */
  readonly trl?: string;
  /** PEFT's LoraConfig, as passed to the trainer (`peft_config=`) or to `get_peft_model`. */
  readonly peft?: Readonly<Record<string, unknown>> | null;
  /** Where the step runs (default `cuda`); `cpu` follows PyTorch's CPU kernels, as the oracle measures. */
  readonly device?: Device;
}

/**
 * What a trainer step checks first: its model, a decoder from the catalog (at `model`), and its
 * options (at `options`): the fields every trainer shares (`trl`, `peft`, `device`) and `own`.
 */
export function stepInputs(model: unknown, options: unknown, own: Readonly<Record<string, Check>>, required: readonly string[], who: string): ModuleLayer {
  const checked = decoderModel(model, ['model'], who);
  const shape = object({ fields: { trl: string, peft: loraOrNull, device: oneOf(['cuda', 'cpu'], 'device'), ...own }, required });
  validate(optionsObject(options, ['options']), shape, ['options']);
  return checked;
}

/** The options resolveTrainerArgs reads from a step's (the release and PEFT's LoraConfig). */
export function releaseOptions(o: TrainerOptions): Pick<TrainerOptions, 'trl' | 'peft'> {
  return { ...(o.trl !== undefined ? { trl: o.trl } : {}), ...(o.peft !== undefined ? { peft: o.peft } : {}) };
}

/** The torch optimizer an `optim` value builds on `device`: torch's defaults pick foreach only for CUDA tensors. */
export function optimizerOf(optim: ResolvedTrainerArgs['optim'], device: Device): OptimizerSpec {
  const impl = device === 'cuda' ? 'foreach' : 'for-loop';
  if (optim === 'adamw_torch_fused') return { name: 'adamw', impl: 'fused' };
  if (optim === 'adamw_torch') return { name: 'adamw', impl };
  return { name: 'sgd', impl };
}

/** The estimate options of a training forward and backward with the trainer's arguments. */
export function stepOptions(r: ResolvedTrainerArgs, input: readonly [number, number], device: Device, microBatches: number, layers: number): EstimateOptions {
  return {
    input,
    mode: 'train',
    device,
    precision: r.bf16 ? 'amp-bf16' : 'fp32',
    optimizer: optimizerOf(r.optim, device),
    microBatches,
    timeline: true,
    // transformers' gradient_checkpointing_enable: every decoder layer one non-reentrant checkpoint.
    ...(r.checkpointing ? { checkpoint: { modules: Array.from({ length: layers }, (_, i) => `model.layers.${i}`) } } : {}),
    ...(r.lora !== undefined
      ? { lora: { rank: r.lora.rank, dropout: r.lora.dropout, ...(r.lora.targets !== undefined ? { targets: r.lora.targets } : {}) } }
      : {}),
  };
}

/** Liger's kernels need Triton on a GPU: a CPU step with them is not something PyTorch runs. */
export function checkLiger(r: ResolvedTrainerArgs, device: Device): void {
  if (r.liger && device !== 'cuda')
    fail('bad-option', "use_liger_kernel runs Triton kernels: only on device 'cuda'", {
      path: ['options', 'device'],
      expected: "'cuda'",
      received: JSON.stringify(device),
    });
}

/** The decoder layers of a causal LM (its meta). */
export function layersOf(model: ModuleLayer): number {
  return (
    model.meta?.layers ??
    fail('not-modelled', 'a trainer step needs a decoder catalog model (its meta names the layers)', { path: ['model'], received: model.className })
  );
}

/** The model with another head; a model that cannot be re-headed is an error. */
export function withHead(model: ModuleLayer, head: LmHead, trainer: string): ModuleLayer {
  if (model.withHead === undefined)
    fail('not-modelled', `${trainer} needs a Llama-family causal LM (llm(), fromHFConfig(), llamaFamily()): this model cannot change its head`, {
      path: ['model'],
      received: model.className,
    });
  return model.withHead(head);
}

/** Highest and first live totals of each phase of a simulated step's timeline. */
export function phaseTotals(timeline: readonly TimelineEvent[]): Map<Phase, { start: number; peak: number; end: number }> {
  const out = new Map<Phase, { start: number; peak: number; end: number }>();
  let previous = 0;
  for (const e of timeline) {
    const live = e.live as number;
    const seen = out.get(e.phase);
    if (seen === undefined) out.set(e.phase, { start: previous, peak: live, end: live });
    else {
      seen.peak = Math.max(seen.peak, live);
      seen.end = live;
    }
    previous = live;
  }
  return out;
}

/** The estimate of one step. */
export function runStep(model: ModuleLayer, options: EstimateOptions): Estimate<number> {
  return estimate(model, options) as Estimate<number>;
}
