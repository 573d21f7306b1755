/** `vram-ts explain-config FILE`: what each key of a tool's config file means for memory. */
import { readConfigFile } from '../config-file.js';
import { readDeepSpeed } from '../config-options.js';
import { usage } from '../errors.js';
import { explainDeepSpeed } from '../explain-config.js';
import type { Values } from '../flags.js';
import { EXPLAIN_CONFIG_HELP } from '../help.js';
import { count } from '../values.js';
import type { Outcome, PlainCommand } from './command.js';

/** The keys that say which tool's file it is (the first kind with one of them wins). */
const KINDS: readonly { readonly kind: 'deepspeed'; readonly keys: readonly string[] }[] = [
  {
    kind: 'deepspeed',
    keys: ['zero_optimization', 'train_batch_size', 'train_micro_batch_size_per_gpu', 'gradient_accumulation_steps', 'bf16', 'fp16', 'optimizer'],
  },
];

function explain(values: Values, [file]: readonly string[]): Outcome {
  const mapping = readConfigFile(file!);
  const kind = KINDS.find((k) => k.keys.some((key) => Object.hasOwn(mapping, key)))?.kind;
  if (kind === undefined) usage(file!, 'is not a config file vram-ts reads: none of its keys is one a DeepSpeed config has', { expected: 'a ds_config.json' });
  const hidden = values.hidden === undefined ? undefined : count(values, 'hidden', 1);
  const flags = (['batch', 'micro-batches', 'precision', 'gpus'] as const).flatMap((f) => (values[f] === undefined ? [] : [`--${f}`, values[f]!]));
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
