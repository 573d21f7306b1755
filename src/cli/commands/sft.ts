/** `vram-ts sft <model>`: one SFTTrainer step from SFTConfig's own fields. */
import { sftStep } from '../lib.js';
import { DEFAULTS, type Values } from '../flags.js';
import { SFT_HELP } from '../help.js';
import type { ModelRef } from '../model.js';
import { trainerInput, trainerModel, trainerOutcome, withOrigins } from '../trainer.js';
import { count, formatOf } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';

function runSft(ref: ModelRef, values: Values): Outcome {
  const format = formatOf(values, 'sft', DEFAULTS.format);
  const input = trainerInput(values, 'sft');
  const sequence = values.sequence === undefined ? undefined : count(values, 'sequence', 1);
  const model = trainerModel(ref, input);
  const s = withOrigins(input, () => sftStep(model, input.config, { ...input.options, ...(sequence !== undefined ? { sequence } : {}) }));
  const tokens = s.args.maxLength === null || s.args.maxLength === undefined ? sequence : Math.min(sequence ?? s.args.maxLength, s.args.maxLength);
  const title = `SFTTrainer step of ${ref.name} (TRL ${s.args.trl}): ${s.args.batch} × ${tokens} tokens, loss ${s.args.sftLoss}`;
  return trainerOutcome(values, format, title, s, [`Gradient accumulation: ${s.args.accumulation} micro-batches per optimizer step`]);
}

/** One SFTTrainer step: forward and loss, backward, clipping, the optimizer, zero_grad. */
export const sftCommand: ModelCommand<'sft'> = {
  name: 'sft',
  summary: "an SFTTrainer step from SFTConfig's fields",
  named: 'sft',
  help: SFT_HELP,
  words: 1,
  model: true,
  run: runSft,
};
