/**
 * --deepspeed FILE over the estimate's options: the ds_config.json read as DeepSpeed reads it
 * (fromDeepSpeedConfig), its "auto" values filled from the flags as the Hugging Face Trainer
 * fills them from TrainingArguments (--batch is per_device_train_batch_size, --micro-batches
 * gradient_accumulation_steps, --precision bf16/fp16, --gpus the world). A flag the file
 * contradicts is an error naming both; a flag the file decides instead (--zero, --engine,
 * --offload, …) is refused rather than silently overridden.
 */
import { fromDeepSpeedConfig, VramError, type DeepSpeedReading, type DeepSpeedTrainerContext, type Dim, type EstimateOptions, type Layer } from '../index.js';
import { wholeNumber } from './args.js';
import { readConfigFile } from './config-file.js';
import { CliError, fromVramError, usage } from './errors.js';
import type { Values } from './flags.js';
import { count } from './values.js';

/** The flag that fills each of the reader's context fields. */
const CONTEXT_FLAGS: readonly (readonly [string, string])[] = [
  ['perDeviceTrainBatchSize', '--batch'],
  ['gradientAccumulationSteps', '--micro-batches'],
  ['bf16', '--precision'],
  ['fp16', '--precision'],
  ['worldSize', '--gpus'],
  ['hiddenSize', 'an LLM (its hidden_size)'],
  ['weightDecay', 'a number in the file (no flag gives the weight decay)'],
];

/** The reader's first issue in the command's words: the file's key, or the flag its context stands for. */
function cliError(error: VramError, file: string): CliError {
  const issue = error.issues[0];
  if (issue === undefined) return fromVramError(error, file);
  const more = error.issues.length - 1;
  const flagOf = (text: string | undefined) => CONTEXT_FLAGS.find(([field]) => text?.endsWith(`.${field}`) === true || text === field)?.[1];
  if (issue.path[0] === 'context')
    return new CliError(
      '--gpus',
      'the data-parallel world size: give --gpus, or train_batch_size with train_micro_batch_size_per_gpu and gradient_accumulation_steps in the file',
      {
        received: issue.received,
        more,
      },
    );
  if (issue.code === 'unresolved-auto') {
    const flag = flagOf(issue.expected?.split(' ')[0]) ?? issue.expected;
    return new CliError(`${file}: ${issue.path.join('.')}`, `"auto" is filled as the Hugging Face Trainer fills it: give ${flag}`, { more });
  }
  return fromVramError(error, file);
}

/** The Trainer context the flags stand for, only from the flags given. */
function trainerContext(values: Values): DeepSpeedTrainerContext {
  const precision = values.precision;
  return {
    ...(values.batch !== undefined ? { perDeviceTrainBatchSize: count(values, 'batch', 1) } : {}),
    ...(values['micro-batches'] !== undefined ? { gradientAccumulationSteps: count(values, 'micro-batches', 1) } : {}),
    ...(values.gpus !== undefined ? { worldSize: count(values, 'gpus', 1) } : {}),
    ...(precision !== undefined ? { bf16: precision === 'bf16' || precision === 'amp-bf16', fp16: precision === 'fp16' || precision === 'amp-fp16' } : {}),
  };
}

/** A ds_config.json read with the flags' Trainer context (and the model's hidden size); its errors in the command's words. */
export function readDeepSpeed(values: Values, file: string, hiddenSize: number | undefined): DeepSpeedReading {
  const config = readConfigFile(file);
  try {
    return fromDeepSpeedConfig(config, {
      trainer: trainerContext(values),
      ...(hiddenSize !== undefined ? { hiddenSize } : {}),
      ...(values.gpus !== undefined ? { worldSize: count(values, 'gpus', 1) } : {}),
    });
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    throw cliError(error, file);
  }
}

/**
 * The options with --deepspeed's file over them (unchanged without it): the engine, the ZeRO
 * stage and knobs, offload and the world from the file, the input's batch its
 * train_micro_batch_size_per_gpu, and precision and optimizer where it names them.
 */
export function withDeepSpeed(values: Values, model: Layer, options: EstimateOptions, solvingBatch: boolean): EstimateOptions {
  const file = values.deepspeed;
  if (file === undefined) return options;
  if (solvingBatch) usage('--deepspeed', 'fixes the micro-batch (train_micro_batch_size_per_gpu): fit --seq or --resolution instead');
  const meta = model.kind === 'module' ? model.meta : undefined;
  const reading = readDeepSpeed(values, file, meta?.kind === 'decoder' ? meta.hidden : undefined);
  const { parallel, microBatches, precision, optimizer } = reading.options;
  if (values.precision !== undefined && values.precision !== (precision ?? 'fp32'))
    usage(
      '--precision',
      `contradicts --deepspeed ${file}: ${precision === undefined ? 'neither bf16 nor fp16 is enabled there (DeepSpeed keeps the model’s dtype)' : `its ${precision}.enabled holds the parameters in ${precision} (the fp32 master in the optimizer)`}`,
      {
        expected: precision ?? 'fp32',
        received: values.precision,
      },
    );
  if (values.optimizer !== undefined && optimizer !== undefined && values.optimizer !== optimizer.name)
    usage('--optimizer', `contradicts --deepspeed ${file}: its optimizer section is ${optimizer.name}`, {
      expected: optimizer.name,
      received: values.optimizer,
    });
  // The Trainer matches only the keys the file writes: a flag the file's arithmetic contradicts is an error too.
  const given = (flag: 'batch' | 'micro-batches', value: number, key: string) => {
    if (values[flag] !== undefined && count(values, flag, 1) !== value)
      usage(`--${flag}`, `contradicts --deepspeed ${file}: its ${key} is ${value}`, { expected: String(value), received: values[flag] });
  };
  given('batch', reading.microBatchSize, 'train_micro_batch_size_per_gpu');
  given('micro-batches', microBatches, 'gradient_accumulation_steps');
  const [, ...rest] = options.input as readonly Dim[];
  const rank = values.rank === undefined ? {} : { rank: wholeNumber(values.rank, '--rank', 0, parallel.dp - 1) };
  return {
    ...options,
    input: [reading.microBatchSize, ...rest],
    microBatches,
    ...(precision !== undefined ? { precision } : {}),
    ...(optimizer !== undefined ? { optimizer } : {}),
    parallel: { ...parallel, ...rank },
  };
}
