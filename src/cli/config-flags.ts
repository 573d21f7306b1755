/**
 * The flags that read another tool's config file: the trainers' own (--config, --peft-config)
 * and DeepSpeed's ds_config.json (--deepspeed). Entries of the flag table (./flags.ts spreads
 * them into FLAGS, which checks their shape).
 */

const TRAINERS = ['grpo', 'sft'] as const;
const TRAINER_DEEPSPEED = 'the trainers’ deepspeed field is not modelled: estimate or fit with --deepspeed';

/** The config-file flags. */
export const CONFIG_FILE_FLAGS = {
  config: {
    type: 'string',
    scope: [...TRAINERS, 'rl'],
    meta: 'FILE',
    help: {
      grpo: 'GRPOConfig fields from a JSON or YAML file (a flat mapping, as a\ngrpo_config.yaml holds them); the flags override its values',
      sft: 'SFTConfig fields from a JSON or YAML file (a flat mapping, as an\nsft_config.yaml holds them); the flags override its values',
      rl: 'with --framework trl: GRPOConfig fields from a JSON or YAML file',
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
} as const;
