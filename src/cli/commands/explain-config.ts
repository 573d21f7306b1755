/** `vram-ts explain-config FILE`: what each key of a tool's config file means for memory. */
import { readConfigFile } from '../config-file.js';
import { readDeepSpeed } from '../config-options.js';
import { usage } from '../errors.js';
import { readAccelerate } from '../accelerate-config.js';
import { explainAccelerate, explainDeepSpeed, explainTrainingArgs } from '../explain-config.js';
import { trainerFields } from '../lib.js';
import { readTrainingArgs } from '../training-args.js';
import type { Values } from '../flags.js';
import { EXPLAIN_CONFIG_HELP } from '../help.js';
import { count } from '../values.js';
import type { Outcome, PlainCommand } from './command.js';

/** The keys that say which tool's file it is (the first kind with one of them wins). */
const KINDS: readonly { readonly kind: 'accelerate' | 'training-args' | 'deepspeed'; readonly keys: readonly string[] }[] = [
  { kind: 'accelerate', keys: ['distributed_type', 'compute_environment'] },
  {
    kind: 'training-args',
    keys: ['output_dir', 'per_device_train_batch_size', 'optim', 'gradient_checkpointing', 'learning_rate', 'num_train_epochs', 'max_steps', 'report_to'],
  },
  {
    kind: 'deepspeed',
    keys: ['zero_optimization', 'train_batch_size', 'train_micro_batch_size_per_gpu', 'gradient_accumulation_steps', 'bf16', 'fp16', 'optimizer'],
  },
];

function explain(values: Values, [file]: readonly string[]): Outcome {
  const mapping = readConfigFile(file!);
  const kind = KINDS.find((k) => k.keys.some((key) => Object.hasOwn(mapping, key)))?.kind;
  if (kind === undefined)
    usage(file!, 'is not a config file vram-ts reads: none of its keys is one that a DeepSpeed config, TrainingArguments or an accelerate config has', {
      expected: 'a ds_config.json, TrainingArguments or an accelerate config',
    });
  const hidden = values.hidden === undefined ? undefined : count(values, 'hidden', 1);
  const layers = values.layers === undefined ? undefined : count(values, 'layers', 1);
  const sizes = { ...(hidden !== undefined ? { hidden } : {}), ...(layers !== undefined ? { layers } : {}) };
  const flags = (['batch', 'micro-batches', 'precision', 'gpus'] as const).flatMap((f) => (values[f] === undefined ? [] : [`--${f}`, values[f]!]));
  if (kind === 'accelerate') return { stdout: explainAccelerate(file!, readAccelerate(values, file!, sizes), flags), code: 0 };
  if (kind === 'training-args')
    return { stdout: explainTrainingArgs(file!, readTrainingArgs(values, file!, sizes), trainerFields('trainer').modelled, flags), code: 0 };
  return { stdout: explainDeepSpeed(file!, readDeepSpeed(values, file!, hidden), flags), code: 0 };
}

/** What a config file's keys mean for memory. */
export const explainConfigCommand: PlainCommand<'explain-config'> = {
  name: 'explain-config',
  summary: "what each key of a tool's config file means for GPU memory",
  named: 'explain-config',
  help: EXPLAIN_CONFIG_HELP,
  words: 1,
  model: false,
  file: true,
  run: explain,
};
