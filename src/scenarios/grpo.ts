/** A GRPO-style RL step on one GPU: generation, the reference model's forward and the training step, each from estimate(). */
import { estimate } from '../estimate.js';
import type { EstimateOptions } from '../estimate-types.js';
import { grpoOptions } from '../estimate-options.js';
import { validate } from '../validate.js';
import { sum } from '../sym/ops.js';
import type { Layer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import { generation } from './generation.js';

/** Options of {@link grpoStep}. */
export interface GrpoOptions extends Omit<EstimateOptions, 'input' | 'mode'> {
  /** Prompts per step. */
  readonly prompts: number;
  /** Completions sampled per prompt (the group G). */
  readonly group: number;
  /** Prompt tokens. */
  readonly prompt: number;
  /** Completion tokens (L). */
  readonly completion: number;
  /** Keep a frozen reference model for the KL term (default true). */
  readonly reference?: boolean;
  /** KV cache element type (default: the model's dtype). */
  readonly kvDtype?: DType;
  /** Sequences per training (and reference) forward; the rest is gradient accumulation (default: all). */
  readonly microBatch?: number;
}

/** One phase of a GRPO step and what is resident beside it. */
export interface GrpoPhase {
  readonly peak: number;
  readonly detail: string;
}

/** A GRPO step, phase by phase. */
export interface GrpoEstimate {
  /** Sequences in the step: prompts × group. */
  readonly sequences: number;
  readonly generation: GrpoPhase;
  readonly reference: GrpoPhase;
  readonly training: GrpoPhase;
  /** The largest of the three. */
  readonly peak: number;
}

/**
 * A GRPO-style RL step on one GPU (TRL's GRPOTrainer without vLLM): generate `group`
 * completions per prompt with a KV cache, score them with a frozen reference model, then a
 * training step over the prompt + completion sequences. The policy's training state
 * (weights, gradients from the last step, optimizer state) stays resident throughout, and so
 * do the reference weights.
 *
 * @example
 * ```ts
 * import { grpoStep, llm } from 'vram-ts';
 * const g = grpoStep(llm('qwen2.5-0.5b'), { prompts: 1, group: 8, prompt: 256, completion: 1024, precision: 'bf16' });
 * console.log(g.peak === Math.max(g.generation.peak, g.reference.peak, g.training.peak)); // true
 * ```
 */
export function grpoStep(model: Layer, options: GrpoOptions): GrpoEstimate {
  validate(options, grpoOptions);
  const { prompts, group, prompt, completion, reference = true, kvDtype, microBatch, ...rest } = options;
  const sequences = prompts * group;
  const length = prompt + completion;
  const micro = Math.min(sequences, microBatch ?? sequences);
  const train = estimate(model, { ...rest, input: [micro, length], mode: 'train', timeline: false });
  const steady = train.steps.steady!;
  const resident = steady.baseline as number;
  const weights = sum([train.bytes.parameters, train.bytes.buffers]) as number;
  const referenceWeights = reference ? weights : 0;
  const gen = generation(model, { ...rest, batch: sequences, prompt, generate: completion, ...(kvDtype !== undefined ? { kvDtype } : {}) });
  const refRun = estimate(model, { ...rest, input: [micro, length], mode: 'inference', timeline: false });
  const refActivations = (refRun.bytes.peak as number) - (refRun.steps.inference!.baseline as number);
  const generationPeak = resident + referenceWeights + (gen.decode.peak - gen.weights);
  const referencePeak = resident + referenceWeights + refActivations;
  const trainingPeak = (train.bytes.peak as number) + referenceWeights;
  return {
    sequences,
    generation: {
      peak: generationPeak,
      detail: `policy state ${formatBytesInline(resident)} + reference weights ${formatBytesInline(referenceWeights)} + KV cache ${formatBytesInline(gen.decode.kvCache)} for ${sequences} × ${length} tokens + decode step`,
    },
    reference: {
      peak: referencePeak,
      detail: `policy state + reference weights + the reference model's no-grad forward over ${micro} × ${length} tokens (${formatBytesInline(refActivations)})`,
    },
    training: { peak: trainingPeak, detail: `the policy's training step over ${micro} × ${length} tokens at a time, reference weights resident` },
    peak: Math.max(generationPeak, referencePeak, trainingPeak),
  };
}

function formatBytesInline(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}
