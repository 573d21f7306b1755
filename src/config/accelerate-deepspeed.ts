/*
 * `distributed_type: DEEPSPEED`: the DeepSpeed config accelerate 1.15.0 hands DeepSpeed, built as
 * DeepSpeedPlugin.__post_init__ builds it from `deepspeed_config` (or from the file it names),
 * with set_mixed_precision's sections and the "auto" values Accelerator._prepare_deepspeed fills,
 * then read by fromDeepSpeedConfig. Sources (accelerate 1.15.0): dc utils/dataclasses.py, ul
 * utils/launch.py, cl commands/launch.py, acc accelerator.py.
 */
import { VramError, type VramIssue } from '../errors.js';
import type { Path } from '../validate.js';
import { NEUTRAL_DEEPSPEED, REFUSED_WITH_FILE } from './accelerate-keys.js';
import type { AccelerateReader } from './accelerate-reader.js';
import { fromDeepSpeedConfig, type DeepSpeedReading } from './deepspeed.js';
import { isDict, type Dict } from './deepspeed-reader.js';

/** What `deepspeed_config` means: the DeepSpeed config read, and the batch it names when it does. */
export interface DeepSpeedPart {
  readonly reading: DeepSpeedReading;
  /** The per-process batch, when the DeepSpeed config file or the context says it. */
  readonly microBatchSize?: number;
  /** `deepspeed_config_file`, when one is named. */
  readonly file?: string;
}

const HANDLED = [
  'deepspeed_config_file',
  'zero_stage',
  'offload_optimizer_device',
  'offload_param_device',
  'gradient_accumulation_steps',
  'deepspeed_moe_layer_cls_names',
];

/** The "auto" values Accelerator._prepare_deepspeed fills (acc:2223-2235, :2296-2355), and DeepSpeedPlugin's own (dc:1280-1292). */
function fills(r: AccelerateReader, micro: number, accumulation: number, world: number): Readonly<Record<string, unknown>> {
  const h = r.context.hiddenSize;
  return {
    'zero_optimization.stage': 2, // dc:1238: ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2
    'zero_optimization.offload_optimizer.device': 'none',
    'zero_optimization.offload_param.device': 'none',
    'zero_optimization.offload_optimizer.nvme_path': 'none',
    'zero_optimization.offload_param.nvme_path': 'none',
    'zero_optimization.stage3_gather_16bit_weights_on_model_save': false,
    gradient_accumulation_steps: accumulation,
    gradient_clipping: 1.0,
    train_micro_batch_size_per_gpu: micro,
    train_batch_size: micro * accumulation * world,
    ...(h !== undefined
      ? {
          'zero_optimization.reduce_bucket_size': h * h,
          'zero_optimization.stage3_prefetch_bucket_size': Math.floor(0.9 * h * h),
          'zero_optimization.stage3_param_persistence_threshold': 10 * h,
        }
      : {}),
  };
}

/** `deepspeed_config_process(must_match=False)`: every "auto" at a filled key replaced (dc fill_match). */
function filled(config: Dict, values: Readonly<Record<string, unknown>>, prefix = ''): Dict {
  return Object.fromEntries(
    Object.entries(config).map(([key, value]) => {
      const long = prefix + key;
      if (isDict(value)) return [key, filled(value, values, `${long}.`)];
      return [key, value === 'auto' && Object.hasOwn(values, long) ? values[long] : value];
    }),
  );
}

/**
 * set_mixed_precision's first half (dc:1422-1427): the 16-bit section it adds to a config that has
 * none (the Trainer's path too, after the Trainer filled the "auto" values).
 */
export function withMixedSection(config: Dict, mixed: string): Dict {
  if (mixed === 'fp16' && config.fp16 === undefined) return { ...config, fp16: { enabled: true, auto_cast: true } };
  if ((mixed === 'bf16' || mixed === 'fp8') && config.bf16 === undefined) return { ...config, bf16: { enabled: true } };
  return config;
}

/** set_mixed_precision (dc:1415-1446): the 16-bit sections accelerate adds, and "auto" enabled flags filled. */
function withPrecision(config: Dict, mixed: string): Dict {
  const out: Record<string, unknown> = { ...withMixedSection(config, mixed) };
  for (const [key, on] of [
    ['fp16', mixed === 'fp16'],
    ['bf16', mixed === 'bf16' || mixed === 'fp8'],
  ] as const) {
    const section = out[key];
    if (section === undefined) out[key] = { enabled: false };
    else if (isDict(section) && section.enabled === 'auto') out[key] = { ...section, enabled: on };
  }
  return out;
}

/** Where an issue of the synthesized config belongs in the accelerate config. */
function synthesizedPath(path: readonly (string | number)[]): Path {
  const key = path.join('.');
  if (key === 'zero_optimization.stage') return ['deepspeed_config', 'zero_stage'];
  if (key.startsWith('zero_optimization.offload_optimizer')) return ['deepspeed_config', 'offload_optimizer_device'];
  if (key.startsWith('zero_optimization.offload_param')) return ['deepspeed_config', 'offload_param_device'];
  if (key.startsWith('fp16') || key.startsWith('bf16')) return ['mixed_precision'];
  if (key === 'gradient_accumulation_steps') return ['deepspeed_config', 'gradient_accumulation_steps'];
  if (key === 'train_batch_size' || key === 'train_micro_batch_size_per_gpu') return ['context', 'batchSize'];
  if (key === 'context.worldSize') return ['num_processes'];
  return ['deepspeed_config', ...path];
}

/** fromDeepSpeedConfig on the config accelerate builds, its issues moved to the keys that made them. */
function readBuilt(r: AccelerateReader, config: Dict, world: number, where: (path: readonly (string | number)[]) => Path): DeepSpeedReading | undefined {
  try {
    return fromDeepSpeedConfig(config, { worldSize: world });
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    const seen = new Set(r.issues.map((i) => `${i.code}:${i.path.join('.')}`));
    for (const issue of error.issues) {
      const autoCast = issue.path.join('.') === 'fp16.auto_cast';
      const moved: VramIssue = {
        ...issue,
        path: where(issue.path),
        // set_mixed_precision("fp16") writes fp16: {enabled: true, auto_cast: true} (dc:1422-1424).
        ...(autoCast ? { message: 'DeepSpeed fp16 through accelerate casts the inputs to fp16 (fp16.auto_cast: true, dc:1422-1424): not modelled' } : {}),
      };
      if (!seen.has(`${moved.code}:${moved.path.join('.')}`)) r.issues.push(moved);
    }
    return undefined;
  }
}

/** The config DeepSpeedPlugin builds from the accelerate keys alone (dc:1301-1323). */
function synthesized(r: AccelerateReader, section: Dict, mixed: string, world: number): DeepSpeedPart | undefined {
  const stage = section.zero_stage === undefined || section.zero_stage === null ? 2 : r.int(section.zero_stage, ['deepspeed_config', 'zero_stage'], 0);
  const gasGiven = section.gradient_accumulation_steps;
  const accumulation =
    gasGiven === undefined || gasGiven === null
      ? (r.context.gradientAccumulationSteps ?? 1)
      : r.int(gasGiven, ['deepspeed_config', 'gradient_accumulation_steps'], 1);
  if (stage === undefined || accumulation === undefined) return undefined;
  // ul:573-576: the devices lower-cased; DeepSpeedPlugin's default "none" (dc:1240-1243).
  const device = (key: string) => (section[key] === undefined || section[key] === null ? 'none' : String(section[key]).toLowerCase());
  const micro = r.context.batchSize ?? 1;
  const config = withPrecision(
    {
      train_batch_size: micro * accumulation * world,
      train_micro_batch_size_per_gpu: micro,
      gradient_accumulation_steps: accumulation,
      zero_optimization: {
        stage,
        offload_optimizer: { device: device('offload_optimizer_device') },
        offload_param: { device: device('offload_param_device') },
      },
    },
    mixed,
  );
  const reading = readBuilt(r, config, world, synthesizedPath);
  if (reading === undefined) return undefined;
  return { reading, ...(r.context.batchSize !== undefined ? { microBatchSize: r.context.batchSize } : {}) };
}

/** The DeepSpeed config file (context.deepspeedConfig) with accelerate's fills (dc:1272-1299). */
function fromFile(r: AccelerateReader, file: string, section: Dict, mixedGiven: boolean, mixed: string, world: number): DeepSpeedPart | undefined {
  for (const key of REFUSED_WITH_FILE)
    if (section[key] !== undefined)
      r.issue(
        'bad-option',
        ['deepspeed_config', key],
        'accelerate refuses it beside deepspeed_config_file: give it in the DeepSpeed config file (dc:1507-1532)',
        'absent',
        section[key],
      );
  if (mixedGiven)
    r.issue(
      'bad-option',
      ['mixed_precision'],
      'accelerate refuses mixed_precision beside deepspeed_config_file (cl:1287-1292, dc:1507-1532): set fp16/bf16 in the DeepSpeed config file',
      'absent',
      mixed,
    );
  if (REFUSED_WITH_FILE.some((key) => section[key] !== undefined) || mixedGiven) return undefined; // the plugin raises before it reads the file
  const given = r.context.deepspeedConfig;
  if (given === undefined)
    return r.issue(
      'missing-context',
      ['context', 'deepspeedConfig'],
      `read the DeepSpeed config file ${JSON.stringify(file)} (JSON) and give it as context.deepspeedConfig`,
      'the parsed DeepSpeed config',
      file,
    );
  const at = (path: readonly (string | number)[]): Path =>
    path.join('.') === 'context.worldSize' ? ['num_processes'] : ['context', 'deepspeedConfig', ...path];
  if (!isDict(given)) return undefined; // the context check reported it
  if (given.zero_optimization === undefined)
    return r.issue(
      'bad-option',
      at(['zero_optimization']),
      'accelerate needs the ZeRO optimization config in the DeepSpeed config (dc:1276-1277)',
      'a zero_optimization section',
      'missing',
    );
  // dc:1274-1275: gradient_accumulation_steps 1 when the file has none; "auto" is the Accelerator's (acc:2208-2222).
  const base = given.gradient_accumulation_steps === undefined ? { ...given, gradient_accumulation_steps: 1 } : given;
  const gas = base.gradient_accumulation_steps === 'auto' ? (r.context.gradientAccumulationSteps ?? 1) : base.gradient_accumulation_steps;
  // "auto" micro-batches are the data loader's batch (acc:2179-2205); 1 stands in when the context does not say it.
  const micro = base.train_micro_batch_size_per_gpu;
  const perProcess = typeof micro === 'number' ? micro : (r.context.batchSize ?? 1);
  const config = withPrecision(filled(base, fills(r, perProcess, typeof gas === 'number' ? gas : 1, world)), mixed);
  const reading = readBuilt(r, config, world, at);
  if (reading === undefined) return undefined;
  for (const note of reading.ignored) r.ignore(at(note.path), note.why);
  const size = micro === 'auto' ? r.context.batchSize : reading.microBatchSize;
  return { reading, file, ...(size !== undefined ? { microBatchSize: size } : {}) };
}

/**
 * `deepspeed_config` under `distributed_type: DEEPSPEED`, for `world` processes, mixed precision
 * `mixed` (`mixedGiven`: written in the accelerate config). Every DeepSpeed value vram-ts reads goes
 * through fromDeepSpeedConfig; its issues are placed at the accelerate key (or the file's key under
 * `context.deepspeedConfig`) that made them.
 */
export function readDeepSpeed(r: AccelerateReader, section: Dict, mixed: string, mixedGiven: boolean, world: number): DeepSpeedPart | undefined {
  r.keys(section, ['deepspeed_config'], HANDLED, NEUTRAL_DEEPSPEED);
  const moe = section.deepspeed_moe_layer_cls_names;
  if (moe !== undefined && moe !== null)
    r.issue(
      'not-modelled',
      ['deepspeed_config', 'deepspeed_moe_layer_cls_names'],
      'ZeRO-3 leaf modules (dc set_moe_leaf_modules: each fetched whole) are not modelled',
      'null',
      moe,
    );
  const file = section.deepspeed_config_file;
  if (file !== undefined && file !== null && file !== 'none') {
    if (typeof file !== 'string') return r.issue('bad-option', ['deepspeed_config', 'deepspeed_config_file'], 'must be a path', 'a path', file);
    return fromFile(r, file, section, mixedGiven, mixed, world);
  }
  if (r.context.deepspeedConfig !== undefined) unusedFile(r);
  return synthesized(r, section, mixed, world);
}

/** context.deepspeedConfig where the accelerate config names no file: a mistake, not a silent no-op. */
export function unusedFile(r: AccelerateReader): void {
  r.issue(
    'bad-option',
    ['context', 'deepspeedConfig'],
    'the accelerate config names no deepspeed_config_file (under distributed_type DEEPSPEED) for it to be',
    'absent',
    'a DeepSpeed config',
  );
}
