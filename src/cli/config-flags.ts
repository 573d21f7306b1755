/**
 * The flags that read another tool's config file: the trainers' own (--config, --peft-config),
 * DeepSpeed's ds_config.json (--deepspeed), transformers' TrainingArguments (--training-args) and
 * accelerate's config (--accelerate-config).
 * Entries of the flag table (./flags.ts spreads them into FLAGS, which checks their shape).
 */

import { usage } from './errors.js';

const TRAINERS = ['grpo', 'sft'] as const;
const TRAINER_DEEPSPEED = 'the trainers’ deepspeed field is not modelled: estimate or fit with --deepspeed';

/** The config-file flags. */
export const CONFIG_FILE_FLAGS = {
  config: {
    type: 'string',
    scope: [...TRAINERS, 'rl', 'vllm'],
    meta: 'FILE',
    help: {
      grpo: "a TRL config (JSON or YAML) as `trl grpo --config` reads it: GRPOConfig's\nfields, ScriptArguments' (datasets, reward_funcs: no memory), ModelConfig's dtype,\nattn_implementation and use_peft + lora_* (as --dtype, --attention, --lora-*);\nits model_name_or_path must be <model>; the flags override its values",
      sft: "a TRL config (JSON or YAML) as `trl sft --config` reads it: SFTConfig's\nfields, ScriptArguments' (datasets: no memory), ModelConfig's dtype,\nattn_implementation and use_peft + lora_* (as --dtype, --attention, --lora-*);\nits model_name_or_path must be <model>; the flags override its values",
      rl: 'with --framework trl: a TRL config as `trl grpo --config` reads it (see grpo --help)',
      vllm: "vLLM's config.yaml as `vllm serve --config` reads it: keys are the flags'\nnames (dashes or underscores); the flags override its values, <model> its model",
    },
  },
  'peft-config': {
    type: 'string',
    scope: [...TRAINERS, 'rl'],
    meta: 'FILE',
    help: "PEFT's LoraConfig fields from a JSON or YAML file (LoRA adapters);\nthe --lora-* flags override its values",
  },
  deepspeed: {
    type: 'string',
    scope: ['estimate', 'fit'],
    why: { plan: 'a plan tries every engine (--engine deepspeed keeps DeepSpeed)', grpo: TRAINER_DEEPSPEED, sft: TRAINER_DEEPSPEED },
    meta: 'FILE',
    help: 'DeepSpeed\'s ds_config.json, read as DeepSpeed reads it: the ZeRO stage and\nknobs, offload, bf16/fp16, micro-batch, accumulation, optimizer; its "auto"\nvalues filled from --batch, --micro-batches, --precision and --gpus as the\nHF Trainer fills them',
  },
  'training-args': {
    type: 'string',
    scope: ['estimate'],
    why: { fit: 'fit solves one flag at a time: estimate the arguments’ step', plan: 'a plan searches layouts: estimate the arguments’ step' },
    meta: 'FILE',
    help: "transformers' TrainingArguments (a to_json_string() dump, or a JSON/YAML\nmapping of fields): the HF Trainer's step they mean, on one GPU, or one rank\nunder their deepspeed config (its path read from here); they decide --batch,\n--micro-batches, --checkpointing, --precision and --optimizer",
  },
  'accelerate-config': {
    type: 'string',
    scope: ['estimate', 'fit'],
    why: { plan: 'a plan tries every engine', grpo: 'the trainers run on one GPU here', sft: 'the trainers run on one GPU here' },
    meta: 'FILE',
    help: "an `accelerate config` YAML (distributed_type NO, MULTI_GPU or DEEPSPEED;\nFSDP is refused: accelerate's layout is not modelled), read as accelerate\nreads it: it decides --gpus, the engine and --precision",
  },
  layers: {
    type: 'string',
    max: 1_000_000,
    scope: ['explain-config'],
    meta: 'L',
    help: "the model's decoder layers (gradient checkpointing under DeepSpeed or FSDP)",
  },
  trainer: {
    type: 'string',
    scope: ['explain-config'],
    values: TRAINERS,
    meta: 'T',
    help: 'read FILE as a TRL config of `trl sft` or `trl grpo` (needed when its keys\ndo not tell which)',
  },
} as const;

/** The flags each config file decides (or that its job does not take): given beside it, each is an error. */
export const DECIDED_BY_FILE = {
  deepspeed: ['zero', 'engine', 'fsdp', 'offload', 'distributed-optimizer', 'tp', 'pp', 'cp', 'ep', 'infer', 'training-args', 'accelerate-config'],
  'training-args': [
    'batch',
    'micro-batches',
    'checkpointing',
    'precision',
    'optimizer',
    'lora-rank',
    'qlora',
    'zero',
    'engine',
    'fsdp',
    'offload',
    'tp',
    'pp',
    'cp',
    'ep',
    'infer',
    'distributed-optimizer',
    'accelerate-config',
  ],
  'accelerate-config': ['gpus', 'engine', 'zero', 'fsdp', 'offload', 'precision', 'device', 'tp', 'pp', 'cp', 'ep', 'distributed-optimizer', 'infer'],
} as const;

/** A flag beside a config file that decides it: an error naming the flag, before any other rule reads it. */
export function checkDecided(values: Readonly<Record<string, string | boolean | undefined>>): void {
  for (const [file, flags] of Object.entries(DECIDED_BY_FILE)) {
    const path = values[file];
    if (typeof path !== 'string') continue;
    const flag = flags.find((f) => values[f] !== undefined && values[f] !== false);
    if (flag !== undefined) usage(`--${flag}`, `is decided by --${file} ${path}: leave it out`);
  }
}
