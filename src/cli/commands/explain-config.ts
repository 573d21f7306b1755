/** `vram-ts explain-config FILE`: what each key of a tool's config file means for memory. */
import { readConfigFile } from '../config-file.js';
import { readDeepSpeed } from '../config-options.js';
import { usage } from '../errors.js';
import { readAccelerate } from '../accelerate-config.js';
import { explainAccelerate, explainDeepSpeed, explainTrainingArgs, explainTrl, explainVllm } from '../explain-config.js';
import { MODEL_CONFIG_FIELDS, resolveTrainerArgs, trainerFields } from '../lib.js';
import { readTrainingArgs } from '../training-args.js';
import { trainerInput, withOrigins } from '../trainer.js';
import { readVllmConfig } from '../vllm-config.js';
import type { Values } from '../flags.js';
import { EXPLAIN_CONFIG_HELP } from '../help.js';
import { choice, count } from '../values.js';
import type { Outcome, PlainCommand } from './command.js';

/** The keys that say which tool's file it is (the first kind with one of them wins; dashes read as underscores). */
const KINDS = [
  { kind: 'accelerate', keys: ['distributed_type', 'compute_environment'] },
  {
    kind: 'vllm',
    keys: ['model', 'host', 'port', 'served_model_name', 'tensor_parallel_size', 'gpu_memory_utilization', 'max_model_len'],
  },
  // ModelConfig's fields and ScriptArguments' datasets and rewards: no TrainingArguments has them.
  { kind: 'trl', keys: [...Object.keys(MODEL_CONFIG_FIELDS).filter((k) => k !== 'dtype'), 'torch_dtype', 'dataset_name', 'datasets', 'reward_funcs'] },
  {
    kind: 'training-args',
    keys: ['output_dir', 'per_device_train_batch_size', 'optim', 'gradient_checkpointing', 'learning_rate', 'num_train_epochs', 'max_steps', 'report_to'],
  },
  {
    kind: 'deepspeed',
    keys: ['zero_optimization', 'train_batch_size', 'train_micro_batch_size_per_gpu', 'gradient_accumulation_steps', 'bf16', 'fp16', 'optimizer'],
  },
] as const;

const TRAINING_FLAGS = ['batch', 'micro-batches', 'precision', 'gpus', 'hidden', 'layers'];

/** The trl script a TRL config is for: --trainer, else the one whose dataclasses alone have some key of the file; neither, an error. */
function trlTrainer(values: Values, file: string, keys: readonly string[]): 'grpo' | 'sft' {
  const given = choice(values, 'trainer');
  if (given !== undefined) return given;
  const g = trainerFields('grpo').defaults;
  const f = trainerFields('sft').defaults;
  const grpo = keys.some((k) => (k in g || /^reward_/.test(k)) && !(k in f));
  if (grpo === keys.some((k) => k in f && !(k in g))) usage('--trainer', `${file}: its keys do not tell trl sft from trl grpo`, { expected: 'sft | grpo' });
  return grpo ? 'grpo' : 'sft';
}

function explain(values: Values, [file]: readonly string[]): Outcome {
  const mapping = readConfigFile(file!);
  const keys = Object.keys(mapping).map((k) => k.replace(/-/g, '_'));
  // A key with a dash is a command-line flag's name: only vLLM's file writes them (the others are Python fields).
  const dashed = Object.keys(mapping).some((k) => k.includes('-'));
  const kind = values.trainer !== undefined ? 'trl' : (KINDS.find((k) => k.keys.some((key) => keys.includes(key)))?.kind ?? (dashed ? 'vllm' : undefined));
  if (kind === undefined)
    usage(file!, 'is not a config file vram-ts reads: no key tells whose it is', {
      expected: 'a DeepSpeed, TrainingArguments, accelerate, TRL (or give --trainer) or vLLM config',
    });
  // Each kind reads its own flags: any other given is an error naming it.
  const takes = kind === 'trl' ? ['trainer'] : kind === 'vllm' ? [] : TRAINING_FLAGS;
  const stray = Object.keys(values).find((f) => values[f as keyof Values] !== undefined && !takes.includes(f));
  if (stray !== undefined) usage(`--${stray}`, `does not apply to ${file}, a ${kind} config`);
  if (kind === 'vllm') return { stdout: explainVllm(readVllmConfig(file!)), code: 0 };
  if (kind === 'trl') {
    // The trainers' own reading (trainerInput, resolveTrainerArgs): their errors name `file: key`.
    const trainer = trlTrainer(values, file!, Object.keys(mapping));
    const input = trainerInput({ ...values, config: file } as Values, trainer);
    const r = withOrigins(input, () => resolveTrainerArgs(trainer, input.config, input.options));
    return { stdout: explainTrl(file!, mapping, input.script!.reading, r, trainerFields(trainer)), code: 0 };
  }
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
