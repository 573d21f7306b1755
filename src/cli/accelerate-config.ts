/**
 * --accelerate-config FILE over the estimate's options: an `accelerate config` YAML (or JSON) read
 * with fromAccelerateConfig, the DeepSpeed file it names read from the working directory as
 * `accelerate launch` opens it. The file decides the processes, the engine and the precision: those
 * flags are refused beside it; --batch and --micro-batches are the training script's (checked
 * against a DeepSpeed config that says them).
 */
import { fromAccelerateConfig, VramError, type AccelerateReading, type Dim, type EstimateOptions, type Layer } from '../index.js';
import { wholeNumber } from './args.js';
import { readConfigFile } from './config-file.js';
import { CliError, fromVramError, usage } from './errors.js';
import type { Values } from './flags.js';
import { count } from './values.js';

/** The flag that gives each context field. */
const CONTEXT_FLAGS: Readonly<Record<string, string>> = {
  batchSize: '--batch',
  gradientAccumulationSteps: '--micro-batches',
  hiddenSize: 'an LLM (its hidden_size)',
  model: 'MODEL (an FSDP config is read against the model: vram-ts fit MODEL --accelerate-config FILE)',
};

/** The reader's first issue in the command's words: the file's key, the DeepSpeed file's, or the flag a context field stands for. */
function cliError(error: VramError, file: string, dsFile: string | undefined): CliError {
  const issue = error.issues[0];
  const path = issue?.path ?? [];
  if (path[0] !== 'context') return fromVramError(error, file);
  if (path[1] === 'deepspeedConfig' && path.length > 2 && dsFile !== undefined)
    return fromVramError(new VramError([{ ...issue!, path: path.slice(2) }, ...error.issues.slice(1)]), dsFile);
  const flag = CONTEXT_FLAGS[String(path[1])];
  return new CliError(flag ?? `${file}: ${path.join('.')}`, issue!.message, {
    expected: issue!.expected,
    received: issue!.received,
    more: error.issues.length - 1,
  });
}

/** What a config's "auto" values and checkpointing read of the model: its hidden size and decoder layers (the Trainer's). */
export interface DecoderSizes {
  readonly hidden?: number;
  readonly layers?: number;
}

/** A decoder's sizes (none for another model). */
export function decoderSizes(model: Layer): DecoderSizes {
  const meta = model.kind === 'module' ? model.meta : undefined;
  return meta?.kind === 'decoder' ? { hidden: meta.hidden, layers: meta.layers } : {};
}

/** The file read (against the model, when there is one: FSDP's units are its modules), and the DeepSpeed file it names read too. */
export function readAccelerate(values: Values, file: string, sizes: DecoderSizes, model?: Layer): AccelerateReading {
  const context = {
    ...(model !== undefined ? { model } : {}),
    ...(values.batch !== undefined ? { batchSize: count(values, 'batch', 1) } : {}),
    ...(values['micro-batches'] !== undefined ? { gradientAccumulationSteps: count(values, 'micro-batches', 1) } : {}),
    ...(sizes.hidden !== undefined ? { hiddenSize: sizes.hidden } : {}),
  };
  const config = readConfigFile(file);
  let dsFile: string | undefined;
  try {
    return fromAccelerateConfig(config, context);
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    const missing = error.issues.find((i) => i.code === 'missing-context' && i.path.join('.') === 'context.deepspeedConfig');
    if (missing === undefined) throw cliError(error, file, undefined);
    dsFile = JSON.parse(missing.received ?? '""') as string;
  }
  try {
    return fromAccelerateConfig(config, { ...context, deepspeedConfig: readConfigFile(dsFile) });
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    throw cliError(error, file, dsFile);
  }
}

/** The options with --accelerate-config's file over them (unchanged without it). */
export function withAccelerate(values: Values, model: Layer, options: EstimateOptions, solvingBatch: boolean): EstimateOptions {
  if (values['accelerate-config'] === undefined) return options;
  const reading = readAccelerate(values, values['accelerate-config'], decoderSizes(model), model);
  const [batch, ...rest] = options.input as readonly Dim[];
  const micro = reading.microBatchSize;
  if (micro !== undefined && solvingBatch)
    usage('--accelerate-config', `its DeepSpeed config fixes the micro-batch (${micro}): fit --seq or --resolution instead`);
  const { parallel: _flags, precision: _precision, ...own } = options;
  const rank = values.rank === undefined ? {} : { rank: wholeNumber(values.rank, '--rank', 0, reading.processes - 1) };
  return {
    ...own,
    ...reading.options,
    input: [micro ?? batch!, ...rest],
    ...(reading.options.parallel !== undefined ? { parallel: { ...reading.options.parallel, ...rank } } : {}),
  };
}
