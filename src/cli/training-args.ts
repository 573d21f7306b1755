/**
 * --training-args FILE: transformers' TrainingArguments (a JSON dump or a YAML/JSON mapping of
 * some fields) read with fromTrainingArguments, and the Hugging Face Trainer's step it means: on
 * one GPU, trainerStep's phases; with `deepspeed` (its path read here, relative to the working
 * directory as the Trainer opens it), one rank's estimate under DeepSpeed; with `fsdp`, one rank's
 * under FSDP2 over --gpus processes, its units made of the model as accelerate makes them. The arguments decide
 * the batch, accumulation, checkpointing, precision and optimizer: those flags are refused beside it.
 */
import { fromTrainingArguments, trainerStep, VramError, type EstimateOptions, type Layer, type ModuleLayer, type TrainingArgumentsReading } from '../index.js';
import { readConfigFile } from './config-file.js';
import { fromVramError, usage } from './errors.js';
import { DEFAULTS, type Values } from './flags.js';
import { count } from './values.js';
import type { DecoderSizes } from './accelerate-config.js';
import { trainerOutcome } from './trainer.js';
import type { Outcome } from './commands/command.js';

/** The file's issues named `file: key`, DeepSpeed's `ds_config: key`, the context's by the flag that gives it. */
function cliError(error: VramError, file: string, dsFile: string | undefined): Error {
  const issue = error.issues[0];
  const path = issue?.path ?? [];
  if (path[0] === 'context' && path[1] === 'deepspeed' && dsFile !== undefined) {
    const rest = new VramError([{ ...issue!, path: path.slice(2) }, ...error.issues.slice(1)]);
    return fromVramError(rest, dsFile);
  }
  if (path[0] === 'context' && path[1] === 'worldSize') return fromVramError(new VramError([{ ...issue!, path: [] }]), '--gpus');
  if (path[0] === 'context' && path[1] === 'model')
    return fromVramError(new VramError([{ ...issue!, path: [] }]), 'MODEL (FSDP is read against the model: vram-ts fit MODEL --training-args FILE)');
  return fromVramError(error, file);
}

/** The arguments read, and with `deepspeed` a path, that file read too. */
export function readTrainingArgs(values: Values, file: string, sizes: DecoderSizes, model?: Layer): TrainingArgumentsReading {
  const context = {
    ...(model !== undefined ? { model } : {}),
    ...(values.gpus !== undefined ? { worldSize: count(values, 'gpus', 1) } : {}),
    ...(sizes.hidden !== undefined ? { hiddenSize: sizes.hidden } : {}),
    ...(sizes.layers !== undefined ? { layers: sizes.layers } : {}),
  };
  const args = readConfigFile(file);
  let dsFile: string | undefined;
  try {
    const first = fromTrainingArguments(args, context);
    if (first.deepspeedPath === undefined) return first;
    dsFile = first.deepspeedPath;
    return fromTrainingArguments(args, { ...context, deepspeed: readConfigFile(dsFile) });
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    throw cliError(error, file, dsFile);
  }
}

/** The estimate options of the arguments' step under DeepSpeed or FSDP: the rank's input is the micro-batch × --seq. */
export function trainingArgsOptions(values: Values, reading: TrainingArgumentsReading): EstimateOptions {
  const seq = count(values, 'seq', DEFAULTS.seq);
  return { ...reading.options!, input: [reading.deepspeed?.microBatchSize ?? reading.resolved.batch, seq] };
}

/** The Trainer's step on one GPU: trainerStep's phase table (or JSON). */
export function trainingArgsOutcome(values: Values, name: string, model: Layer, reading: TrainingArgumentsReading, format: string): Outcome {
  if (format !== 'table' && format !== 'json') usage('--format', `--training-args prints the Trainer's phases: table or json`, { received: format });
  if (values.gpus !== undefined && count(values, 'gpus', 1) > 1)
    usage('--gpus', `the Trainer's arguments say no DeepSpeed: one GPU's step (DDP over --gpus is not read from TrainingArguments)`);
  if (model.kind !== 'module') usage('model', `${name} is not a causal LM: the Trainer's step needs one`);
  const seq = count(values, 'seq', DEFAULTS.seq);
  const e = trainerStep(model as ModuleLayer, reading.args, { sequence: seq, ...(values.device === 'cpu' ? { device: 'cpu' } : {}) });
  const r = reading.resolved;
  const title = `Trainer step of ${name} (transformers ${r.transformers}): ${r.batch} × ${seq} tokens`;
  return trainerOutcome(values, format, title, e, [`Gradient accumulation: ${r.accumulation} micro-batches per optimizer step`]);
}
