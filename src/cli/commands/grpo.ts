/** `vram-ts grpo <model>`: a GRPO step on one GPU (generation, reference scoring, training). */
import { formatBytes, grpoStep } from '../lib.js';
import { usage } from '../errors.js';
import { DEFAULTS, type Values } from '../flags.js';
import { GRPO_HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { estimateOptions } from '../options.js';
import { gpuBudget } from '../args.js';
import { count, formatOf } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';

function runGrpo(ref: ModelRef, values: Values): Outcome {
  const format = formatOf(values, 'grpo', DEFAULTS.format);
  const d = DEFAULTS.grpo;
  const prompts = count(values, 'prompts', d.prompts);
  const group = count(values, 'group', d.group);
  const prompt = count(values, 'prompt', d.prompt);
  const completion = count(values, 'completion', d.completion);
  const micro = values['micro-batch'] === undefined ? undefined : count(values, 'micro-batch', 1);
  if (micro !== undefined && micro > prompts * group) {
    usage('--micro-batch', 'larger than the step', { expected: `at most prompts × group = ${prompts * group}`, received: String(micro) });
  }
  const model = buildModel(ref, values);
  const { input: _input, mode: _mode, ...common } = estimateOptions(values, ref, model);
  const g = grpoStep(model, { ...common, prompts, group, prompt, completion, ...(micro !== undefined ? { microBatch: micro } : {}) });
  const budget = values.gpu !== undefined ? gpuBudget(values.gpu) : undefined;
  const fitsGpu = budget !== undefined ? g.peak <= budget : undefined;
  const code = values.check && fitsGpu === false ? 1 : 0;
  if (format === 'json') {
    const json = { ...g, ...(budget !== undefined ? { fit: { gpu: values.gpu, fits: fitsGpu, needed: g.peak, budget, headroom: budget - g.peak } } : {}) };
    return { stdout: `${JSON.stringify(json, null, 2)}\n`, code };
  }
  const line = (label: string, phase: { peak: number; detail: string }) => `  ${label.padEnd(11)} ${formatBytes(phase.peak).padStart(11)}  ${phase.detail}\n`;
  let text = `GRPO step: ${g.sequences} sequences\n${line('generation', g.generation)}${line('reference', g.reference)}${line('training', g.training)}  peak        ${formatBytes(g.peak).padStart(11)}\n`;
  if (budget !== undefined) text += `${fitsGpu ? 'Fits' : 'Does not fit'} ${values.gpu} (${formatBytes(budget)}).\n`;
  return { stdout: text, code };
}

/** A GRPO step: generation, reference scoring, training. */
export const grpoCommand: ModelCommand<'grpo'> = {
  name: 'grpo',
  summary: 'a GRPO step: generation, reference scoring, training',
  named: 'grpo',
  help: GRPO_HELP,
  words: 1,
  model: true,
  run: runGrpo,
};
