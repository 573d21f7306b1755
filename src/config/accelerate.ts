/**
 * An `accelerate config` YAML file (parsed) read as accelerate 1.15.0 reads it: ClusterConfig
 * (ca = accelerate/commands/config/config_args.py), `accelerate launch` (cl =
 * accelerate/commands/launch.py, ul = accelerate/utils/launch.py), the plugins (dc =
 * accelerate/utils/dataclasses.py) and the Accelerator (acc = accelerate/accelerator.py).
 */
import { ddpEngine } from '../parallel/engines/ddp.js';
import { fail, type VramIssue, VramError } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { OptimizerSpec } from '../memory/optimizers.js';
import type { ParallelPlan } from '../parallel/plan.js';
import { show, validate } from '../validate.js';
import { readDeepSpeed, unusedFile } from './accelerate-deepspeed.js';
import { readFsdp } from './accelerate-fsdp.js';
import { accelerateFsdp2Plan, unitsOfModel } from './accelerate-fsdp-units.js';
import { DYNAMO_SETTINGS, MODELLED_TYPES, NEUTRAL_TOP, PRECISIONS, UNMODELLED_TYPES } from './accelerate-keys.js';
import { AccelerateReader, contextCheck, type AccelerateContext, type AccelerateNote } from './accelerate-reader.js';
import type { DeepSpeedReading } from './deepspeed.js';
import { isDict, type Dict } from './deepspeed-reader.js';

export type { AccelerateContext, AccelerateNote } from './accelerate-reader.js';

/** The estimate options an accelerate config means (give `input`). */
export interface AccelerateOptions {
  /**
   * MULTI_GPU: `ddp`; DEEPSPEED: `deepspeed` (fromDeepSpeedConfig's plan); FSDP: `fsdp2` with
   * accelerate's units; NO: absent (one device).
   */
  readonly parallel?: ParallelPlan;
  /**
   * `mixed_precision`: `amp-bf16` (torch.autocast over the model's float32 parameters, acc:585-593)
   * under NO and MULTI_GPU; DeepSpeed's `bf16` / `fp16` (its sections, dc:1415-1446) under DEEPSPEED;
   * absent with `no`.
   */
  readonly precision?: 'amp-bf16' | 'bf16' | 'fp16';
  /** FSDP with `bf16`: the parameters' stored dtype (fsdp2_prepare_model upcasts the trainable ones, fu:813-825). */
  readonly dtype?: 'float32';
  /** `use_cpu` under NO (ACCELERATE_USE_CPU, ul:133). */
  readonly device?: 'cpu';
  /** DeepSpeed's `gradient_accumulation_steps`, or `context.gradientAccumulationSteps`. */
  readonly microBatches?: number;
  /** The DeepSpeed config file's `optimizer` section. */
  readonly optimizer?: OptimizerSpec;
}

/** An accelerate config read as accelerate reads it. */
export interface AccelerateReading {
  readonly options: AccelerateOptions;
  readonly distributedType: 'NO' | 'MULTI_GPU' | 'DEEPSPEED' | 'FSDP';
  /** `num_processes`: every process of the job (all machines), the data-parallel world. */
  readonly processes: number;
  readonly machines: number;
  /** The per-process batch where the DeepSpeed config (or `context.batchSize`) says it: the input's batch. */
  readonly microBatchSize?: number;
  /** `deepspeed_config.deepspeed_config_file`, when named: the file to read and give as `context.deepspeedConfig`. */
  readonly deepspeedConfigFile?: string;
  /** DEEPSPEED: the DeepSpeed config accelerate hands DeepSpeed, read by fromDeepSpeedConfig. */
  readonly deepspeed?: DeepSpeedReading;
  /**
   * Whether accelerate wraps the forward in autocast and `convert_outputs_to_fp32` (acc:1824-1835):
   * build a catalog decoder with `head: { kind: 'loss', autocast: true }` to count its float32
   * copy of the logits.
   */
  readonly autocastForward: boolean;
  /** Keys accepted that move no memory, with why. */
  readonly ignored: readonly AccelerateNote[];
  /** Where the reading takes accelerate's behaviour approximately, with what differs. */
  readonly approximations: readonly AccelerateNote[];
}

/** The types read. */
type Modelled = AccelerateReading['distributedType'];

/** The top-level keys read here (ClusterConfig, ca:178-217, and the old `fp16` / `dynamo_backend` process_config converts, ca:113-119). */
const HANDLED = [
  'compute_environment',
  'distributed_type',
  'num_processes',
  'num_machines',
  'mixed_precision',
  'use_cpu',
  'gpu_ids',
  'fsdp_config',
  'deepspeed_config',
  'dynamo_config',
  'parallelism_config',
  'megatron_lm_config',
  'fp8_config',
  'mpirun_config',
  'fp16',
  'dynamo_backend',
];

/** compute_environment (ca:107-108, default LOCAL_MACHINE) and distributed_type (required, ca:109-110). */
function readType(r: AccelerateReader, config: Dict): Modelled | undefined {
  const env = config.compute_environment ?? 'LOCAL_MACHINE';
  if (env === 'AMAZON_SAGEMAKER')
    r.issue('not-modelled', ['compute_environment'], 'SageMaker jobs (SageMakerConfig, sagemaker_launcher) are not modelled', 'LOCAL_MACHINE', env);
  else if (env !== 'LOCAL_MACHINE')
    r.issue('bad-option', ['compute_environment'], 'a ComputeEnvironment (dc:675-687)', 'LOCAL_MACHINE | AMAZON_SAGEMAKER', env);
  const type = config.distributed_type;
  if (type === undefined)
    return r.issue(
      'missing-option',
      ['distributed_type'],
      'A `distributed_type` must be specified in the config file (ca:109-110)',
      MODELLED_TYPES.join(' | '),
      'missing',
    );
  if (typeof type === 'string' && MODELLED_TYPES.includes(type)) return type as Modelled;
  if (typeof type === 'string' && Object.hasOwn(UNMODELLED_TYPES, type))
    return r.issue('not-modelled', ['distributed_type'], `${UNMODELLED_TYPES[type]} is not modelled`, MODELLED_TYPES.join(' | '), type);
  // A bare NO in YAML 1.1 is false: accelerate's own files quote it ("NO").
  return r.issue('bad-option', ['distributed_type'], 'a DistributedType (dc:602-638)', [...MODELLED_TYPES, ...Object.keys(UNMODELLED_TYPES)].join(' | '), type);
}

/** mixed_precision, lower-cased by the launcher (ul:278-282); absent or null is "no" (cl:1287-1289); the old `fp16: true` is fp16 (ca:113-116). */
function readMixed(r: AccelerateReader, config: Dict): { readonly mixed: string; readonly given: boolean } {
  if (config.fp16 !== undefined) r.ignore(['fp16'], 'the old key process_config converts to mixed_precision and drops (ca:113-116)');
  const value = config.mixed_precision ?? (config.mixed_precision === undefined && config.fp16 === true ? 'fp16' : null);
  if (value === null) return { mixed: 'no', given: false };
  const mixed = typeof value === 'string' ? value.toLowerCase() : undefined;
  if (mixed === undefined || !PRECISIONS.includes(mixed)) {
    r.issue('bad-option', ['mixed_precision'], 'Unknown mixed_precision mode (ul:279-282)', PRECISIONS.join(' | '), value);
    return { mixed: 'no', given: true };
  }
  if (mixed === 'fp8')
    r.issue('not-modelled', ['mixed_precision'], 'fp8 training (Transformer Engine, MS-AMP, torchao; fp8_config) is not modelled', 'no | bf16', value);
  return { mixed, given: true };
}

/** num_processes (ClusterConfig default -1: the launcher refuses it, cl:1305-1306; NO defaults to 1, ca:111-112), num_machines, gpu_ids. */
function readProcesses(r: AccelerateReader, config: Dict, type: Modelled | undefined): { readonly processes: number; readonly machines: number } {
  const machines = config.num_machines === undefined || config.num_machines === null ? 1 : (r.int(config.num_machines, ['num_machines'], 1) ?? 1);
  const given = config.num_processes;
  let processes = 1;
  if (given === undefined || given === null || given === -1) {
    if ((type !== 'NO' && type !== undefined) || given === -1)
      r.issue(
        'missing-option',
        ['num_processes'],
        'You need to manually pass in `--num_processes` using this config yaml (cl:1305-1306)',
        'integer ≥ 1',
        given ?? 'missing',
      );
  } else processes = r.int(given, ['num_processes'], 1) ?? 1;
  if (type === 'NO' && processes !== 1) {
    r.ignore(['num_processes'], 'distributed_type NO runs the simple launcher: one process (ul:100-197)');
    processes = 1;
  }
  const ids = config.gpu_ids;
  if (ids !== undefined && ids !== null) {
    if (typeof ids !== 'string')
      r.issue('bad-option', ['gpu_ids'], "a comma-separated list of ids or 'all' (cl:1258: split on commas)", "'all' | '0,1,…'", ids);
    else if (type === 'MULTI_GPU' && ids !== 'all' && ids.split(',').length < 2 && machines <= 1)
      r.issue(
        'bad-option',
        ['gpu_ids'],
        'Less than two GPU ids were configured and tried to run on multiple GPUs (cl:1258-1262)',
        "two ids or more, or 'all'",
        ids,
      );
    else r.ignore(['gpu_ids'], 'CUDA_VISIBLE_DEVICES (ul:260-277): which GPUs, not how much each holds');
  }
  if (config.num_machines !== undefined)
    r.ignore(['num_machines'], 'how the processes are spread over machines (ul:216-224): the data-parallel world is num_processes');
  return { processes, machines };
}

/** use_cpu: the simple launcher's ACCELERATE_USE_CPU (ul:133) under NO; the other launchers do not read it (cl:1393-1411 test `args.cpu`, the flag). */
function readCpu(r: AccelerateReader, config: Dict, type: Modelled | undefined): boolean {
  if (config.use_cpu === undefined || config.use_cpu === null) return false;
  const on = r.flag(config.use_cpu, ['use_cpu']) ?? false;
  if (on && type !== 'NO') r.ignore(['use_cpu'], `the ${type ?? ''} launcher does not read it (only \`accelerate launch --cpu\` moves off the GPU)`);
  else if (!on) r.ignore(['use_cpu'], 'false: the GPU');
  return on && type === 'NO';
}

/** dynamo_config (and the old top-level dynamo_backend, ca:117-119): a backend other than NO is torch.compile (ul:292-302). */
function readDynamo(r: AccelerateReader, config: Dict): void {
  const section = r.dict(config.dynamo_config, ['dynamo_config']);
  const rename = (key: string) => (key.startsWith('dynamo_') ? key : `dynamo_${key}`); // cl:1274-1275
  const neutral = Object.fromEntries(DYNAMO_SETTINGS.map((k) => [k, 'torch.compile’s settings, read only with a backend']));
  r.keys(section, ['dynamo_config'], ['dynamo_backend'], neutral, rename);
  const key = Object.keys(section).find((k) => rename(k) === 'dynamo_backend');
  const entries: [unknown, (string | number)[]][] = [
    [config.dynamo_backend, ['dynamo_backend']],
    [key === undefined ? undefined : section[key], ['dynamo_config', key ?? 'dynamo_backend']],
  ];
  for (const [value, path] of entries) {
    if (value === undefined || value === null) continue;
    if (typeof value === 'string' && value.toUpperCase() === 'NO') r.ignore(path, 'no torch.compile');
    else r.issue('not-modelled', path, 'torch.compile (TorchDynamo) is not modelled', 'NO', value);
  }
}

/** The sections of other integrations: read only under their own distributed type, or not modelled. */
function readOtherSections(r: AccelerateReader, config: Dict, type: Modelled | undefined, mixed: string): void {
  const nonEmpty = (key: string) => Object.keys(r.dict(config[key], [key])).length > 0;
  if (nonEmpty('parallelism_config'))
    r.issue(
      'not-modelled',
      ['parallelism_config'],
      'ParallelismConfig (tensor, context and replicated data-parallel meshes, cl:1248, ul prepare_extend_env_parallelism_config) is not read by vram-ts',
      '{}',
      'a parallelism config',
    );
  if (nonEmpty('megatron_lm_config')) r.ignore(['megatron_lm_config'], 'read only under distributed_type MEGATRON_LM (ul:335)');
  if (nonEmpty('fp8_config') && mixed !== 'fp8') r.ignore(['fp8_config'], 'read only with mixed_precision fp8 (ul:285-290)');
  const mpi = r.dict(config.mpirun_config, ['mpirun_config']);
  if (type === 'NO' && mpi.mpirun_hostfile !== undefined && mpi.mpirun_hostfile !== null)
    r.issue(
      'not-modelled',
      ['mpirun_config', 'mpirun_hostfile'],
      'several CPU processes under mpirun (ul:110-124) are not modelled',
      'absent',
      mpi.mpirun_hostfile,
    );
  else if (Object.keys(mpi).length > 0) r.ignore(['mpirun_config'], 'mpirun for CPU processes: read by the simple launcher only (ul:110-124)');
  for (const [key, owner] of [
    ['fsdp_config', 'FSDP'],
    ['deepspeed_config', 'DEEPSPEED'],
  ] as const)
    if (type !== owner && nonEmpty(key)) r.ignore([key], `read only under distributed_type ${owner} (cl:1390-1402)`);
}

/**
 * `distributed_type: FSDP`: FSDP2 over the processes with the units accelerate makes of
 * `context.model`. Under FSDP2 prepare() never wraps the forward in autocast (acc _prepare_fsdp2
 * skips prepare_model): `bf16` is the plugin's MixedPrecisionPolicy alone, measured.
 */
function fsdpOptions(r: AccelerateReader, config: Dict, mixed: string, processes: number) {
  const before = r.issues.length;
  const fsdp = readFsdp(r, r.dict(config.fsdp_config, ['fsdp_config']));
  const units = fsdp === undefined ? undefined : unitsOfModel(r.context.model, fsdp.layerClasses);
  if (units !== undefined && !Array.isArray(units)) r.issues.push(units as VramIssue);
  if (fsdp === undefined || !Array.isArray(units) || r.issues.length > before) return undefined;
  if (fsdp.offload)
    r.approximate(['fsdp_config', 'fsdp_offload_params'], "CPUOffloadPolicy: the fsdp2 engine's offload is read from torch's sources, not measured");
  if (mixed === 'bf16') r.approximate(['mixed_precision'], 'output_dtype casts the returned loss to bf16 (2 bytes), not counted');
  const accumulation = r.context.gradientAccumulationSteps ?? 1;
  const plan = accelerateFsdp2Plan({
    units,
    world: processes,
    reshardAfterForward: fsdp.reshardAfterForward,
    offload: fsdp.offload,
    bf16: mixed === 'bf16',
    accumulation,
  });
  return { options: { ...plan, ...(accumulation > 1 ? { microBatches: accumulation } : {}) }, autocast: false };
}

function engineOptions(r: AccelerateReader, config: Dict, type: Modelled, mixed: { mixed: string; given: boolean }, processes: number, cpu: boolean) {
  const accumulation = r.context.gradientAccumulationSteps;
  const steps = accumulation !== undefined && accumulation > 1 ? { microBatches: accumulation } : {};
  // acc:565-593: native AMP (autocast) for fp16 and bf16 except under DeepSpeed; fp16 on the CPU has none.
  if (mixed.mixed === 'fp16' && type !== 'DEEPSPEED' && !cpu)
    r.issue('not-modelled', ['mixed_precision'], 'fp16 mixed precision (autocast and GradScaler, acc:565-584) is not modelled', 'no | bf16', 'fp16');
  if (mixed.mixed === 'fp16' && cpu) r.ignore(['mixed_precision'], 'fp16 on the CPU: the Accelerator enables no autocast (acc:565-567)');
  const amp = mixed.mixed === 'bf16' ? { precision: 'amp-bf16' as const } : {};
  if (mixed.mixed === 'bf16' && (type === 'NO' || type === 'MULTI_GPU'))
    r.approximate(
      ['mixed_precision'],
      'autocast over float32 parameters (amp-bf16): accelerate casts no parameters, so this is the model loaded in float32; one loaded in bf16 runs autocast over bf16 parameters',
    );
  if (type === 'NO') return { options: { ...amp, ...(cpu ? { device: 'cpu' as const } : {}), ...steps }, autocast: mixed.mixed === 'bf16' };
  if (type === 'MULTI_GPU') return { options: { parallel: { engine: ddpEngine.name, dp: processes }, ...amp, ...steps }, autocast: mixed.mixed === 'bf16' };
  if (type === 'FSDP') return fsdpOptions(r, config, mixed.mixed, processes);
  const ds = readDeepSpeed(r, r.dict(config.deepspeed_config, ['deepspeed_config']), mixed.mixed, mixed.given, processes);
  if (ds === undefined) return undefined;
  // DeepSpeed casts the model itself: no autocast (acc:565-593 exclude it, state.py:959-960).
  return { options: ds.reading.options, autocast: false, ds };
}

/**
 * The estimate options an `accelerate config` YAML file means, read as accelerate 1.15.0 reads it
 * (ClusterConfig, `accelerate launch`, the FSDP and DeepSpeed plugins, the Accelerator), given as
 * the parsed mapping (vram-ts parses no YAML). `distributed_type` picks the engine: `NO` (one
 * device; `use_cpu`: the CPU), `MULTI_GPU` (`ddp` over `num_processes` ranks) and `DEEPSPEED`
 * (the DeepSpeed config accelerate builds from `deepspeed_config`, or the file it names given as
 * `context.deepspeedConfig`, read by fromDeepSpeedConfig) and `FSDP` (FSDP2 `fsdp2` with the units
 * accelerate's fsdp2_prepare_model makes of `context.model`: each decoder layer, the untied input
 * embedding alone, the final norm with lm_head — and a tied embedding — as one unit never
 * resharded after forward; FSDP1 and the keys vram-ts cannot honour each refused at its path).
 * `mixed_precision` `bf16` is autocast (`amp-bf16`, over float32 parameters: the model as loaded in
 * float32) under NO and MULTI_GPU, DeepSpeed's bf16 under DEEPSPEED, FSDP2's MixedPrecisionPolicy
 * over float32 parameters under FSDP.
 *
 * Keys that move no memory are listed in `ignored` with why; values that move memory in ways vram-ts
 * does not model (FSDP1, fp8, fp16's GradScaler, torch.compile, other devices, …) are VramError
 * `not-modelled` at their path; keys accelerate does not know are `unknown-option` with the nearest
 * name. Where the reading is approximate (autocast over a model loaded in float32) `approximations` says how.
 * Every issue is reported at once.
 *
 * @example
 * ```ts
 * import { estimate, fromAccelerateConfig, llm } from 'vram-ts';
 * const reading = fromAccelerateConfig({
 *   compute_environment: 'LOCAL_MACHINE',
 *   distributed_type: 'DEEPSPEED',
 *   deepspeed_config: { zero_stage: 2, offload_optimizer_device: 'none', gradient_accumulation_steps: 2 },
 *   mixed_precision: 'bf16',
 *   num_processes: 4,
 *   rdzv_backend: 'static',
 * });
 * console.log(reading.options.parallel?.engine, reading.options.parallel?.zero, reading.options.precision); // deepspeed 2 bf16
 * console.log(reading.ignored.map((i) => i.path.join('.'))); // [ 'rdzv_backend' ]
 * const r = estimate(llm('qwen2.5-0.5b'), { ...reading.options, input: [1, 64], timeline: false });
 * console.log(r.bytes.peak > 0); // true
 * ```
 */
export function fromAccelerateConfig(config: unknown, context: AccelerateContext = {}): AccelerateReading {
  validate(context, contextCheck(), ['context']);
  if (!isDict(config))
    fail('bad-option', 'an accelerate config is a mapping (the YAML file, parsed)', { path: [], expected: 'mapping', received: show(config) });
  const r = new AccelerateReader(context);
  r.keys(config, [], HANDLED, NEUTRAL_TOP);
  const type = readType(r, config);
  const mixed = readMixed(r, config);
  const { processes, machines } = readProcesses(r, config, type);
  const cpu = readCpu(r, config, type);
  readDynamo(r, config);
  readOtherSections(r, config, type, mixed.mixed);
  if (type !== undefined && type !== 'DEEPSPEED' && context.deepspeedConfig !== undefined) unusedFile(r);
  const engine = type === undefined ? undefined : engineOptions(r, config, type, mixed, processes, cpu);
  if (r.issues.length > 0 || type === undefined || engine === undefined) throw new VramError(r.issues);
  const ds = 'ds' in engine ? engine.ds : undefined;
  return deepFreeze({
    options: engine.options as AccelerateOptions,
    distributedType: type,
    processes,
    machines,
    ...(ds?.microBatchSize !== undefined ? { microBatchSize: ds.microBatchSize } : {}),
    ...(ds?.file !== undefined ? { deepspeedConfigFile: ds.file } : {}),
    ...(ds !== undefined ? { deepspeed: ds.reading } : {}),
    autocastForward: engine.autocast,
    ignored: r.ignored,
    approximations: r.approximations,
  });
}
