/**
 * transformers' `TrainingArguments` read as the tool reads a file of them: `HfArgumentParser`'s
 * `parse_json_file` / `parse_yaml_file` / `parse_dict` (every key a field, hf_argparser.py), then
 * `__post_init__` (transformers 5.18.0 training_args.py, `ta:`; the release src/trainers/fields.ts
 * records). A whole dump (`TrainingArguments(...).to_json_string()` / `to_dict()`) and a short
 * mapping of a few fields are read alike: the values `__post_init__` writes for a default are that
 * default (src/trainers/post-init.ts). The fields are checked and resolved by resolveTrainerArgs;
 * `deepspeed` is read by fromDeepSpeedConfig with the Trainer's context filled from these arguments.
 */
import type { fsdp2Engine } from '../parallel/engines/fsdp2.js';
import type { ParallelPlan } from '../parallel/plan.js';
import type { Layer } from '../nn/types.js';
import { fail, type VramIssue, VramError } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { OptimizerSpec } from '../memory/optimizers.js';
import { DEFAULT_TRL, resolveTrainerArgs, type ResolvedTrainerArgs, trainerFields, type TrainerArgs } from '../trainers/args.js';
import { copyData, jsonData, plain, sameValue } from '../trainers/field-checks.js';
import { parseDictStrings, TRAINER_DEEPSPEED_FIELD as DS, undoPostInit } from '../trainers/post-init.js';
import { optimizerOf } from '../trainers/step.js';
import { anything, type Check, integer, object, show, string, validate, type Path } from '../validate.js';
import { withMixedSection } from './accelerate-deepspeed.js';
import { layerCheck } from './accelerate-reader.js';
import { readTrainerFsdp, type TrainerFsdp } from './training-args-fsdp.js';
import { accelerateFsdp2Plan } from './accelerate-fsdp-units.js';
import { fromDeepSpeedConfig, type DeepSpeedOptions, type DeepSpeedReading, type DeepSpeedTrainerContext } from './deepspeed.js';

/** What a TrainingArguments file alone does not say. */
export interface TrainingArgumentsContext {
  /** The DeepSpeed config that the arguments' `deepspeed` path names, read by the caller (ds_config.json, parsed). */
  readonly deepspeed?: unknown;
  /** The data-parallel world size (the launcher's `WORLD_SIZE`): DeepSpeed's world, and its `"auto"` train_batch_size. */
  readonly worldSize?: number;
  /** The model's `hidden_size` (fills DeepSpeed's `"auto"` ZeRO buckets, as the Trainer does). */
  readonly hiddenSize?: number;
  /** The decoder's layers (`num_hidden_layers`): under DeepSpeed, gradient_checkpointing checkpoints each `model.layers.i`. */
  readonly layers?: number;
  /** TRL release whose TrainingArguments fields and defaults to follow (default {@link DEFAULT_TRL}). */
  readonly trl?: string;
  /** The model (a catalog decoder): under `fsdp`, accelerate makes its FSDP2 units of the model's modules. */
  readonly model?: Layer;
}

/** The estimate options a step under DeepSpeed or FSDP takes from the arguments (give `input`: `[batch, sequence]`). */
export interface TrainingArgumentsOptions {
  readonly mode: 'train';
  /** DeepSpeed's plan, or FSDP2's with accelerate's units (`fsdp`). */
  readonly parallel: DeepSpeedOptions['parallel'] | (ParallelPlan & { readonly engine: typeof fsdp2Engine.name });
  /** `gradient_accumulation_steps`. */
  readonly microBatches: number;
  /** DeepSpeed's 16-bit parameters (`bf16.enabled` / `fp16.enabled`); absent, the model's dtype. */
  readonly precision?: 'bf16' | 'fp16';
  /** FSDP with `bf16`: parameters stored in float32 (accelerate upcasts the trainable ones), computed in bf16. */
  readonly dtype?: 'float32';
  /** The config's `optimizer` section, or else the Trainer's own (`optim`), which the Trainer hands to DeepSpeed. */
  readonly optimizer: OptimizerSpec;
  /** `gradient_checkpointing`: every decoder layer one non-reentrant checkpoint (gradient_checkpointing_enable). */
  readonly checkpoint?: { readonly modules: readonly string[] };
}

/** TrainingArguments read. */
export interface TrainingArgumentsReading {
  /**
   * The fields that differ from TrainingArguments' defaults, the values `__post_init__` writes for a
   * default read as that default, `deepspeed` aside: what resolveTrainerArgs('trainer', …) and
   * trainerStep take.
   */
  readonly args: TrainerArgs;
  /** `resolveTrainerArgs('trainer', args)`. */
  readonly resolved: ResolvedTrainerArgs;
  /** `deepspeed` as a path, not read here: read the file and pass it as `context.deepspeed`. */
  readonly deepspeedPath?: string;
  /** `deepspeed` read (fromDeepSpeedConfig, the Trainer's context filled from these arguments). */
  readonly deepspeed?: DeepSpeedReading;
  /** With `deepspeed` read, or `fsdp`: the options of one rank's step. */
  readonly options?: TrainingArgumentsOptions;
}

/** The context's schema, built when read (a module-level schema would stay in every bundle). */
const contextCheck = (): Check =>
  object({ fields: { deepspeed: anything, worldSize: integer(1), hiddenSize: integer(1), layers: integer(1), trl: string, model: layerCheck } });

/** resolveTrainerArgs names the fields under `args`; a file's fields are named from its root. */
function rerooted(issues: readonly VramIssue[]): VramIssue[] {
  return issues.map((i) => (i.path[0] === 'args' ? { ...i, path: i.path.slice(1) } : i));
}

/** The fields that are not at their defaults (unknown ones kept, for resolveTrainerArgs to name). */
function nonDefault(fields: Readonly<Record<string, unknown>>, defaults: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(fields))
    if (name !== DS && (!Object.hasOwn(defaults, name) || !sameValue(value, defaults[name])))
      Object.defineProperty(out, name, { value: copyData(value), enumerable: true, writable: true, configurable: true });
  return out;
}

/**
 * accelerate's DeepSpeedPlugin.set_mixed_precision (accelerate 1.15 utils/dataclasses.py:1422-1427,
 * called by AcceleratorState, state.py:977): with bf16 (or fp16) mixed precision and no such section,
 * the config gains the one it writes.
 */
function withMixedPrecision(config: unknown, resolved: ResolvedTrainerArgs): unknown {
  return plain(config) ? withMixedSection(config, resolved.fp16 ? 'fp16' : resolved.bf16 ? 'bf16' : 'no') : config;
}

/** An issue of the config withMixedPrecision added to: the `fp16.auto_cast` it wrote belongs to the arguments' `fp16`. */
function addedByPrecision(issue: VramIssue, config: unknown): VramIssue | undefined {
  if (issue.path.join('.') !== 'fp16.auto_cast' || (plain(config) && Object.hasOwn(config, 'fp16'))) return undefined;
  return {
    ...issue,
    path: ['fp16'],
    message:
      'fp16 with a DeepSpeed config that has no fp16 section: accelerate\'s set_mixed_precision adds one that casts the inputs to fp16 (auto_cast: true, dataclasses.py:1422-1424), which is not modelled; give the config an fp16 section (enabled: "auto")',
  };
}

/** The DeepSpeed context the Trainer fills its "auto" values from (hf integrations/deepspeed.py trainer_config_process). */
function trainerContext(fields: Readonly<Record<string, unknown>>, resolved: ResolvedTrainerArgs, worldSize: number | undefined): DeepSpeedTrainerContext {
  const decay = fields.weight_decay;
  return {
    perDeviceTrainBatchSize: resolved.batch,
    gradientAccumulationSteps: resolved.accumulation,
    bf16: resolved.bf16,
    fp16: resolved.fp16,
    ...(worldSize !== undefined ? { worldSize } : {}),
    ...(typeof decay === 'number' && Number.isFinite(decay) && decay >= 0 ? { weightDecay: decay } : {}),
  };
}

/** fromDeepSpeedConfig's issues named from the arguments' root: the config's keys under `deepspeed` (or `context.deepspeed`). */
function readDeepSpeed(config: unknown, at: Path, fields: Readonly<Record<string, unknown>>, resolved: ResolvedTrainerArgs, context: TrainingArgumentsContext) {
  try {
    return fromDeepSpeedConfig(withMixedPrecision(config, resolved), {
      trainer: trainerContext(fields, resolved, context.worldSize),
      ...(context.hiddenSize !== undefined ? { hiddenSize: context.hiddenSize } : {}),
    });
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    throw new VramError(error.issues.map((i) => addedByPrecision(i, config) ?? (i.path[0] === 'context' ? i : { ...i, path: [...at, ...i.path] })));
  }
}

/** Whether the arguments' `deepspeed` names a config (a path or the config itself). */
const namesDeepSpeed = (fields: Readonly<Record<string, unknown>>): boolean =>
  fields.deepspeed !== null && fields.deepspeed !== undefined && fields.deepspeed !== '';

/** The arguments' `deepspeed`: none, a path (read only when the caller gives the file in the context), or a config. */
function deepspeedOf(fields: Readonly<Record<string, unknown>>, context: TrainingArgumentsContext): { path?: string; config?: unknown; at: Path } {
  const value = fields.deepspeed;
  const given = context.deepspeed !== undefined;
  if (!namesDeepSpeed(fields)) {
    if (given) fail('bad-option', 'context.deepspeed is the file the arguments’ deepspeed path names, and they name none', { path: ['context', DS] });
    return { at: [DS] };
  }
  if (typeof value === 'string') return given ? { path: value, config: context.deepspeed, at: ['context', DS] } : { path: value, at: [DS] };
  if (given) fail('bad-option', 'the arguments hold their DeepSpeed config already: context.deepspeed is for a deepspeed path', { path: ['context', DS] });
  if (!plain(value))
    fail('bad-option', 'deepspeed is a path to ds_config.json or the config itself', {
      path: [DS],
      expected: 'string | object',
      received: show(value),
    });
  return { config: value, at: [DS] };
}

/**
 * The Trainer runs `gradient_accumulation_steps` micro-batches a step; HF fills only a DeepSpeed
 * `"auto"` from it and checks only a value written (trainer_config_process's fill_match), so a config
 * that leaves it out lets DeepSpeed decide its own (1, or its batch arithmetic): refused, not guessed.
 * (The micro-batch cannot differ so: written, it is checked; absent, DeepSpeed derives it from a
 * train_batch_size that is checked.)
 */
function accumulationIssues(ds: DeepSpeedReading, resolved: ResolvedTrainerArgs, at: Path): VramIssue[] {
  const theirs = ds.options.microBatches;
  const ours = resolved.accumulation;
  if (theirs === ours) return [];
  return [
    {
      path: [...at, 'gradient_accumulation_steps'],
      code: 'not-modelled',
      message: `DeepSpeed's gradient_accumulation_steps (${theirs}, absent or derived) is not the Trainer's (${ours}): write "auto" or ${ours}`,
      expected: String(ours),
      received: String(theirs),
    },
  ];
}

/**
 * What a rank's step needs beyond the arguments: under DeepSpeed the decoder's layers for
 * gradient_checkpointing, under FSDP the world it shards over; Liger's fused loss is a head
 * trainerStep adds, which a rank's estimate does not (not modelled rather than dropped).
 */
function stepIssues(resolved: ResolvedTrainerArgs, context: TrainingArgumentsContext, engine: 'DeepSpeed' | 'FSDP'): VramIssue[] {
  const issues: VramIssue[] = [];
  const missing = (field: string, message: string) =>
    issues.push({ path: ['context', field], code: 'missing-context', message, expected: 'integer ≥ 1', received: 'missing' });
  if (engine === 'DeepSpeed' && resolved.checkpointing && context.layers === undefined)
    missing('layers', "gradient_checkpointing under DeepSpeed checkpoints every decoder layer: give the model's num_hidden_layers");
  if (engine === 'FSDP' && context.worldSize === undefined) missing('worldSize', 'FSDP shards over the world: give the number of processes');
  if (resolved.liger)
    issues.push({
      path: ['use_liger_kernel'],
      code: 'not-modelled',
      message: `Liger's fused linear cross-entropy under ${engine} is not modelled (trainerStep models it on one GPU)`,
      expected: 'false',
      received: 'true',
    });
  return issues;
}

/**
 * The options of a rank's step under the Trainer's FSDP2 (measured: tools/oracle/trainer_fsdp2_cpu.py):
 * accelerate's plan (accelerateFsdp2Plan) with the Trainer's accumulation and optimizer. The
 * Trainer's own tensors (the batch's labels, the loss scalars: 792 B in the measured cases) are not counted.
 */
function fsdpOptions(fsdp: TrainerFsdp, resolved: ResolvedTrainerArgs, world: number): TrainingArgumentsOptions {
  const { reshardAfterForward, offload, units } = fsdp;
  return {
    mode: 'train',
    ...accelerateFsdp2Plan({ units, world, reshardAfterForward, offload, bf16: resolved.bf16, accumulation: resolved.accumulation }),
    microBatches: resolved.accumulation,
    optimizer: optimizerOf(resolved.optim, 'cuda'),
  };
}

/** The options of a rank's step under DeepSpeed. */
function deepspeedOptions(ds: DeepSpeedReading, resolved: ResolvedTrainerArgs, layers: number | undefined): TrainingArgumentsOptions {
  const o = ds.options;
  return {
    mode: 'train',
    parallel: o.parallel,
    microBatches: o.microBatches,
    ...(o.precision !== undefined ? { precision: o.precision } : {}),
    optimizer: o.optimizer ?? optimizerOf(resolved.optim, 'cuda'),
    ...(resolved.checkpointing && layers !== undefined ? { checkpoint: { modules: Array.from({ length: layers }, (_, i) => `model.layers.${i}`) } } : {}),
  };
}

/**
 * Reads a transformers `TrainingArguments` mapping — the tool's own dump (`to_json_string()` /
 * `to_dict()`: every field, post-init values included) or a short JSON/YAML mapping of a few fields —
 * as the Trainer reads it at the release vram-ts follows: every field checked (an unknown one is an
 * error with did-you-mean; one that moves memory in a way vram-ts does not model, such as `fp16`
 * or `optim: 'adafactor'`, a `not-modelled` error at its path), the values `__post_init__`
 * writes for a default read as that default, and the rest resolved by resolveTrainerArgs. Note that
 * `bf16: true` is the Trainer's autocast over the model's dtype: it does not cast an fp32 model.
 * `deepspeed` given as a config is read with fromDeepSpeedConfig, its `"auto"` values filled from
 * these arguments as the Trainer fills them (`context.worldSize` and `context.hiddenSize` for the rest);
 * given as a path it is returned as `deepspeedPath`, to read and pass back as `context.deepspeed`.
 * Under DeepSpeed, gradient_checkpointing needs `context.layers` (each decoder layer is checkpointed)
 * and use_liger_kernel is not modelled. `fsdp` (with `fsdp_config`) is one rank of FSDP2 over
 * `context.worldSize` processes, its units the ones accelerate makes of `context.model`
 * (readTrainerFsdp: FSDP1, activation or gradient checkpointing inside the units and the other wrap
 * policies are errors at their fields).
 * Every issue of the fields is reported at once; paths are the file's keys.
 *
 * @example
 * ```ts
 * import { fromTrainingArguments, llm, trainerStep } from 'vram-ts';
 * const reading = fromTrainingArguments({ output_dir: 'out', per_device_train_batch_size: 2, gradient_checkpointing: true, report_to: [] });
 * console.log(Object.keys(reading.args).join(' ')); // output_dir per_device_train_batch_size gradient_checkpointing
 * const step = trainerStep(llm('qwen2.5-0.5b'), reading.args, { sequence: 64 });
 * console.log(step.peak > 0, reading.resolved.checkpointing); // true true
 * const ds = fromTrainingArguments(
 *   { per_device_train_batch_size: 2, bf16: true, deepspeed: { zero_optimization: { stage: 2 }, train_micro_batch_size_per_gpu: 'auto' } },
 *   { worldSize: 4 },
 * );
 * console.log(ds.options?.parallel.zero, ds.options?.parallel.dp, ds.options?.precision); // 2 4 bf16
 * ```
 */
export function fromTrainingArguments(args: unknown, context: TrainingArgumentsContext = {}): TrainingArgumentsReading {
  validate(context, contextCheck(), ['context']);
  if (!plain(args))
    fail('bad-option', 'TrainingArguments as a mapping of its fields (a parsed JSON or YAML file)', { path: [], expected: 'object', received: show(args) });
  const trl = context.trl ?? DEFAULT_TRL;
  const defaults = trainerFields('trainer', trl).defaults;
  const issues: VramIssue[] = [];
  for (const [name, value] of Object.entries(args)) jsonData(value, [name], issues, 'a TrainingArguments file');
  if (issues.length > 0) throw new VramError(issues);
  const fields = undoPostInit(args);
  parseDictStrings(fields, issues);
  const fsdp = readTrainerFsdp(fields, context.model, issues);
  if (fsdp !== undefined && namesDeepSpeed(fields))
    issues.push({
      path: ['fsdp'],
      code: 'bad-option',
      message: 'fsdp and deepspeed together: the Trainer runs one of them',
      expected: 'one of fsdp, deepspeed',
      received: 'both',
    });
  delete fields.fsdp;
  delete fields.fsdp_config;
  const minimal = nonDefault(fields, defaults);
  let resolved: ResolvedTrainerArgs | undefined;
  try {
    resolved = resolveTrainerArgs('trainer', minimal, { trl, deepspeed: namesDeepSpeed(fields) });
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    issues.push(...rerooted(error.issues));
  }
  if (issues.length > 0 || resolved === undefined) throw new VramError(issues);
  const ds = deepspeedOf(fields, context);
  const reading = ds.config === undefined ? undefined : readDeepSpeed(ds.config, ds.at, fields, resolved, context);
  const mismatched =
    reading === undefined
      ? fsdp === undefined
        ? []
        : stepIssues(resolved, context, 'FSDP')
      : [...accumulationIssues(reading, resolved, ds.at), ...stepIssues(resolved, context, 'DeepSpeed')];
  if (mismatched.length > 0) throw new VramError(mismatched);
  return deepFreeze({
    args: minimal,
    resolved,
    ...(ds.path !== undefined ? { deepspeedPath: ds.path } : {}),
    ...(reading !== undefined ? { deepspeed: reading, options: deepspeedOptions(reading, resolved, context.layers) } : {}),
    ...(fsdp !== undefined ? { options: fsdpOptions(fsdp, resolved, context.worldSize!) } : {}),
  });
}
