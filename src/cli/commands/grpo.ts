/** `vram-ts grpo <model>`: one GRPOTrainer step from GRPOConfig's own fields (generation, the log-probabilities, training). */
import { formatBytes, GPUS, grpoStep } from '../lib.js';
import { DEFAULTS, type Values } from '../flags.js';
import { GRPO_HELP } from '../help.js';
import type { ModelRef } from '../model.js';
import { trainerInput, trainerModel, trainerOutcome, withOrigins } from '../trainer.js';
import { count, formatOf } from '../values.js';
import { gpuBudget } from '../args.js';
import type { ModelCommand, Outcome } from './command.js';

function runGrpo(ref: ModelRef, values: Values): Outcome {
  const format = formatOf(values, 'grpo', DEFAULTS.format);
  const input = trainerInput(values, 'grpo');
  const prompt = count(values, 'prompt', DEFAULTS.prompt);
  const model = trainerModel(ref, input);
  // vLLM colocated sizes itself from the GPU's total as torch reports it: the catalog's where recorded, else --gpu's size (nvidia-smi's total for a name, said in the note).
  const torchTotal =
    values.gpu !== undefined ? GPUS.find((g) => g.name === values.gpu || g.aliases.includes(values.gpu!.toLowerCase()))?.torchTotal : undefined;
  const gpuTotalBytes = torchTotal?.bytes ?? (values.gpu !== undefined ? gpuBudget(values.gpu) : undefined);
  const g = withOrigins(input, () => grpoStep(model, input.config, { ...input.options, prompt, ...(gpuTotalBytes !== undefined ? { gpuTotalBytes } : {}) }));
  const a = g.args.grpo!;
  const title = `GRPOTrainer step of ${ref.name} (TRL ${g.args.trl}): ${a.numGenerations} completions of up to ${a.maxCompletionLength} tokens per prompt of ${prompt}`;
  const notes = [
    `Generation batch: ${g.generationBatch} sequences (per_device_train_batch_size × steps_per_generation), one generation every ${g.generateEvery} micro-batch step${g.generateEvery === 1 ? '' : 's'}`,
    a.vllm === undefined
      ? `KV cache at the last decode step: ${formatBytes(g.kvCache)}`
      : a.vllm.mode === 'colocate'
        ? `vLLM colocated: ceil(${a.vllm.gpuMemoryUtilization} × ${formatBytes(g.engine!.totalBytes)}${torchTotal !== undefined ? ", torch's total" : ", --gpu's size (a name's nvidia-smi total: torch's, which vLLM reads, can be ~1% less)"}) = ${formatBytes(g.engine!.footprint)} while it generates; ${formatBytes(g.resident.rollout ?? 0)} (${a.vllm.sleepMode ? 'asleep: non-torch memory and graphs' : 'its weights and KV tensors'}) through the rest of the step`
        : 'vLLM server mode: generation on another GPU',
  ];
  return trainerOutcome(values, format, title, g, notes);
}

/** One GRPOTrainer step: generation, the old and reference log-probabilities, the loss and the optimizer. */
export const grpoCommand: ModelCommand<'grpo'> = {
  name: 'grpo',
  summary: "a GRPOTrainer step from GRPOConfig's fields",
  named: 'grpo',
  help: GRPO_HELP,
  words: 1,
  model: true,
  run: runGrpo,
};
