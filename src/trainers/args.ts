/**
 * The trainers' own arguments (transformers' TrainingArguments, TRL's SFTConfig and GRPOConfig,
 * PEFT's LoraConfig), checked against the fields of the release asked for and resolved with that
 * release's defaults and `__post_init__` rules. A field vram-ts does not model is accepted only at
 * its default: any other value is an error naming it, never a silently ignored setting.
 */
import { fail, type VramIssue as Issue, VramError } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { boolean, type Check, didYouMean, object, show, string, validate } from '../validate.js';
import { choice, fieldsObject, flag, nonNegative, type Path, plain, positiveInt, sameValue, trainerKind } from './field-checks.js';
import { FIELDS_TRL_1_13_0 } from './fields.js';

/** The TRL releases whose trainers were read (with the transformers and PEFT releases they were read with). */
export const TRL_RELEASES = deepFreeze(['1.13.0'] as const);

/** The release vram-ts follows when none is asked for. */
export const DEFAULT_TRL = '1.13.0';

/** Which trainer: transformers' `Trainer`, TRL's `SFTTrainer` or `GRPOTrainer`. */
export type TrainerKind = 'trainer' | 'sft' | 'grpo';

/** A trainer's arguments by their dataclass names (`per_device_train_batch_size`, `beta`, …). */
export type TrainerArgs = Readonly<Record<string, unknown>>;

/** PEFT's `LoraConfig` fields (`r`, `lora_alpha`, `target_modules`, `lora_dropout`, …). */
export type LoraConfig = Readonly<Record<string, unknown>>;

const RELEASES: Readonly<Record<string, typeof FIELDS_TRL_1_13_0>> = { '1.13.0': FIELDS_TRL_1_13_0 };

const CLASS_NAMES = { trainer: 'TrainingArguments', sft: 'SFTConfig', grpo: 'GRPOConfig' } as const;

/** Fields that decide nothing on the GPU in a training step (schedules, logging, saving, hub, host-side data loading). */
const NEUTRAL = new Set([
  'output_dir',
  'do_train',
  // do_eval / do_predict: "not directly used by [`Trainer`]", read by the scripts after training (transformers 5.18 training_args.py:743-751).
  'do_eval',
  'do_predict',
  'learning_rate',
  'weight_decay',
  'adam_beta1',
  'adam_beta2',
  'adam_epsilon',
  'num_train_epochs',
  'max_steps',
  'lr_scheduler_type',
  'lr_scheduler_kwargs',
  'warmup_steps',
  'log_level',
  'log_level_replica',
  'log_on_each_node',
  'logging_first_step',
  'logging_nan_inf_filter',
  'logging_steps',
  'logging_strategy',
  'save_on_each_node',
  'save_only_model',
  'save_steps',
  'save_strategy',
  'save_total_limit',
  'seed',
  'data_seed',
  'full_determinism',
  'run_name',
  'report_to',
  'project',
  'trackio_bucket_id',
  'trackio_space_id',
  'trackio_static_space_id',
  'disable_tqdm',
  'push_to_hub',
  'hub_always_push',
  'hub_model_id',
  'hub_private_repo',
  'hub_revision',
  'hub_strategy',
  'hub_token',
  'dataloader_drop_last',
  'dataloader_in_order',
  'dataloader_multiprocessing_context',
  'dataloader_num_workers',
  'dataloader_persistent_workers',
  'dataloader_pin_memory',
  'dataloader_prefetch_factor',
  'ignore_data_skip',
  'resume_from_checkpoint',
  'restore_callback_states_from_checkpoint',
  'skip_memory_metrics',
  'remove_unused_columns',
  'use_cpu',
  'tf32',
  'train_sampling_strategy',
  'include_num_input_tokens_seen',
  'local_rank',
  // TRL: text handling and the reward's arithmetic on per-sequence scalars.
  'dataset_text_field',
  'dataset_kwargs',
  'dataset_num_proc',
  'eos_token',
  'pad_token',
  'chat_template_path',
  'chat_template_kwargs',
  'shuffle_dataset',
  'trust_remote_code',
  'reward_weights',
  'multi_objective_aggregation',
  'scale_rewards',
  'epsilon',
  'epsilon_high',
  'log_completions',
  'log_multimodal',
  'num_completions_to_print',
  'log_unique_prompts',
  'log_completions_hub_repo',
  'disable_dropout',
  // vLLM server mode: where the server is, not what this GPU holds.
  'vllm_server_base_url',
  'vllm_server_host',
  'vllm_server_port',
  'vllm_server_timeout',
  'vllm_group_port',
  // the importance-sampling ratio's clipping (per-sequence scalars)
  'vllm_importance_sampling_mode',
  'vllm_importance_sampling_clip_max',
  'vllm_importance_sampling_clip_min',
  'vllm_importance_sampling_cap',
]);

/** The TrainingArguments every trainer models (their values change the estimate). */
const TRAINING = [
  'per_device_train_batch_size',
  'gradient_accumulation_steps',
  'gradient_checkpointing',
  'gradient_checkpointing_kwargs',
  'bf16',
  // Read only under DeepSpeed (commonArgs refuses it elsewhere, with why).
  'fp16',
  'optim',
  'max_grad_norm',
] as const;

/**
 * The TrainingArguments fields with a trainer's own: a call marked free of side effects, because
 * bundlers keep a module-level spread (an iterator could run) and with it these tables in every bundle.
 */
/* @__NO_SIDE_EFFECTS__ */
function modelledWith(...own: readonly string[]): ReadonlySet<string> {
  return new Set([...TRAINING, ...own]);
}

/** Fields each trainer models. */
const MODELLED: Readonly<Record<TrainerKind, ReadonlySet<string>>> = {
  trainer: modelledWith('use_liger_kernel'),
  sft: modelledWith('loss_type', 'max_length', 'use_liger_kernel'),
  grpo: modelledWith(
    'num_generations',
    'max_completion_length',
    'beta',
    'temperature',
    'num_iterations',
    'steps_per_generation',
    'generation_batch_size',
    'loss_type',
    'generation_kwargs',
    'model_init_kwargs',
    'use_vllm',
    'vllm_mode',
    'vllm_gpu_memory_utilization',
    'vllm_importance_sampling_correction',
    'vllm_max_model_length',
    'vllm_enable_sleep_mode',
  ),
};

/** `optim` values modelled, and the optimizer each one builds. */
const OPTIMIZERS = ['adamw_torch_fused', 'adamw_torch', 'sgd'] as const;

/** GRPO loss types whose tensors grpo-loss.ts counts (the clipped-ratio family). */
const GRPO_LOSSES = ['grpo', 'bnpo', 'dr_grpo', 'dapo', 'luspo'] as const;

/** The LoraConfig fields modelled; the others must stay at their defaults (lora_alpha and the init only scale values). */
const LORA_MODELLED = new Set(['r', 'target_modules', 'lora_dropout']);
const LORA_NEUTRAL = new Set([
  'lora_alpha',
  'use_rslora',
  'init_lora_weights',
  'task_type',
  'inference_mode',
  'fan_in_fan_out',
  'base_model_name_or_path',
  'revision',
]);

/** A trainer's arguments resolved: what the estimate reads. */
export interface ResolvedTrainerArgs {
  readonly trainer: TrainerKind;
  readonly trl: string;
  readonly transformers: string;
  readonly batch: number;
  readonly accumulation: number;
  readonly checkpointing: boolean;
  readonly bf16: boolean;
  /** `fp16`: read only under DeepSpeed (`resolveTrainerArgs`' `deepspeed` option), where it is DeepSpeed's fp16 engine. */
  readonly fp16: boolean;
  readonly optim: (typeof OPTIMIZERS)[number];
  readonly maxGradNorm: number;
  /** `use_liger_kernel`: Liger's fused linear cross-entropy in the forward (read from its source, not measured). */
  readonly liger: boolean;
  /** SFT: `loss_type` (`chunked_nll` by default) and `max_length`. */
  readonly sftLoss?: 'nll' | 'chunked_nll';
  readonly maxLength?: number | null;
  /** GRPO. */
  readonly grpo?: {
    readonly numGenerations: number;
    readonly maxCompletionLength: number;
    readonly beta: number;
    readonly temperature: number;
    readonly numIterations: number;
    readonly stepsPerGeneration: number;
    readonly generationBatchSize: number;
    readonly lossType: (typeof GRPO_LOSSES)[number];
    /** generation_kwargs' `min_new_tokens` (its logits processors suppress EOS until then), or 0. */
    readonly minNewTokens: number;
    /** `use_vllm`: generation by vLLM, on this GPU (`colocate`, its utilization of the GPU's total) or a server's. */
    readonly vllm?: {
      readonly mode: 'colocate' | 'server';
      readonly gpuMemoryUtilization: number;
      readonly importanceSampling: boolean;
      readonly maxModelLength: number | null;
      /** `vllm_enable_sleep_mode`: the engine sleeps (level 2) outside generation. */
      readonly sleepMode: boolean;
    };
  };
  /** PEFT LoRA, when a peft_config is given. */
  readonly lora?: { readonly rank: number; readonly targets?: readonly string[] | 'all-linear'; readonly dropout: number };
}

/** The fields of a TRL release read, else a VramError at `trl` listing the releases read. */
function releaseFields(trl: unknown): typeof FIELDS_TRL_1_13_0 {
  if (typeof trl !== 'string' || !Object.hasOwn(RELEASES, trl))
    fail('unsupported-release', 'TRL release whose trainers were not read', { path: ['trl'], expected: TRL_RELEASES.join(', '), received: show(trl) });
  return RELEASES[trl]!;
}

/** PEFT's LoraConfig option: a plain object, or null for none. */
export const loraOrNull: Check = (value, path, issues) => {
  if (value !== null && !plain(value))
    issues.push({
      path,
      code: 'bad-option',
      message: 'must be a LoraConfig object or null',
      expected: '{ r, target_modules, … } | null',
      received: show(value),
    });
};

/** resolveTrainerArgs' options: the TRL release and PEFT's LoraConfig (a plain object, or null for none). */
const resolveOptions = object({
  fields: {
    trl: string,
    peft: loraOrNull,
    deepspeed: boolean,
  },
});

/** A trainer's config class in one TRL release: every field with its default, and how vram-ts reads each. */
export interface TrainerFields {
  /** `TrainingArguments`, `SFTConfig` or `GRPOConfig`. */
  readonly className: string;
  /** Every field of the dataclass and its default (as the release's dataclass declares it). */
  readonly defaults: Readonly<Record<string, unknown>>;
  /** The fields whose values change the estimate. */
  readonly modelled: readonly string[];
  /** The fields accepted with any value because they decide nothing on the GPU (logging, saving, schedules). */
  readonly neutral: readonly string[];
}

/**
 * The fields of a trainer's config class in `trl` (default {@link DEFAULT_TRL}) as
 * {@link resolveTrainerArgs} reads them: a field neither modelled nor neutral is accepted only at its default.
 *
 * @example
 * ```ts
 * import { trainerFields } from 'vram-ts';
 * const f = trainerFields('grpo');
 * console.log(f.className, f.defaults.num_generations, f.modelled.includes('beta')); // GRPOConfig 8 true
 * ```
 */
export function trainerFields(trainer: TrainerKind, trl: string = DEFAULT_TRL): TrainerFields {
  validate(trainer, trainerKind, ['trainer']);
  const fields = releaseFields(trl);
  const className = CLASS_NAMES[trainer];
  const defaults: Readonly<Record<string, unknown>> = fields[className];
  const names = Object.keys(defaults);
  return deepFreeze({
    className,
    defaults: { ...defaults },
    modelled: names.filter((n) => MODELLED[trainer].has(n)),
    neutral: names.filter((n) => NEUTRAL.has(n)),
  });
}

function readFields(
  given: Readonly<Record<string, unknown>>,
  fields: Readonly<Record<string, unknown>>,
  className: string,
  release: string,
  modelled: ReadonlySet<string>,
  neutral: ReadonlySet<string>,
  path: Path,
  issues: Issue[],
): Record<string, unknown> {
  const names = Object.keys(fields);
  const out: Record<string, unknown> = {};
  for (const name of names) out[name] = fields[name];
  for (const [name, value] of Object.entries(given)) {
    if (!Object.hasOwn(fields, name)) {
      const hint = didYouMean(name, names);
      issues.push({
        path: [...path, name],
        code: 'unknown-field',
        message: `not a field of ${className} in ${release}${hint !== undefined ? ` (did you mean '${hint}'?)` : ''}`,
        received: show(value),
      });
      continue;
    }
    if (!modelled.has(name) && !neutral.has(name) && !sameValue(value, fields[name])) {
      issues.push({
        path: [...path, name],
        code: 'not-modelled',
        message: `${className}.${name} is not modelled: only its default is accepted`,
        expected: show(fields[name]),
        received: show(value),
      });
      continue;
    }
    out[name] = value;
  }
  return out;
}

function loraOf(config: LoraConfig, fields: Readonly<Record<string, unknown>>, release: string, path: Path, issues: Issue[]): ResolvedTrainerArgs['lora'] {
  const v = readFields(config, fields, 'LoraConfig', `peft ${release}`, LORA_MODELLED, LORA_NEUTRAL, path, issues);
  const rank = positiveInt(v, 'r', path, issues) ?? 8;
  const dropout = nonNegative(v, 'lora_dropout', path, issues);
  const raw = v.target_modules;
  let targets: readonly string[] | 'all-linear' | undefined;
  if (raw === null || raw === undefined) targets = undefined;
  else if (raw === 'all-linear') targets = 'all-linear';
  else if (typeof raw === 'string') targets = [raw];
  else if (Array.isArray(raw) && raw.every((t) => typeof t === 'string')) targets = raw as string[];
  else
    issues.push({
      path: [...path, 'target_modules'],
      code: 'bad-option',
      message: 'must be a list of module names, a name or "all-linear"',
      received: show(raw),
    });
  return { rank, dropout, ...(targets !== undefined ? { targets } : {}) };
}

/** The common TrainingArguments every trainer reads (`deepspeed`: the arguments name a DeepSpeed config). */
function commonArgs(v: Record<string, unknown>, path: Path, issues: Issue[], deepspeed: boolean) {
  const kwargs = v.gradient_checkpointing_kwargs;
  if (kwargs !== null && kwargs !== undefined && !sameValue(kwargs, { use_reentrant: false }))
    issues.push({
      path: [...path, 'gradient_checkpointing_kwargs'],
      code: 'not-modelled',
      message: 'only non-reentrant checkpointing (the default) is modelled',
      expected: 'null or {"use_reentrant": false}',
      received: show(kwargs),
    });
  const fp16 = v.fp16 === true;
  // Under DeepSpeed the Trainer runs no autocast and no GradScaler: fp16 is DeepSpeed's (its `fp16` section).
  if (fp16 && !deepspeed)
    issues.push({
      path: [...path, 'fp16'],
      code: 'not-modelled',
      message: 'fp16 mixed precision (autocast and GradScaler) is not modelled; under DeepSpeed it is DeepSpeed fp16, which is',
      expected: 'false',
      received: 'true',
    });
  // TRL's configs: bf16 None means `not fp16` (trl/trainer/base_config.py __post_init__).
  if (v.bf16 === null) v.bf16 = !fp16;
  if (fp16 && v.bf16 === true)
    issues.push({
      path: [...path, 'fp16'],
      code: 'bad-option',
      message: 'TrainingArguments refuses fp16 with bf16 (__post_init__: "At most one of fp16 and bf16 can be True")',
      expected: 'fp16 or bf16',
      received: 'both',
    });
  const maxGradNorm = v.max_grad_norm === null ? 0 : nonNegative(v, 'max_grad_norm', path, issues);
  return {
    batch: positiveInt(v, 'per_device_train_batch_size', path, issues) ?? 1,
    accumulation: positiveInt(v, 'gradient_accumulation_steps', path, issues) ?? 1,
    checkpointing: flag(v, 'gradient_checkpointing', path, issues),
    bf16: flag(v, 'bf16', path, issues),
    fp16,
    optim: choice(v, 'optim', OPTIMIZERS, path, issues),
    maxGradNorm,
    liger: v.use_liger_kernel === true,
  };
}

/** GRPOConfig's vLLM fields (use_vllm=True): the mode, the colocated engine's utilization, importance sampling. */
function vllmArgs(v: Record<string, unknown>, path: Path, issues: Issue[]): NonNullable<NonNullable<ResolvedTrainerArgs['grpo']>['vllm']> {
  const mode = choice(v, 'vllm_mode', ['colocate', 'server'] as const, path, issues);
  const util = v.vllm_gpu_memory_utilization;
  if (typeof util !== 'number' || !(util > 0 && util <= 1))
    issues.push({
      path: [...path, 'vllm_gpu_memory_utilization'],
      code: 'bad-option',
      message: 'a fraction of the GPU',
      expected: 'in (0, 1]',
      received: show(util),
    });
  const max = v.vllm_max_model_length;
  return {
    mode,
    gpuMemoryUtilization: typeof util === 'number' ? util : 0.3,
    importanceSampling: flag(v, 'vllm_importance_sampling_correction', path, issues),
    maxModelLength: max === null || max === undefined ? null : (positiveInt(v, 'vllm_max_model_length', path, issues) ?? null),
    sleepMode: flag(v, 'vllm_enable_sleep_mode', path, issues),
  };
}

/** GRPOConfig.generation_kwargs: only `min_new_tokens` is modelled (two logits processors per decode step). */
function generationKwargs(v: Record<string, unknown>, path: Path, issues: Issue[]): number {
  const kwargs = v.generation_kwargs;
  if (kwargs === null || kwargs === undefined) return 0;
  if (typeof kwargs !== 'object' || Array.isArray(kwargs)) {
    issues.push({ path: [...path, 'generation_kwargs'], code: 'bad-option', message: 'must be a mapping', received: show(kwargs) });
    return 0;
  }
  let min = 0;
  for (const [key, value] of Object.entries(kwargs)) {
    if (key === 'min_new_tokens' && typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) min = value;
    else
      issues.push({
        path: [...path, 'generation_kwargs', key],
        code: 'not-modelled',
        message: `generation_kwargs.${key} is not modelled (min_new_tokens is)`,
        received: show(value),
      });
  }
  return min;
}

/** GRPOConfig.model_init_kwargs (how TRL loads the reference model): float32 weights and any attention are modelled. */
function modelInitKwargs(v: Record<string, unknown>, path: Path, issues: Issue[]): void {
  const kwargs = v.model_init_kwargs;
  if (kwargs === null || kwargs === undefined) return;
  if (typeof kwargs !== 'object' || Array.isArray(kwargs)) {
    issues.push({ path: [...path, 'model_init_kwargs'], code: 'bad-option', message: 'must be a mapping', received: show(kwargs) });
    return;
  }
  for (const [key, value] of Object.entries(kwargs)) {
    const ok = key === 'dtype' || key === 'torch_dtype' ? value === 'float32' || value === 'auto' : key === 'attn_implementation';
    if (!ok)
      issues.push({
        path: [...path, 'model_init_kwargs', key],
        code: 'not-modelled',
        message: `model_init_kwargs.${key} = ${show(value)} is not modelled (the reference is the policy's architecture in float32)`,
        received: show(value),
      });
  }
}

function grpoArgs(v: Record<string, unknown>, batch: number, accumulation: number, path: Path, issues: Issue[]): NonNullable<ResolvedTrainerArgs['grpo']> {
  const numGenerations = positiveInt(v, 'num_generations', path, issues) ?? 1;
  const maxCompletionLength = positiveInt(v, 'max_completion_length', path, issues) ?? 1;
  const numIterations = positiveInt(v, 'num_iterations', path, issues) ?? 1;
  const beta = nonNegative(v, 'beta', path, issues);
  const temperature = nonNegative(v, 'temperature', path, issues);
  const lossType = choice(v, 'loss_type', GRPO_LOSSES, path, issues);
  // grpo_config.py __post_init__ (one process): steps_per_generation and generation_batch_size from each other.
  const spg = v.steps_per_generation;
  const gbs = v.generation_batch_size;
  let stepsPerGeneration = accumulation;
  if (spg !== null && gbs !== null && spg !== undefined && gbs !== undefined)
    issues.push({
      path: [...path, 'generation_batch_size'],
      code: 'bad-option',
      message: "'generation_batch_size' and 'steps_per_generation' can not be both configured",
      received: show(gbs),
    });
  else if (spg !== null && spg !== undefined) stepsPerGeneration = positiveInt(v, 'steps_per_generation', path, issues) ?? 1;
  else if (gbs !== null && gbs !== undefined) {
    const g = positiveInt(v, 'generation_batch_size', path, issues) ?? batch;
    if (g % batch !== 0)
      issues.push({
        path: [...path, 'generation_batch_size'],
        code: 'bad-option',
        message: 'must be divisible by the global batch size',
        expected: `a multiple of ${batch}`,
        received: String(g),
      });
    stepsPerGeneration = Math.max(1, Math.floor(g / batch));
  }
  const generationBatchSize = batch * stepsPerGeneration;
  if (generationBatchSize % numGenerations !== 0)
    issues.push({
      path: [...path, 'num_generations'],
      code: 'bad-option',
      message: 'the generation batch (per_device_train_batch_size × steps_per_generation) must be a multiple of num_generations',
      expected: `a divisor of ${generationBatchSize}`,
      received: String(numGenerations),
    });
  if (numGenerations < 2)
    issues.push({
      path: [...path, 'num_generations'],
      code: 'bad-option',
      message: 'GRPO needs at least 2 generations per prompt',
      expected: '≥ 2',
      received: String(numGenerations),
    });
  return {
    numGenerations,
    maxCompletionLength,
    beta,
    temperature,
    numIterations,
    stepsPerGeneration,
    generationBatchSize,
    lossType,
    minNewTokens: generationKwargs(v, path, issues),
    ...(v.use_vllm === true ? { vllm: vllmArgs(v, path, issues) } : {}),
  };
}

/**
 * Checks a trainer's arguments against the fields of `trl` (and the transformers and PEFT
 * releases read with it) and resolves them with that release's defaults: every issue at once.
 * `deepspeed: true` says the arguments run under DeepSpeed (fromTrainingArguments with a
 * `deepspeed` config): `fp16` is then read (DeepSpeed's fp16 engine), else it is not modelled.
 *
 * @example
 * ```ts
 * import { resolveTrainerArgs } from 'vram-ts';
 * const r = resolveTrainerArgs('grpo', { per_device_train_batch_size: 8 });
 * console.log(r.grpo?.beta, r.grpo?.numGenerations, r.checkpointing); // 0 8 true
 * ```
 */
export function resolveTrainerArgs(
  trainer: TrainerKind,
  args: TrainerArgs,
  options: { readonly trl?: string; readonly peft?: LoraConfig | null; readonly deepspeed?: boolean } = {},
): ResolvedTrainerArgs {
  validate(trainer, trainerKind, ['trainer']);
  if (!plain(options)) fail('bad-option', 'must be an options object ({ trl, peft })', { path: ['options'], received: show(options) });
  validate(options, resolveOptions, ['options']);
  const release = options.trl ?? DEFAULT_TRL;
  const fields = releaseFields(release);
  const className = CLASS_NAMES[trainer];
  const path = [trainer === 'trainer' ? 'args' : 'config'];
  const issues: Issue[] = [];
  fieldsObject(args, className, path);
  const releaseName = trainer === 'trainer' ? `transformers ${fields.transformers}` : `trl ${release}`;
  const v = readFields(args, fields[className], className, releaseName, MODELLED[trainer], NEUTRAL, path, issues);
  const common = commonArgs(v, path, issues, options.deepspeed === true);
  let extra: Partial<ResolvedTrainerArgs> = {};
  if (trainer === 'sft') {
    // sft_config.py __post_init__: loss_type None → chunked_nll (nll with Liger, which refuses chunked_nll).
    const loss = v.loss_type === null ? (common.liger ? 'nll' : 'chunked_nll') : choice(v, 'loss_type', ['nll', 'chunked_nll'] as const, path, issues);
    if (common.liger && loss === 'chunked_nll')
      issues.push({
        path: [...path, 'loss_type'],
        code: 'bad-option',
        message: "SFTTrainer refuses loss_type='chunked_nll' with use_liger_kernel",
        expected: "'nll'",
        received: "'chunked_nll'",
      });
    extra = { sftLoss: loss, maxLength: v.max_length === null ? null : positiveInt(v, 'max_length', path, issues) };
  } else if (trainer === 'grpo') {
    extra = { grpo: grpoArgs(v, common.batch, common.accumulation, path, issues) };
    modelInitKwargs(v, path, issues);
  }
  const lora = options.peft === undefined || options.peft === null ? undefined : loraOf(options.peft, fields.LoraConfig, fields.peft, ['peft_config'], issues);
  if (issues.length > 0) throw new VramError(issues);
  return deepFreeze({ trainer, trl: release, transformers: fields.transformers, ...common, ...extra, ...(lora !== undefined ? { lora } : {}) });
}
