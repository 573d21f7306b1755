/**
 * TRL's SFTTrainer step (TRL 1.13 sft_trainer.py): the Trainer's step with SFTConfig's defaults
 * (gradient checkpointing and bf16 on) and its losses — `chunked_nll` (the default: lm_head and
 * the cross entropy in checkpointed chunks of 256 tokens, full logits never exist) or `nll`
 * (transformers' loss, then the entropy and accuracy metrics on a copy of the shifted logits).
 */
import type { ModuleLayer } from '../nn/types.js';
import { fail } from '../errors.js';
import { resolveTrainerArgs, type TrainerArgs } from './args.js';
import { integer } from '../validate.js';
import { checkLiger, layersOf, releaseOptions, runStep, stepInputs, stepOptions, withHead, type TrainerOptions, type TrainerStepEstimate } from './step.js';
import { trainerResult } from './trainer.js';

/** Options of {@link sftStep}. */
export interface SftStepOptions extends TrainerOptions {
  /** Tokens per example (default SFTConfig's `max_length`; longer examples are truncated to it). */
  readonly sequence?: number;
}

/**
 * One SFTTrainer step from SFTConfig's own fields (`per_device_train_batch_size`,
 * `gradient_accumulation_steps`, `gradient_checkpointing` (default on), `bf16` (default on),
 * `optim`, `max_grad_norm`, `loss_type` (default `chunked_nll`), `max_length`) and PEFT's
 * LoraConfig as `options.peft`.
 *
 * @example
 * ```ts
 * import { llm, sftStep } from 'vram-ts';
 * const s = sftStep(llm('qwen2.5-0.5b'), { per_device_train_batch_size: 4, max_length: 2048 });
 * console.log(s.args.sftLoss, s.args.checkpointing); // chunked_nll true
 * ```
 */
export function sftStep(model: ModuleLayer, config: TrainerArgs, options: SftStepOptions = {}): TrainerStepEstimate {
  stepInputs(model, options, { sequence: integer(2) }, [], 'sftStep');
  const r = resolveTrainerArgs('sft', config, releaseOptions(options));
  const device = options.device ?? 'cuda';
  const max = r.maxLength ?? undefined;
  const given = options.sequence;
  const sequence = given === undefined ? max : max === undefined ? given : Math.min(given, max);
  if (sequence === undefined)
    return fail('bad-option', 'max_length is null: give the tokens per example', { path: ['options', 'sequence'], expected: 'an integer ≥ 2' });
  checkLiger(r, device);
  // With Liger the loss is its fused linear cross-entropy and no logits come back (no metrics on them).
  const head = r.liger
    ? ({ kind: 'liger-flce', autocast: r.bf16 } as const)
    : r.sftLoss === 'chunked_nll'
      ? ({ kind: 'chunked-nll', chunk: 256, autocast: r.bf16 } as const)
      : ({ kind: 'loss-metrics', autocast: r.bf16 } as const);
  const e = runStep(withHead(model, head, 'sftStep'), stepOptions(r, [r.batch, sequence], device, r.accumulation, layersOf(model)));
  return trainerResult('sft', r, e, sequence, device);
}
