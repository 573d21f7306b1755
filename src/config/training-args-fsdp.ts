/*
 * The Trainer's FSDP: `fsdp` and `fsdp_config` of TrainingArguments, read as transformers 5.18.0's
 * _process_fsdp_args (ta = transformers/training_args.py:2734-2895) turns them into accelerate's
 * FullyShardedDataParallelPlugin, whose fsdp2_prepare_model makes the units (accelerateFsdp2Units).
 */
import type { VramIssue } from '../errors.js';
import type { Layer } from '../nn/types.js';
import type { Fsdp2UnitSpec } from '../parallel/engines/fsdp2-units.js';
import { didYouMean, show } from '../validate.js';
import { unitsOfModel } from './accelerate-fsdp-units.js';

/** What the Trainer's FSDP decides: the plugin's reshard_after_forward and cpu_offload, the units. */
export interface TrainerFsdp {
  readonly reshardAfterForward: boolean;
  readonly offload: boolean;
  readonly units: readonly Fsdp2UnitSpec[];
}

/** fsdp_config keys (after ta:2743-2745 strip `fsdp_`) that move no memory under FSDP2, with why. */
const NEUTRAL: Readonly<Record<string, true>> = {
  state_dict_type: true,
  cpu_ram_efficient_loading: true,
  min_num_params: true,
  xla_fsdp_v2: true,
  xla_fsdp_grad_ckpt: true,
  xla_fsdp_settings: true,
  // FSDP1 only (ta:2826-2841): not read under version 2.
  forward_prefetch: true,
  backward_prefetch: true,
  use_orig_params: true,
  sync_module_states: true,
  limit_all_gathers: true,
};
const READ = ['version', 'reshard_after_forward', 'cpu_offload', 'auto_wrap_policy', 'transformer_layer_cls_to_wrap', 'activation_checkpointing', 'xla'];
const truthy = (v: unknown) => v !== undefined && v !== null && v !== false && v !== '' && !(Array.isArray(v) && v.length === 0);
/** str_to_bool(str(v).lower()) (ta:2813-2819). */
const bool = (v: unknown): boolean | undefined => {
  const word = String(v).toLowerCase();
  return ['y', 'yes', 't', 'true', 'on', '1'].includes(word) ? true : ['n', 'no', 'f', 'false', 'off', '0'].includes(word) ? false : undefined;
};

/** The legacy `fsdp` words (ta:2846-2895) into fsdp_config entries, for version 2. */
function legacyWords(fsdp: unknown, config: Record<string, unknown>, issues: VramIssue[]): void {
  if (typeof fsdp !== 'string' && !Array.isArray(fsdp)) return;
  const words = typeof fsdp === 'string' ? fsdp.split(/\s+/).filter((w) => w !== '') : fsdp.map(String);
  for (const word of words) {
    if (word === 'full_shard') config.reshard_after_forward ??= true;
    else if (word === 'shard_grad_op') config.reshard_after_forward ??= false;
    else if (word === 'offload') config.cpu_offload ??= true;
    else if (word === 'auto_wrap') continue;
    else if (['no_shard', 'hybrid_shard', 'hybrid_shard_zero2'].includes(word))
      issues.push({
        path: ['fsdp'],
        code: 'bad-option',
        message: `fsdp=${word} is only available with FSDP1 (ta:2883-2886)`,
        expected: 'full_shard | shard_grad_op | offload | auto_wrap',
        received: word,
      });
    else
      issues.push({
        path: ['fsdp'],
        code: 'bad-option',
        message: `Unknown \`fsdp\` option: ${word} (ta:2894)`,
        expected: 'full_shard | shard_grad_op | offload | auto_wrap',
        received: word,
      });
  }
}

/** The issue of one fsdp_config key, or none. */
function keyIssue(key: string, value: unknown, path: (string | number)[]): VramIssue | undefined {
  const known = [...READ, ...Object.keys(NEUTRAL)];
  if (!known.includes(key)) {
    const near = didYouMean(key, known);
    return {
      path,
      code: 'unknown-option',
      message: `not an fsdp_config key transformers reads${near !== undefined ? `; did you mean ${JSON.stringify(near)}?` : ''}`,
      expected: known.join(' | '),
      received: show(value),
    };
  }
  if (key === 'version' && Number(value) === 1)
    return {
      path,
      code: 'not-modelled',
      message: 'FSDP1 (torch FullyShardedDataParallel) is not modelled; vram-ts models FSDP2 (the default, ta:2784)',
      expected: '2',
      received: show(value),
    };
  if (key === 'version' && Number(value) !== 2) return { path, code: 'bad-option', message: 'FSDP versions are 1 and 2', expected: '2', received: show(value) };
  if (key === 'auto_wrap_policy' && value !== 'TRANSFORMER_BASED_WRAP')
    return {
      path,
      code: 'not-modelled',
      message: 'units other than the decoder layers (SIZE_BASED_WRAP, NO_WRAP) are not measured',
      expected: 'TRANSFORMER_BASED_WRAP',
      received: show(value),
    };
  if (key === 'activation_checkpointing' && bool(value) === true)
    return {
      path,
      code: 'not-modelled',
      message: 'checkpoint_wrapper around each FSDP2 unit (recomputation between its gathers) is not measured',
      expected: 'false',
      received: show(value),
    };
  if (key === 'xla' && truthy(value))
    return { path, code: 'not-modelled', message: 'FSDP on XLA (TPUs) is not modelled', expected: 'false', received: show(value) };
  if ((key === 'reshard_after_forward' || key === 'cpu_offload') && bool(value) === undefined)
    return { path, code: 'bad-option', message: 'str_to_bool refuses it (FSDP2 takes a bool, ta:2818-2819)', expected: 'true | false', received: show(value) };
  return undefined;
}

/**
 * `fsdp` (true, or the legacy words) with `fsdp_config` as a mapping: the plugin settings FSDP2
 * reads and the units accelerate makes of `model` (issues pushed; undefined without FSDP or on any).
 */
export function readTrainerFsdp(fields: Record<string, unknown>, model: Layer | undefined, issues: VramIssue[]): TrainerFsdp | undefined {
  const fsdp = fields.fsdp;
  if (!truthy(fsdp)) return undefined;
  const before = issues.length;
  const given = fields.fsdp_config ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    issues.push({
      path: ['fsdp_config'],
      code: 'bad-option',
      message: 'fsdp_config as a mapping (a path is a file to read and give as its contents)',
      expected: 'mapping',
      received: show(given),
    });
    return undefined;
  }
  // ta:2743-2745: keys starting fsdp_ lose the prefix.
  const config: Record<string, unknown> = {};
  const paths = new Map<string, (string | number)[]>();
  for (const [key, value] of Object.entries(given)) {
    const name = key.startsWith('fsdp_') ? key.slice(5) : key;
    config[name] = value;
    paths.set(name, ['fsdp_config', key]);
  }
  legacyWords(fsdp, config, issues);
  for (const [key, value] of Object.entries(config)) {
    const issue = keyIssue(key, value, paths.get(key) ?? ['fsdp']);
    if (issue !== undefined) issues.push(issue);
  }
  if (truthy(fields.gradient_checkpointing))
    issues.push({
      path: ['gradient_checkpointing'],
      code: 'not-modelled',
      message: "the model's gradient checkpointing inside FSDP2's units is not measured",
      expected: 'false',
      received: 'true',
    });
  const classes = config.transformer_layer_cls_to_wrap;
  const names = typeof classes === 'string' ? [classes] : Array.isArray(classes) ? classes.map(String) : undefined;
  const path = paths.get('transformer_layer_cls_to_wrap');
  const found = unitsOfModel(model, names === undefined || path === undefined ? undefined : { names, path });
  const units = Array.isArray(found) ? (found as readonly Fsdp2UnitSpec[]) : undefined;
  if (units === undefined) issues.push(found as VramIssue);
  if (issues.length > before || units === undefined) return undefined;
  return { reshardAfterForward: bool(config.reshard_after_forward ?? true)!, offload: bool(config.cpu_offload ?? false)!, units };
}
