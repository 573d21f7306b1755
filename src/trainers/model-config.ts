/**
 * A TRL script's config file (`trl sft --config sft_config.yaml`, `trl grpo --config …`) read as
 * TRL 1.13.0's TrlParser.parse_args_and_config reads it (trl/scripts/utils.py): one mapping whose
 * keys are split over the script's dataclasses — ScriptArguments (GRPOScriptArguments for grpo),
 * the trainer's config (SFTConfig / GRPOConfig), ModelConfig (trl/trainer/model_config.py) and
 * DatasetMixtureConfig — plus `env` (environment variables); a key no dataclass takes is passed
 * by `trl` to `accelerate launch` (trl/cli/commands/training.py). Keys match the dataclass fields
 * exactly (argparse's `dest`, underscores): `per-device-train-batch-size` is no field.
 */
import { fail, type VramIssue as Issue, VramError } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { AttentionImpl } from '../nn/attention.js';
import { didYouMean, object, show, string, validate } from '../validate.js';
import { copyData, jsonData, plain } from './field-checks.js';
import { DEFAULT_TRL, trainerFields, type LoraConfig } from './args.js';

/** TRL 1.13.0's ModelConfig: every field and its default (trl/trainer/model_config.py). */
export const MODEL_CONFIG_FIELDS = deepFreeze({
  model_name_or_path: null,
  model_revision: 'main',
  dtype: 'float32',
  attn_implementation: null,
  use_peft: false,
  lora_r: 16,
  lora_alpha: 32,
  lora_dropout: 0.05,
  lora_target_modules: null,
  lora_target_parameters: null,
  lora_modules_to_save: null,
  lora_task_type: 'CAUSAL_LM',
  use_rslora: false,
  use_dora: false,
  load_in_8bit: false,
  load_in_4bit: false,
  bnb_4bit_quant_type: 'nf4',
  use_bnb_nested_quant: false,
  bnb_4bit_quant_storage: null,
} as const);

/** ScriptArguments (both scripts) and GRPOScriptArguments' own fields, with their defaults (trl/scripts/utils.py, grpo.py). */
const SCRIPT_FIELDS: Readonly<Record<string, unknown>> = {
  dataset_name: null,
  dataset_config: null,
  dataset_train_split: 'train',
  dataset_test_split: 'test',
  dataset_streaming: false,
  ignore_bias_buffers: false,
};
const GRPO_SCRIPT_FIELDS: Readonly<Record<string, unknown>> = { reward_model_name_or_path: null, reward_funcs: null };
/** DatasetMixtureConfig (trl/scripts/utils.py): which datasets, read on the host. */
const MIXTURE_FIELDS: Readonly<Record<string, unknown>> = { datasets: [], streaming: false, test_split_size: null };

/** `accelerate launch` arguments a TRL config may hold (the CLI passes unknown keys on to it): one process is modelled. */
const LAUNCH_KEYS = new Set([
  'accelerate_config',
  'config_file',
  'num_processes',
  'num_machines',
  'multi_gpu',
  'mixed_precision',
  'use_deepspeed',
  'use_fsdp',
  'gpu_ids',
  'main_process_port',
  'main_process_ip',
  'machine_rank',
]);
/** Launch arguments that only say where the processes meet. */
const LAUNCH_NEUTRAL = new Set(['main_process_port', 'main_process_ip', 'machine_rank']);

/** ModelConfig.attn_implementation → the attention vram-ts builds (transformers' names). */
const ATTENTIONS: Readonly<Record<string, AttentionImpl>> = { eager: 'eager', sdpa: 'sdpa', flash_attention_2: 'flash' };

/** A TRL script config, split: the trainer's fields, the model options ModelConfig means, the LoraConfig `use_peft` builds. */
export interface TrlScriptConfig {
  /** The trainer config's fields (SFTConfig / GRPOConfig), for {@link resolveTrainerArgs}. */
  readonly config: Readonly<Record<string, unknown>>;
  /**
   * ModelConfig.dtype (or `torch_dtype`) when the file gives one other than `auto`; float32, ModelConfig's
   * default, when a script file (any key beyond the trainer config's) gives none.
   */
  readonly dtype?: 'float32' | 'bfloat16' | 'float16';
  /** ModelConfig.attn_implementation when the file gives one. */
  readonly attention?: AttentionImpl;
  /** The LoraConfig TRL's get_peft_config builds with `use_peft: true`. */
  readonly peft?: LoraConfig;
  /** ModelConfig.model_name_or_path and model_revision, when given (the model is the caller's). */
  readonly model?: string;
  readonly revision?: string;
  /** The keys accepted that move no memory (datasets, rewards as functions, env, unused LoRA fields). */
  readonly neutral: readonly string[];
  /** Where each output came from: `config.<field>`, `peft_config.<field>`, `dtype`, `attention` → the file's key. */
  readonly keys: Readonly<Record<string, string>>;
}

const issue = (key: string, code: Issue['code'], message: string, value: unknown, expected?: string): Issue => ({
  path: [key],
  code,
  message,
  received: show(value),
  ...(expected !== undefined ? { expected } : {}),
});

/** ModelConfig.dtype (torch_dtype: TRL's name for it before it followed transformers' rename). */
function dtypeOf(file: Readonly<Record<string, unknown>>, issues: Issue[]): { key?: string; dtype?: TrlScriptConfig['dtype'] } {
  const given = ['dtype', 'torch_dtype'].filter((k) => Object.hasOwn(file, k));
  if (given.length === 2 && file.dtype !== file.torch_dtype)
    issues.push(issue('torch_dtype', 'bad-option', 'dtype and torch_dtype (its older name) disagree', file.torch_dtype, show(file.dtype)));
  const key = given[0];
  if (key === undefined) return {};
  const value = file[key];
  if (value === null || value === 'auto') return { key };
  if (value === 'bfloat16' || value === 'float16' || value === 'float32') return { key, dtype: value };
  issues.push(issue(key, 'bad-option', "ModelConfig.dtype is one of TRL's choices", value, "'auto' | 'bfloat16' | 'float16' | 'float32'"));
  return { key };
}

/** get_peft_config: with use_peft, the LoraConfig from the lora_* fields (their ModelConfig defaults otherwise). */
function peftOf(file: Readonly<Record<string, unknown>>, keys: Record<string, string>, neutral: string[], issues: Issue[]): LoraConfig | undefined {
  const lora = Object.keys(MODEL_CONFIG_FIELDS).filter((k) => k.startsWith('lora_') || k === 'use_rslora' || k === 'use_dora');
  if (file.use_peft !== true) {
    if (file.use_peft !== undefined && file.use_peft !== false) issues.push(issue('use_peft', 'bad-option', 'must be true or false', file.use_peft));
    neutral.push(...lora.filter((k) => Object.hasOwn(file, k)));
    return undefined;
  }
  const v = (k: keyof typeof MODEL_CONFIG_FIELDS) => (Object.hasOwn(file, k) ? file[k] : MODEL_CONFIG_FIELDS[k]);
  for (const [k, why] of [
    ['use_dora', 'DoRA (a magnitude vector and its norm per layer) is not modelled'],
    ['lora_modules_to_save', 'modules_to_save (trainable copies of whole modules) is not modelled'],
    ['lora_target_parameters', 'target_parameters (LoRA on nn.Parameter) is not modelled'],
  ] as const)
    if (!(v(k) === null || v(k) === false)) issues.push(issue(k, 'not-modelled', why, v(k), show(MODEL_CONFIG_FIELDS[k])));
  if (v('lora_task_type') !== 'CAUSAL_LM')
    issues.push(issue('lora_task_type', 'not-modelled', 'only a causal LM (CAUSAL_LM) is modelled', v('lora_task_type'), "'CAUSAL_LM'"));
  // ModelConfig.__post_init__: a one-item list becomes its item.
  let targets = v('lora_target_modules');
  if (Array.isArray(targets) && targets.length === 1) targets = targets[0];
  // A string PEFT matches as a regex against whole module names (peft tuners_utils check_target_module_exists:
  // re.fullmatch), so 'q_proj' matches no 'model.layers.0.self_attn.q_proj' and PEFT raises; only 'all-linear' is a name.
  if (typeof targets === 'string' && targets !== 'all-linear')
    issues.push(
      issue(
        'lora_target_modules',
        'not-modelled',
        'one target: TRL passes it as a string, which PEFT matches as a regex against the full module names (a bare name matches none, and PEFT raises): not modelled',
        v('lora_target_modules'),
        "two or more names, or 'all-linear'",
      ),
    );
  const peft = { r: v('lora_r'), lora_alpha: v('lora_alpha'), lora_dropout: v('lora_dropout'), target_modules: targets, use_rslora: v('use_rslora') };
  const from: Record<string, string> = {
    r: 'lora_r',
    lora_alpha: 'lora_alpha',
    lora_dropout: 'lora_dropout',
    target_modules: 'lora_target_modules',
    use_rslora: 'use_rslora',
  };
  for (const [field, key] of Object.entries(from)) keys[`peft_config.${field}`] = key;
  neutral.push('lora_task_type', 'use_dora', 'lora_modules_to_save', 'lora_target_parameters');
  return peft;
}

/**
 * Splits a TRL script's config file (`trl sft|grpo --config FILE`, parsed into a mapping) over the
 * dataclasses TRL 1.13.0's TrlParser fills: the trainer's fields (checked later by
 * resolveTrainerArgs), ModelConfig's dtype and attention, the LoraConfig `use_peft` builds, and
 * the keys that move no memory (ScriptArguments, DatasetMixtureConfig, `env`). A ModelConfig
 * field that moves memory in a way vram-ts does not model (4/8-bit loading, DoRA) or an
 * accelerate launch argument (the trainers are one process) is an error at its key; a key no
 * dataclass has is unknown-field with did-you-mean. `torch_dtype` is read as `dtype` (its name
 * before TRL followed transformers' rename; the recipes written then use it).
 *
 * @example
 * ```ts
 * import { fromTrlConfig } from 'vram-ts';
 * const s = fromTrlConfig('sft', { model_name_or_path: 'Qwen/Qwen2.5-0.5B', dataset_name: 'trl-lib/Capybara', dtype: 'bfloat16', use_peft: true, per_device_train_batch_size: 8 });
 * console.log(s.config, s.dtype, s.peft?.r); // { per_device_train_batch_size: 8 } bfloat16 16
 * ```
 */
export function fromTrlConfig(trainer: 'grpo' | 'sft', file: Readonly<Record<string, unknown>>, options: { readonly trl?: string } = {}): TrlScriptConfig {
  if (trainer !== 'grpo' && trainer !== 'sft')
    fail('bad-option', "must be 'grpo' or 'sft'", { path: ['trainer'], expected: "'grpo' | 'sft'", received: show(trainer) });
  if (!plain(file)) fail('bad-option', 'a TRL config holds one mapping', { path: ['file'], expected: 'an object', received: show(file) });
  if (!plain(options)) fail('bad-option', 'must be an options object ({ trl })', { path: ['options'], received: show(options) });
  validate(options, object({ fields: { trl: string } }), ['options']);
  const fields = trainerFields(trainer, options.trl ?? DEFAULT_TRL);
  const data: Issue[] = [];
  for (const [key, value] of Object.entries(file)) jsonData(value, [key], data, 'a TRL config');
  if (data.length > 0) throw new VramError(data);
  file = copyData(file) as Record<string, unknown>;
  const script = { ...SCRIPT_FIELDS, ...(trainer === 'grpo' ? GRPO_SCRIPT_FIELDS : {}) };
  const known = [
    ...Object.keys(fields.defaults),
    ...Object.keys(MODEL_CONFIG_FIELDS),
    ...Object.keys(script),
    ...Object.keys(MIXTURE_FIELDS),
    'torch_dtype',
    'env',
  ];
  const issues: Issue[] = [];
  const config: Record<string, unknown> = {};
  const keys: Record<string, string> = {};
  const neutral: string[] = [];
  for (const [key, value] of Object.entries(file)) {
    if (Object.hasOwn(fields.defaults, key)) {
      Object.defineProperty(config, key, { value, enumerable: true, writable: true, configurable: true });
      keys[`config.${key}`] = key;
    } else if (key === 'env') {
      if (!plain(value)) issues.push(issue(key, 'bad-option', '`env` field should be a dict in the YAML file', value));
      else if (Object.hasOwn(value, 'PYTORCH_CUDA_ALLOC_CONF') || Object.hasOwn(value, 'PYTORCH_ALLOC_CONF'))
        issues.push(issue(key, 'not-modelled', "the caching allocator's settings are not modelled", value));
      else neutral.push(key);
    } else if (key === 'reward_model_name_or_path') {
      if (value !== null) issues.push(issue(key, 'not-modelled', 'a reward model on the GPU is not modelled (reward functions are)', value, 'null'));
      else neutral.push(key);
    } else if (Object.hasOwn(script, key) || Object.hasOwn(MIXTURE_FIELDS, key) || key === 'model_name_or_path' || key === 'model_revision') neutral.push(key);
    else if (key === 'load_in_4bit' || key === 'load_in_8bit') {
      if (value !== false) issues.push(issue(key, 'not-modelled', 'a quantized (bitsandbytes) base is not modelled for the trainers', value, 'false'));
      else neutral.push(key);
    } else if (key === 'bnb_4bit_quant_type' || key === 'use_bnb_nested_quant' || key === 'bnb_4bit_quant_storage') neutral.push(key);
    else if (key === 'attn_implementation') {
      if (value !== null && ATTENTIONS[String(value)] === undefined)
        issues.push(issue(key, 'not-modelled', 'this attention is not modelled', value, `null | ${Object.keys(ATTENTIONS).join(' | ')}`));
    } else if (key === 'dtype' || key === 'torch_dtype' || Object.hasOwn(MODEL_CONFIG_FIELDS, key)) continue;
    else if (LAUNCH_KEYS.has(key)) {
      if (LAUNCH_NEUTRAL.has(key) || (key === 'num_processes' && value === 1)) neutral.push(key);
      else issues.push(issue(key, 'not-modelled', 'an accelerate launch argument: the trainers are estimated as one process on one GPU', value));
    } else {
      const hint = didYouMean(key.replace(/-/g, '_'), known) ?? didYouMean(key, known);
      issues.push(
        issue(key, 'unknown-field', `not a field of the trl ${trainer} script's dataclasses${hint !== undefined ? ` (did you mean '${hint}'?)` : ''}`, value),
      );
    }
  }
  const { key: dtypeKey, dtype: given } = dtypeOf(file, issues);
  if (dtypeKey !== undefined) keys.dtype = dtypeKey;
  // A file with any key beyond the trainer config's is a `trl <trainer> --config` file: TrlParser fills
  // ModelConfig, whose dtype defaults to float32 (trl/trainer/model_config.py:89-95), and the script loads the model so.
  const scriptFile = Object.keys(file).some((key) => !Object.hasOwn(fields.defaults, key));
  const dtype = given ?? (dtypeKey === undefined && scriptFile ? ('float32' as const) : undefined);
  const attn = file.attn_implementation;
  const attention = typeof attn === 'string' ? ATTENTIONS[attn] : undefined;
  if (Object.hasOwn(file, 'attn_implementation')) keys.attention = 'attn_implementation';
  const peft = peftOf(file, keys, neutral, issues);
  if (file.load_in_4bit === true && file.load_in_8bit === true)
    issues.push(issue('load_in_8bit', 'bad-option', "You can't use 8 bit and 4 bit precision at the same time", true));
  if (issues.length > 0) throw new VramError(issues);
  const str = (k: string) => (typeof file[k] === 'string' ? { [k === 'model_name_or_path' ? 'model' : 'revision']: file[k] as string } : {});
  return deepFreeze({
    config,
    ...(dtype !== undefined ? { dtype } : {}),
    ...(attention !== undefined ? { attention } : {}),
    ...(peft !== undefined ? { peft } : {}),
    ...str('model_name_or_path'),
    ...str('model_revision'),
    neutral: [...new Set(neutral)],
    keys,
  });
}
