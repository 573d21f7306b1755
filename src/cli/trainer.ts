/**
 * What grpo and sft share: the trainer's config from --config and the field flags (the flags
 * over the file), PEFT's LoraConfig from --peft-config and the --lora-* flags, the library's
 * errors named by where the value came from (the flag, or the file and its key), and the
 * phase table or JSON of the step.
 */
import {
  formatBytes,
  fromTrlConfig,
  LLMS,
  usableMemory,
  VramError,
  type ModuleLayer,
  type ResolvedTrainerArgs,
  type TrainerOptions,
  type TrainerStepEstimate,
  type TrlScriptConfig,
  type VramIssue,
} from '../index.js';
import { gpuBudget } from './args.js';
import { CAPACITY_NOTE, sumLines, type SumRow } from './verdict.js';
import { readConfigFile } from './config-file.js';
import { CliError, fromVramError, usage } from './errors.js';
import { FIELD_FLAGS, specOf, type Values } from './flags.js';
import { kebab, readField } from './fields.js';
import { buildModel, type ModelRef } from './model.js';
import { choice, count } from './values.js';
import type { Outcome } from './commands/command.js';

/** A trainer's arguments as the command line gave them, and where each field came from (for errors). */
export interface TrainerInput {
  readonly config: Readonly<Record<string, unknown>>;
  readonly options: TrainerOptions;
  /** `config` and `peft_config` fields → the flag or `file: key` that set them. */
  readonly origins: ReadonlyMap<string, string>;
  /** The command's flags with --config's ModelConfig under them (dtype, attention): what the model is built from. */
  readonly values: Values;
  /** --config's reading as TRL's script reads it, and the file. */
  readonly script?: { readonly file: string; readonly reading: TrlScriptConfig };
}

/** A file's mapping, each key's origin recorded as `file: key` under `prefix`. */
function fromFile(file: string | undefined, prefix: string, origins: Map<string, string>): Record<string, unknown> {
  if (file === undefined) return {};
  const mapping = readConfigFile(file);
  for (const key of Object.keys(mapping)) origins.set(`${prefix}.${key}`, `${file}: ${key}`);
  return { ...mapping };
}

/** --config read as TRL's TrlParser splits it (fromTrlConfig); its errors name `file: key`. */
function scriptOf(values: Values, command: 'grpo' | 'sft'): TrainerInput['script'] {
  const file = values.config;
  if (file === undefined) return undefined;
  const mapping = readConfigFile(file);
  const trl = choice(values, 'trl');
  try {
    return { file, reading: fromTrlConfig(command, mapping, trl !== undefined ? { trl } : {}) };
  } catch (error) {
    if (error instanceof VramError) throw fromVramError(error, file);
    throw error;
  }
}

/** --config's trainer fields with the command's field flags over them. */
function configOf(values: Values, command: 'grpo' | 'sft', script: TrainerInput['script'], origins: Map<string, string>): Record<string, unknown> {
  const config: Record<string, unknown> = { ...script?.reading.config };
  for (const key of Object.keys(config)) origins.set(`config.${key}`, `${script!.file}: ${key}`);
  for (const [flag, spec] of Object.entries(FIELD_FLAGS)) {
    const text = values[flag];
    if (typeof text !== 'string' || !spec.scope.includes(command)) continue;
    config[spec.field] = readField(spec, text);
    origins.set(`config.${spec.field}`, `--${flag}`);
  }
  return config;
}

/** The LoraConfig --config's use_peft builds, --peft-config's fields and the --lora-* flags over it; undefined when none gives one. */
function peftOf(values: Values, script: TrainerInput['script'], origins: Map<string, string>): Record<string, unknown> | undefined {
  const fromScript = script?.reading.peft ?? {};
  for (const key of Object.keys(fromScript)) origins.set(`peft_config.${key}`, `${script!.file}: ${script!.reading.keys[`peft_config.${key}`] ?? key}`);
  const peft = { ...fromScript, ...fromFile(values['peft-config'], 'peft_config', origins) };
  const set = (field: string, flag: string, value: unknown) => {
    peft[field] = value;
    origins.set(`peft_config.${field}`, flag);
  };
  if (values['lora-r'] !== undefined) set('r', '--lora-r', count(values, 'lora-r', 8));
  if (values['lora-alpha'] !== undefined) set('lora_alpha', '--lora-alpha', specOf('lora-alpha').read!(values['lora-alpha']));
  if (values['lora-dropout'] !== undefined) set('lora_dropout', '--lora-dropout', specOf('lora-dropout').read!(values['lora-dropout']));
  const targets = values['lora-target-modules'];
  if (targets !== undefined) set('target_modules', '--lora-target-modules', targets === 'all-linear' ? targets : targets.split(',').map((t) => t.trim()));
  return values['peft-config'] === undefined && script?.reading.peft === undefined && Object.keys(peft).length === 0 ? undefined : peft;
}

/** The flags with --config's ModelConfig dtype and attention under them (a flag given wins). */
function modelValues(values: Values, script: TrainerInput['script']): Values {
  const r = script?.reading;
  // trainerStep, sftStep and grpoStep weigh the model's parameters in float32 (the Trainer's bf16 is autocast
  // over them): a model loaded in 16 bits is not modelled, so asking for one is an error, never ignored.
  const dtype = values.dtype ?? r?.dtype;
  if (dtype !== undefined && dtype !== 'float32')
    usage(
      values.dtype !== undefined ? '--dtype' : `${script!.file}: ${r!.keys.dtype}`,
      'the trainers are estimated on a model loaded in float32 (the Trainer’s bf16 is autocast over it): a 16-bit model is not modelled',
      { expected: 'float32', received: String(dtype) },
    );
  return {
    ...(r?.dtype !== undefined && values.dtype === undefined ? { dtype: r.dtype } : {}),
    ...(r?.attention !== undefined && values.attention === undefined ? { attention: r.attention } : {}),
    ...values,
  } as Values;
}

/** The trainer's config, options (release, device, PEFT) and the origins of its fields, from the command line. */
export function trainerInput(values: Values, command: 'grpo' | 'sft'): TrainerInput {
  const origins = new Map<string, string>();
  const script = scriptOf(values, command);
  const config = configOf(values, command, script, origins);
  const peft = peftOf(values, script, origins);
  const trl = choice(values, 'trl');
  const device = choice(values, 'device');
  const options: TrainerOptions = {
    ...(trl !== undefined ? { trl } : {}),
    ...(device !== undefined ? { device } : {}),
    ...(peft !== undefined ? { peft } : {}),
  };
  return { config, options, origins, values: modelValues(values, script), ...(script !== undefined ? { script } : {}) };
}

/**
 * Whether the file's model_name_or_path can be the command's <model>: the same Hub id, or the
 * catalog model of that repository; a config.json path is the user's stand-in and is not compared.
 */
function sameModel(ref: ModelRef, name: string): boolean {
  const n = name.toLowerCase();
  if (ref.repo !== undefined) return ref.repo.toLowerCase() === n;
  if (ref.file !== undefined) return true;
  const entry = LLMS.find((e) => e.id === ref.name.toLowerCase() || e.repo.toLowerCase() === ref.name.toLowerCase());
  return ref.name.toLowerCase() === n || (entry !== undefined && (entry.repo.toLowerCase() === n || entry.id === n));
}

/** --config's model_name_or_path and model_revision against the command's <model> and --revision: another model is refused. */
export function checkScriptModel(ref: ModelRef, input: TrainerInput): void {
  const s = input.script;
  if (s === undefined) return;
  const { model, revision } = s.reading;
  if (model !== undefined && !sameModel(ref, model))
    usage(`${s.file}: model_name_or_path`, `names another model than <model> (vram-ts estimates <model>: give the same one)`, {
      expected: JSON.stringify(ref.repo ?? ref.name),
      received: JSON.stringify(model),
    });
  const asked = input.values.revision ?? 'main';
  if (revision !== undefined && ref.repo !== undefined && revision !== asked)
    usage(`${s.file}: model_revision`, 'is not the revision <model> is read at: give it as --revision', {
      expected: JSON.stringify(asked),
      received: JSON.stringify(revision),
    });
}

/** The path a library issue names, in the command's words: the flag or `file: key` that gave the value. */
function issuePath(issue: VramIssue, origins: ReadonlyMap<string, string>): string {
  const [head, field] = issue.path;
  const key = issue.path.join('.');
  const origin = origins.get(key);
  if (origin !== undefined) return origin;
  // The GPU's total comes from --gpu.
  if (head === 'options' && field === 'gpuTotalBytes') return '--gpu';
  if (head === 'options' && typeof field === 'string') return `--${field}`;
  if (head === 'trl') return '--trl';
  if (head === 'config' && typeof field === 'string' && FIELD_FLAGS[kebab(field)] !== undefined) return `--${kebab(field)}`;
  return key;
}

/** Runs the library's step; its VramError becomes one line naming the flag or the file's key. */
export function withOrigins<T>(input: TrainerInput, step: () => T): T {
  try {
    return step();
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    const issue = error.issues[0]!;
    throw new CliError(issuePath(issue, input.origins), issue.message, { expected: issue.expected, received: issue.received, more: error.issues.length - 1 });
  }
}

/** The model of a trainer command: a causal LM built as the other model commands build it (with --config's dtype and attention). */
export function trainerModel(ref: ModelRef, input: TrainerInput): ModuleLayer {
  checkScriptModel(ref, input);
  const model = buildModel(ref, input.values);
  if (model.kind !== 'module') usage('model', `${ref.name} is not a causal LM`);
  return model as ModuleLayer;
}

/** The field values the resolved arguments hold (the defaults help shows): a modelled field's resolved value. */
export const RESOLVED: Readonly<Record<string, (r: ResolvedTrainerArgs) => unknown>> = {
  per_device_train_batch_size: (r) => r.batch,
  gradient_accumulation_steps: (r) => r.accumulation,
  gradient_checkpointing: (r) => r.checkpointing,
  bf16: (r) => r.bf16,
  optim: (r) => r.optim,
  max_grad_norm: (r) => r.maxGradNorm,
  loss_type: (r) => r.grpo?.lossType ?? r.sftLoss,
  max_length: (r) => r.maxLength,
  num_generations: (r) => r.grpo?.numGenerations,
  max_completion_length: (r) => r.grpo?.maxCompletionLength,
  beta: (r) => r.grpo?.beta,
  temperature: (r) => r.grpo?.temperature,
  num_iterations: (r) => r.grpo?.numIterations,
  steps_per_generation: (r) => r.grpo?.stepsPerGeneration,
  generation_batch_size: (r) => r.grpo?.generationBatchSize,
};

const cell = (bytes: number) => formatBytes(bytes).padStart(11);

/** The phase table: each phase's live bytes as it begins and at its peak, and what it holds. */
function phaseTable(e: TrainerStepEstimate): string {
  const rows = e.phases.map((p) => `  ${p.name.padEnd(10)} ${cell(p.start)} ${cell(p.peak)}  ${p.detail}\n`);
  return `  ${'phase'.padEnd(10)} ${'start'.padStart(11)} ${'peak'.padStart(11)}  what runs and is resident\n${rows.join('')}`;
}

/** What stays allocated through the step, in one line. */
function residentLine(e: TrainerStepEstimate): string {
  const r = e.resident;
  const parts = Object.entries(r).map(([name, bytes]) => `${name} ${formatBytes(bytes)}`);
  return `Resident: ${parts.join(', ')}\n`;
}

/**
 * The trainer's fit verdict: the capacity PyTorch reports for --gpu, less the CUDA context and the
 * cuBLAS workspaces (usableMemory), against the step's allocated peak. The phases come from
 * several estimates and added tensors, with no one allocation log to replay through the caching
 * allocator: reserved can pass this peak by the allocator's fragmentation, and the lines say so.
 */
function trainerVerdict(gpu: string, device: 'cuda' | 'cpu', e: TrainerStepEstimate) {
  gpuBudget(gpu);
  const u = usableMemory({ gpu, ...(device === 'cpu' ? { device: 'cpu' } : {}) });
  const runtime = u.capacity - u.usable;
  const needed = e.peak + runtime;
  return {
    gpu,
    fits: needed <= u.capacity,
    capacity: u.capacity,
    capacityFrom: u.capacityFrom,
    runtime: u.runtime,
    usable: u.usable,
    allocated: e.peak,
    needed,
    headroom: u.capacity - needed,
  };
}

function verdictText(v: ReturnType<typeof trainerVerdict>, device: 'cuda' | 'cpu'): string {
  const rows: SumRow[] = [
    ['capacity', v.capacity, CAPACITY_NOTE[v.capacityFrom]],
    ...v.runtime.map((line): SumRow => [`- ${line.label}`, line.bytes, line.source]),
    ['= usable', v.usable, ''],
    [
      '- allocated peak',
      v.allocated,
      device === 'cpu' ? 'cpu: no caching allocator' : 'the phases are not replayed through the caching allocator: reserved can be higher by its fragmentation',
    ],
    ['= headroom', v.headroom, ''],
  ];
  return `${v.fits ? 'Fits' : 'Does not fit'} ${v.gpu} (${formatBytes(v.capacity)}): needs ${formatBytes(v.needed)}, ${v.fits ? 'leaves' : 'short by'} ${formatBytes(Math.abs(v.headroom))}.\n${sumLines(rows)}\n`;
}

/**
 * The command's output: the table (title, phases, the peak and its phase, bytes between steps,
 * `notes`, the fit verdict) or the estimate as JSON (with `fit` when --gpu is given); exit 1
 * with --check when it does not fit.
 */
export function trainerOutcome(values: Values, format: 'table' | 'json', title: string, e: TrainerStepEstimate, notes: readonly string[]): Outcome {
  const device = choice(values, 'device') === 'cpu' ? 'cpu' : 'cuda';
  const verdict = values.gpu !== undefined ? trainerVerdict(values.gpu, device, e) : undefined;
  const code = values.check && verdict !== undefined && !verdict.fits ? 1 : 0;
  if (format === 'json') {
    const fit = verdict !== undefined ? { fit: { ...verdict, budget: verdict.capacity } } : {};
    return { stdout: `${JSON.stringify({ ...e, ...fit }, null, 2)}\n`, code };
  }
  let text = `${title}\n${phaseTable(e)}  ${'peak'.padEnd(10)} ${' '.repeat(11)} ${cell(e.peak)}  in ${e.peakPhase}\n`;
  text += `Between steps: ${formatBytes(e.between)}\n${notes.map((n) => `${n}\n`).join('')}${residentLine(e)}`;
  if (verdict !== undefined) text += verdictText(verdict, device);
  return { stdout: text, code };
}
