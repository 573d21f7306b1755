/* The `zero_optimization` and `optimizer` sections of a DeepSpeed config (fromDeepSpeedConfig in deepspeed.ts). */
import type { OptimizerSpec } from '../memory/optimizers.js';
import type { DeepSpeedKnobValues } from '../parallel/engines/deepspeed/index.js';
import { DEEPSPEED_DEFAULTS } from '../parallel/engines/deepspeed/settings.js';
import type { Path } from '../validate.js';
import { OFFLOAD_OPTIMIZER, OFFLOAD_PARAM, UNMODELLED_OPTIMIZERS, UNMODELLED_TORCH_OPTIMIZERS, ZERO, type KeyRule } from './deepspeed-keys.js';
import { DROPPED_AUTO, isDict, type Dict, type Reader } from './deepspeed-reader.js';

export type { DeepSpeedKnobValues } from '../parallel/engines/deepspeed/index.js';

/** What `zero_optimization` says. */
export interface ZeroReading {
  readonly zero: 1 | 2 | 3;
  readonly knobs: DeepSpeedKnobValues;
  readonly offload: { readonly optimizer: boolean; readonly parameters: boolean };
}

type SizeKnob = Exclude<keyof DeepSpeedKnobValues, 'overlapComm'>;

/** The size knobs: their keys (name first, then the pydantic alias or name: populate_by_name) and the Trainer's "auto" rule (hf trainer_config_finalize). */
const SIZE_KNOBS: readonly { readonly field: SizeKnob; readonly keys: readonly string[]; readonly auto?: (h: number) => number; readonly zero3?: boolean }[] = [
  { field: 'reduceBucketSize', keys: ['reduce_bucket_size'], auto: (h) => h * h },
  { field: 'prefetchBucketSize', keys: ['stage3_prefetch_bucket_size', 'prefetch_bucket_size'], auto: (h) => Math.floor(0.9 * h * h), zero3: true },
  { field: 'paramPersistenceThreshold', keys: ['stage3_param_persistence_threshold', 'param_persistence_threshold'], auto: (h) => 10 * h, zero3: true },
  { field: 'modelPersistenceThreshold', keys: ['stage3_model_persistence_threshold', 'model_persistence_threshold'] },
  { field: 'maxLiveParameters', keys: ['stage3_max_live_parameters', 'max_live_parameters'] },
  { field: 'maxReuseDistance', keys: ['stage3_max_reuse_distance', 'max_reuse_distance'] },
  { field: 'subGroupSize', keys: ['sub_group_size'] },
];

const HANDLED_ZERO = ['stage', 'overlap_comm', 'offload_optimizer', 'offload_param', 'cpu_offload', 'cpu_offload_param', ...SIZE_KNOBS.flatMap((k) => k.keys)];

/** The ZeRO stage: `zero_optimization.stage` (default 0, zc:93), or the deprecated boolean form (zc read_zero_config_deprecated). */
function readStage(r: Reader, config: Dict): 1 | 2 | 3 | undefined {
  const section = config.zero_optimization;
  const path: Path = ['zero_optimization', 'stage'];
  let stage: number | undefined;
  if (typeof section === 'boolean') {
    stage = section ? 1 : 0;
    r.source(['zero_optimization'], 'config', section, 'the deprecated boolean form: true is stage 1');
  } else {
    const value = isDict(section) ? section.stage : undefined;
    if (value === undefined || value === 'auto') {
      stage = 0;
      r.source(path, 'default', 0, value === 'auto' ? DROPPED_AUTO : 'zc:93');
    } else {
      stage = r.int(value, path);
      if (stage !== undefined && stage > 3) r.issue('bad-option', path, 'ZeRO stages are 0-3', '0 | 1 | 2 | 3', value);
      else if (stage !== undefined) r.source(path, 'config', stage);
    }
  }
  if (stage === 0) r.issue('not-modelled', path, 'DeepSpeed without ZeRO (stage 0: FP16_Optimizer / BF16_Optimizer) is not modelled', '1 | 2 | 3', 0);
  return stage === 1 || stage === 2 || stage === 3 ? stage : undefined;
}

/** One size knob: written, "auto" (filled by the Trainer from the hidden size, or dropped), or DeepSpeed's default. */
function sizeKnob(r: Reader, zero: Dict, stage: number, knob: (typeof SIZE_KNOBS)[number]): number {
  const given = knob.keys.filter((k) => zero[k] !== undefined && zero[k] !== null);
  if (given.length > 1)
    r.issue('bad-option', ['zero_optimization', given[1]!], `${given[0]} and ${given[1]} name the same field`, 'one of them', zero[given[1]!]);
  const key = given[0];
  const fallback = DEEPSPEED_DEFAULTS[knob.field];
  if (key === undefined) {
    r.source(['zero_optimization', knob.keys[0]!], 'default', fallback);
    return fallback;
  }
  const path: Path = ['zero_optimization', key];
  const value = zero[key];
  if (value === 'auto') {
    // The Trainer fills only these names, and the ZeRO-3 ones only under stage 3 (hf trainer_config_finalize).
    if (knob.auto !== undefined && key === knob.keys[0] && (knob.zero3 !== true || stage === 3)) {
      const h = r.context.hiddenSize;
      if (h === undefined) return r.unresolved(path, "context.hiddenSize (the model config's hidden_size)") ?? fallback;
      const filled = knob.auto(h);
      r.source(
        path,
        'auto',
        filled,
        `the Trainer: ${knob.field === 'reduceBucketSize' ? 'h²' : knob.field === 'prefetchBucketSize' ? '⌊0.9·h²⌋' : '10·h'} with h = ${h}`,
      );
      return filled;
    }
    r.source(path, 'default', fallback, DROPPED_AUTO);
    return fallback;
  }
  const n = r.int(value, path) ?? fallback;
  r.source(path, 'config', n);
  return n;
}

/** An offload section's device: cpu (true), none (false), nvme (not modelled). */
function offloadDevice(r: Reader, section: unknown, path: Path, rules: Readonly<Record<string, KeyRule>>): boolean {
  if (section === undefined || section === null) return false;
  const read = r.section(section, path, ['device'], rules, true);
  const device = read.device;
  if (device === undefined || device === 'none' || device === 'auto') return false;
  if (device === 'cpu') return true;
  if (device === 'nvme') r.issue('not-modelled', [...path, 'device'], 'offload to NVMe (ZeRO-Infinity) is not modelled', 'cpu | none', device);
  else r.issue('bad-option', [...path, 'device'], 'unknown offload device (oc OffloadDeviceEnum)', 'cpu | nvme | none', device);
  return false;
}

/** `offload_optimizer` / `offload_param` and their deprecated booleans (`cpu_offload`, `cpu_offload_param`: zc, they override). */
function readOffload(r: Reader, zero: Dict, stage: number): ZeroReading['offload'] {
  const flag = (deprecated: string, key: string, rules: Readonly<Record<string, KeyRule>>): boolean => {
    const old = zero[deprecated];
    if (old !== undefined && old !== null && old !== 'auto') {
      const on = r.bool(old, ['zero_optimization', deprecated]) ?? false;
      r.source(['zero_optimization', deprecated], 'config', on, `deprecated: ${key} with device ${on ? 'cpu' : 'none'}`);
      if (zero[key] !== undefined) r.ignored.push({ path: ['zero_optimization', key], why: `${deprecated} overrides it (zc _process_deprecated_field)` });
      return on;
    }
    const on = offloadDevice(r, zero[key], ['zero_optimization', key], rules);
    r.source(['zero_optimization', key], zero[key] === undefined ? 'default' : 'config', on);
    return on;
  };
  const optimizer = flag('cpu_offload', 'offload_optimizer', OFFLOAD_OPTIMIZER);
  let parameters = flag('cpu_offload_param', 'offload_param', OFFLOAD_PARAM);
  if (parameters && stage !== 3) {
    r.ignored.push({ path: ['zero_optimization', 'offload_param'], why: 'stages 1/2 take no parameter offload config (eng:2415): DeepSpeed ignores it' });
    parameters = false;
  }
  return { optimizer, parameters };
}

/** `zero_optimization`: the stage, the knobs vram-ts models, offloading; every other key by its rule. */
export function readZero(r: Reader, config: Dict): ZeroReading | undefined {
  const stage = readStage(r, config);
  const zero = typeof config.zero_optimization === 'boolean' ? {} : r.section(config.zero_optimization, ['zero_optimization'], HANDLED_ZERO, ZERO, true);
  const s = stage ?? 0;
  const sizes = Object.fromEntries(SIZE_KNOBS.map((k) => [k.field, sizeKnob(r, zero, s, k)])) as Record<SizeKnob, number>;
  const overlapValue = zero.overlap_comm;
  const defaulted = overlapValue === undefined || overlapValue === null || overlapValue === 'auto';
  const overlapComm = defaulted ? s === 3 : (r.bool(overlapValue, ['zero_optimization', 'overlap_comm']) ?? s === 3);
  r.source(['zero_optimization', 'overlap_comm'], defaulted ? 'default' : 'config', overlapComm, defaulted ? 'stage == 3 (zc:382-386)' : undefined);
  const offload = readOffload(r, zero, s);
  return stage === undefined ? undefined : { zero: stage, knobs: { ...sizes, overlapComm }, offload };
}

const SCALAR = (why: string): KeyRule => ({ kind: 'ignore', why });
const HYPER = SCALAR('a hyper-parameter: no tensors');
const ADAM_PARAMS: Readonly<Record<string, KeyRule>> = {
  lr: HYPER,
  betas: HYPER,
  eps: HYPER,
  bias_correction: HYPER,
  set_grad_none: SCALAR('FusedAdam frees the gradients either way in ZeRO (the partition is freed after the step)'),
  amsgrad: { kind: 'default', value: false, why: 'AMSGrad (a third moment; FusedAdam refuses it)' },
  fp32_optimizer_states: { kind: 'default', value: true, why: 'DeepSpeedCPUAdam’s fp32 moments (true by default)' },
};
const LION_PARAMS: Readonly<Record<string, KeyRule>> = { lr: HYPER, betas: HYPER, weight_decay: HYPER };
const SGD_PARAMS: Readonly<Record<string, KeyRule>> = {
  lr: HYPER,
  dampening: HYPER,
  maximize: HYPER,
  differentiable: { kind: 'default', value: false, why: 'differentiable SGD' },
};

/** A weight decay read where it moves memory (a temporary in torch's Adam and SGD): written, or "auto" from the Trainer. */
function weightDecay(r: Reader, params: Dict): number | undefined {
  const value = params.weight_decay;
  const path: Path = ['optimizer', 'params', 'weight_decay'];
  if (value === undefined) return undefined;
  if (value === 'auto') {
    const wd = r.context.trainer?.weightDecay;
    if (wd === undefined) return r.unresolved(path, 'context.trainer.weightDecay');
    r.source(path, 'auto', wd, 'TrainingArguments weight_decay');
    return wd;
  }
  if (typeof value !== 'number' || !(value >= 0)) return r.issue('bad-option', path, 'must be a number ≥ 0', 'number ≥ 0', value);
  return value;
}

/** Adam / AdamW (eng:2095-2139): FusedAdam (or DeepSpeedCPUAdam under offload), or torch's with `torch_adam`; Adam means AdamW unless `adam_w_mode` is false. */
function adam(r: Reader, type: string, params: Dict): OptimizerSpec {
  r.section(params, ['optimizer', 'params'], ['weight_decay', 'torch_adam', 'adam_w_mode', 'max_grad_norm'], ADAM_PARAMS, false);
  if (params.max_grad_norm !== undefined)
    r.issue(
      'bad-option',
      ['optimizer', 'params', 'max_grad_norm'],
      'DeepSpeed refuses max_grad_norm as an optimizer parameter: use gradient_clipping (eng:2090)',
      'absent',
      params.max_grad_norm,
    );
  const torchAdam = params.torch_adam === undefined ? false : (r.bool(params.torch_adam, ['optimizer', 'params', 'torch_adam']) ?? false);
  const wMode = params.adam_w_mode === undefined ? true : (r.bool(params.adam_w_mode, ['optimizer', 'params', 'adam_w_mode']) ?? true);
  const name = type === 'adamw' || wMode ? 'adamw' : 'adam';
  // torch.optim on CUDA tensors defaults to foreach; FusedAdam is one multi-tensor kernel without temporaries.
  const impl = torchAdam ? 'foreach' : 'fused';
  if (name === 'adamw' || !torchAdam) {
    if (params.weight_decay !== undefined)
      r.ignored.push({ path: ['optimizer', 'params', 'weight_decay'], why: `${name} (${impl}) decays in place, without a temporary` });
    return { name, impl };
  }
  const wd = weightDecay(r, params);
  return { name, impl, ...(wd !== undefined && wd > 0 ? { weightDecay: wd } : {}) };
}

/** torch.optim.SGD, built by name (eng:2237); ZeRO wraps it only with zero_allow_untested_optimizer (eng:1986-1990). */
function sgd(r: Reader, config: Dict, params: Dict): OptimizerSpec {
  r.section(params, ['optimizer', 'params'], ['momentum', 'nesterov', 'weight_decay', 'foreach', 'fused'], SGD_PARAMS, false);
  if (config.zero_allow_untested_optimizer !== true)
    r.issue(
      'bad-option',
      ['zero_allow_untested_optimizer'],
      'ZeRO wraps torch.optim.SGD only with zero_allow_untested_optimizer: true (eng:1986-1990)',
      'true',
      config.zero_allow_untested_optimizer ?? 'missing',
    );
  const p: Path = ['optimizer', 'params'];
  const momentum =
    params.momentum === undefined
      ? 0
      : typeof params.momentum === 'number' && params.momentum >= 0
        ? params.momentum
        : (r.issue('bad-option', [...p, 'momentum'], 'must be a number ≥ 0', 'number ≥ 0', params.momentum) ?? 0);
  const nesterov = params.nesterov === undefined ? false : (r.bool(params.nesterov, [...p, 'nesterov']) ?? false);
  const fused = params.fused === undefined || params.fused === null ? false : (r.bool(params.fused, [...p, 'fused']) ?? false);
  const foreach = params.foreach === undefined || params.foreach === null ? true : (r.bool(params.foreach, [...p, 'foreach']) ?? true);
  const wd = weightDecay(r, params);
  return {
    name: momentum > 0 ? 'sgd_momentum' : 'sgd',
    impl: fused ? 'fused' : foreach ? 'foreach' : 'for-loop',
    ...(wd !== undefined && wd > 0 ? { weightDecay: wd } : {}),
    ...(nesterov ? { nesterov } : {}),
  };
}

/** The `optimizer` section (rc:840-844: the type lower-cased when it is one of DeepSpeed's); absent, the client's optimizer. */
export function readOptimizer(r: Reader, config: Dict): OptimizerSpec | undefined {
  if (config.optimizer === undefined || config.optimizer === null) {
    r.source(['optimizer'], 'default', null, 'no optimizer section: the client’s optimizer (the Trainer’s create_optimizer); vram-ts’s default unless given');
    return undefined;
  }
  const section = r.section(config.optimizer, ['optimizer'], ['type', 'params'], { legacy_fusion: SCALAR('FP16 legacy fusion: the same tensors') }, false);
  const type = section.type;
  if (typeof type !== 'string') return r.issue('bad-option', ['optimizer', 'type'], 'must be an optimizer name', 'a string', type ?? 'missing');
  const params =
    section.params === undefined || section.params === null
      ? {}
      : isDict(section.params)
        ? section.params
        : (r.issue('bad-option', ['optimizer', 'params'], 'must be an object', 'object', section.params) ?? {});
  const lower = type.toLowerCase();
  let spec: OptimizerSpec | undefined;
  if (lower === 'adam' || lower === 'adamw') spec = adam(r, lower, params);
  else if (lower === 'lion') {
    r.section(params, ['optimizer', 'params'], [], LION_PARAMS, false);
    spec = { name: 'lion', impl: 'fused' }; // FusedLion (eng:2177-2178), DeepSpeedCPULion under offload
  } else if (type === 'SGD') spec = sgd(r, config, params);
  else if (UNMODELLED_OPTIMIZERS.includes(lower) || UNMODELLED_TORCH_OPTIMIZERS.includes(type))
    r.issue('not-modelled', ['optimizer', 'type'], `the ${type} optimizer is not modelled`, 'Adam | AdamW | Lion | SGD', type);
  else r.issue('bad-option', ['optimizer', 'type'], 'neither a DeepSpeed optimizer nor a torch.optim one (rc:1661)', 'Adam | AdamW | Lion | SGD', type);
  if (spec !== undefined) r.source(['optimizer', 'type'], 'config', spec);
  return spec;
}
