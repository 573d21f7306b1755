/**
 * The `vram-ts` command: a thin shell over the library, for people and for scripts.
 *
 * Exit codes: 0 done (with --check: it fits); 1 does not fit (only with --check); 2 usage or
 * input error, with exactly one line on stderr and nothing on stdout. stdout holds exactly the
 * asked format (json always parses), written only once everything, --svg included, succeeded.
 * An error nobody expected prints `vram-ts: internal error: …` and exits 2 (VRAM_TS_DEBUG
 * rethrows it instead, for the stack).
 */
import { existsSync, readFileSync, statSync, writeFileSync, type Stats } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  VramError,
  VISION_MODELS,
  vision,
  activeParams,
  wholeParams,
  type ModelMeta,
  breakdownSvg,
  decoderMeta,
  estimate,
  estimateRanks,
  gpusOf,
  plan,
  estimateToJSON,
  explain,
  fits,
  formatBreakdown,
  formatBreakdownMarkdown,
  formatBytes,
  formatCount,
  formatExplain,
  fromHFConfig,
  GPUS,
  grpoStep,
  korthikanti,
  kvCache,
  llm,
  LLMS,
  maxFitting,
  memoryBudget,
  mobilenetV3Large,
  mobilenetV3Small,
  summary,
  sym,
  timelineSvg,
  transformersRules,
  type Dim,
  type EstimateOptions,
  type FitResult,
  type HFConfigOptions,
  type HubModel,
  type Layer,
  type RankFigures,
  type Layout,
  type PlanResult,
} from '../index.js';
import { imageSize, listOf, nearest, oneOf, wholeNumber } from './args.js';
import { CliError, errorLine, fromVramError, fsReason, internalErrorLine, oneLine, usage } from './errors.js';
import { ATTENTIONS, CHARTS, CNNS, DEFAULTS, DEVICES, DTYPES, ENGINES, OFFLOADS, SCHEDULES, COMPAT_HELP, FIT_HELP, FORMATS, PLAN_FORMATS, PLAN_HELP, FRAMEWORKS, GRPO_FORMATS, GRPO_HELP, HELP, KORTHIKANTI_HELP, OPTIMIZERS, PRECISIONS, SOLVES } from './help.js';
import { COMPATS, compatText, type Compat } from './compat.js';
import { readSafetensors } from './safetensors.js';
import { hubLookup, type HubEnv } from './hub.js';

export { HELP } from './help.js';

/** The command's modes: an estimate of one model, or a subcommand. */
export type Command = 'estimate' | 'fit' | 'plan' | 'compat' | 'grpo' | 'korthikanti' | 'safetensors';

const OPTIONS = {
  input: { type: 'string' },
  batch: { type: 'string' },
  seq: { type: 'string' },
  classes: { type: 'string' },
  train: { type: 'boolean' },
  infer: { type: 'boolean' },
  optimizer: { type: 'string' },
  precision: { type: 'string' },
  checkpointing: { type: 'boolean' },
  'lora-rank': { type: 'string' },
  qlora: { type: 'boolean' },
  attention: { type: 'string' },
  device: { type: 'string' },
  framework: { type: 'string' },
  transformers: { type: 'string' },
  dtype: { type: 'string' },
  'no-cache': { type: 'boolean' },
  revision: { type: 'string' },
  gpu: { type: 'string' },
  check: { type: 'boolean' },
  format: { type: 'string' },
  svg: { type: 'string' },
  chart: { type: 'string' },
  solve: { type: 'string' },
  safetensors: { type: 'string' },
  group: { type: 'string' },
  prompt: { type: 'string' },
  completion: { type: 'string' },
  prompts: { type: 'string' },
  'micro-batch': { type: 'string' },
  hidden: { type: 'string' },
  heads: { type: 'string' },
  gpus: { type: 'string' },
  engine: { type: 'string' },
  fsdp: { type: 'boolean' },
  rank: { type: 'string' },
  'all-ranks': { type: 'boolean' },
  'global-batch': { type: 'string' },
  zero: { type: 'string' },
  pp: { type: 'string' },
  stage: { type: 'string' },
  schedule: { type: 'string' },
  'virtual-stages': { type: 'string' },
  'no-return-outputs': { type: 'boolean' },
  'distributed-optimizer': { type: 'boolean' },
  'micro-batches': { type: 'string' },
  offload: { type: 'string' },
  nodes: { type: 'string' },
  tp: { type: 'string' },
  cp: { type: 'string' },
  ep: { type: 'string' },
  sp: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export type Flag = keyof typeof OPTIONS;
type Values = { [F in Flag]?: (typeof OPTIONS)[F]['type'] extends 'string' ? string : boolean };

const MODEL_COMMANDS = ['estimate', 'fit', 'plan', 'grpo'] as const;
const ALL: readonly Command[] = ['estimate', 'fit', 'plan', 'compat', 'grpo', 'korthikanti', 'safetensors'];

/** Which commands take each flag; any other use is an error. */
export const SCOPE: Readonly<Record<Flag, readonly Command[]>> = {
  input: ['estimate', 'fit', 'plan'],
  batch: ['estimate', 'fit', 'compat', 'korthikanti'],
  seq: ['estimate', 'fit', 'plan', 'compat', 'korthikanti'],
  classes: ['estimate', 'fit', 'plan'],
  train: ['estimate', 'fit'],
  infer: ['estimate', 'fit'],
  optimizer: MODEL_COMMANDS,
  precision: MODEL_COMMANDS,
  checkpointing: MODEL_COMMANDS,
  'lora-rank': MODEL_COMMANDS,
  qlora: MODEL_COMMANDS,
  attention: [...MODEL_COMMANDS, 'compat'],
  device: MODEL_COMMANDS,
  framework: MODEL_COMMANDS,
  transformers: [...MODEL_COMMANDS, 'compat'],
  dtype: MODEL_COMMANDS,
  'no-cache': MODEL_COMMANDS,
  revision: MODEL_COMMANDS,
  gpu: MODEL_COMMANDS,
  check: MODEL_COMMANDS,
  format: ['estimate', 'plan', 'grpo'],
  svg: ['estimate'],
  chart: ['estimate'],
  solve: ['fit'],
  safetensors: ['safetensors'],
  group: ['grpo'],
  prompt: ['grpo'],
  completion: ['grpo'],
  prompts: ['grpo'],
  'micro-batch': ['grpo'],
  hidden: ['korthikanti'],
  heads: ['korthikanti'],
  gpus: ['estimate', 'fit', 'plan', 'compat'],
  engine: ['estimate', 'fit', 'plan'],
  fsdp: ['estimate', 'fit'],
  rank: ['estimate', 'fit'],
  'all-ranks': ['estimate'],
  'global-batch': ['plan'],
  zero: ['estimate', 'fit', 'plan'],
  pp: ['estimate', 'fit', 'plan', 'compat'],
  stage: ['estimate', 'fit'],
  schedule: ['estimate', 'fit'],
  'virtual-stages': ['estimate', 'fit'],
  'no-return-outputs': ['estimate', 'fit'],
  'distributed-optimizer': ['estimate', 'fit'],
  'micro-batches': ['estimate', 'fit'],
  offload: ['estimate', 'fit'],
  nodes: ['compat'],
  tp: ['estimate', 'fit', 'plan', 'compat'],
  cp: ['estimate', 'fit', 'plan'],
  ep: ['estimate', 'fit'],
  sp: ['estimate', 'fit'],

  help: ALL,
};

const COMMAND_NAMES: Readonly<Record<Command, string>> = {
  estimate: 'an estimate',
  fit: 'fit',
  plan: 'plan',
  compat: 'compat',
  grpo: 'grpo',
  korthikanti: 'korthikanti',
  safetensors: 'vram-ts --safetensors FILE',
};

/** Why a flag does not apply to a command, where the scope alone does not say it. */
const WHY: Partial<Record<`${Command} ${Flag}`, string>> = {
  'fit format': 'fit prints one number',
  'fit svg': 'it charts the step of one estimate',
  'grpo svg': 'it charts the step of one estimate',
  'plan batch': 'a plan splits --global-batch over ranks and micro-batches',
  'plan svg': 'it charts the step of one estimate',
  'plan fsdp': 'a plan tries every engine (--engine keeps one)',
  'plan rank': 'a plan weighs every rank',
  'grpo batch': 'a GRPO step is sized by --prompts, --group and --micro-batch',
  'grpo seq': 'a GRPO step is --prompt plus --completion tokens long',
  'grpo input': 'grpo needs an LLM',
  'grpo classes': 'grpo needs an LLM',
  'grpo train': 'a GRPO step always generates, scores and trains',
  'grpo infer': 'a GRPO step always generates, scores and trains',
  'korthikanti check': 'it compares two counts of one layer and fits nothing',
  'korthikanti gpu': 'it compares two counts of one layer and fits nothing',
};

/** Largest accepted value of each numeric flag (the smallest is 1). */
const LIMITS = {
  batch: 1_000_000_000,
  seq: 1_000_000_000,
  classes: 1_000_000_000,
  'lora-rank': 1_000_000,
  group: 1_000_000,
  prompt: 1_000_000_000,
  completion: 1_000_000_000,
  prompts: 1_000_000,
  'micro-batch': 1_000_000_000,
  hidden: 1_000_000,
  heads: 1_000_000,
  gpus: 1_000_000,
  'global-batch': 1_000_000_000,
  nodes: 1_000_000,
  tp: 1_000_000,
  cp: 1_000_000,
  ep: 1_000_000,
  pp: 1_000_000,
  'virtual-stages': 1_000_000,
  'micro-batches': 1_000_000,
} as const;

const LLM_ONLY = ['seq', 'attention', 'transformers', 'dtype', 'no-cache', 'lora-rank', 'qlora'] as const;
const CNN_ONLY = ['input', 'classes'] as const;
/** Formats with no room for a fit verdict: there --gpu only makes sense with --check. */
const NO_VERDICT_FORMATS = ['torchsummary', 'torchinfo', 'explain', 'svg'];

function count(values: Values, flag: keyof typeof LIMITS, fallback: number): number {
  const value = values[flag];
  return value === undefined ? fallback : wholeNumber(value, `--${flag}`, 1, LIMITS[flag]);
}

interface ModelRef {
  readonly name: string;
  readonly kind: 'cnn' | 'llm';
  readonly cnn?: (typeof CNNS)[number];
  /** A torchvision model of the vision catalog. */
  readonly vision?: string;
  readonly file?: string;
  /** A Hugging Face Hub repository id, and what fromHub read of it once loaded. */
  readonly repo?: string;
  readonly hub?: HubModel;
}

const MODEL_NAMES = [...CNNS, ...VISION_MODELS.filter((v) => !(CNNS as readonly string[]).includes(v)), ...LLMS.map((e) => e.id)];

function resolveModel(name: string): ModelRef {
  const key = name.toLowerCase().replace(/-/g, '_');
  const cnn = CNNS.find((c) => c === key);
  if (cnn !== undefined) return { name, kind: 'cnn', cnn };
  const torchvision = VISION_MODELS.find((v) => v === key);
  if (torchvision !== undefined) return { name, kind: 'cnn', vision: torchvision };
  // <org>/<name> that is not a file here is a Hub repository (a catalog repo too: its config on the Hub).
  if (HUB_REPO.test(name) && !name.endsWith('.json') && !existsSync(name)) return { name, kind: 'llm', repo: name };
  if (LLMS.some((e) => e.id === name.toLowerCase() || e.repo.toLowerCase() === name.toLowerCase())) return { name, kind: 'llm' };
  if (name.endsWith('.json') || name.includes('/')) return { name, kind: 'llm', file: name };
  const near = nearest(name, MODEL_NAMES);
  return usage('model', `unknown model${near !== undefined ? `; did you mean ${near}?` : ''}`, { expected: `${MODEL_NAMES.join(', ')} or the path of a config.json`, received: JSON.stringify(name) });
}

function readConfig(file: string): Record<string, unknown> {
  let stat: Stats;
  try {
    stat = statSync(file);
  } catch (error) {
    return usage(file, `cannot read (${fsReason(error)})`);
  }
  if (stat.isDirectory()) usage(file, 'is a directory, not a config.json');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    return usage(file, `cannot read (${fsReason(error)})`);
  }
  let config: unknown;
  try {
    // Editors on Windows save UTF-8 with a byte-order mark; JSON.parse does not skip it.
    config = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
  } catch (error) {
    return usage(file, 'is not valid JSON', { received: error instanceof Error ? error.message : undefined });
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    usage(file, 'a config.json holds one JSON object', { received: Array.isArray(config) ? 'an array' : config === null ? 'null' : `a ${typeof config}` });
  }
  return config as Record<string, unknown>;
}

function buildModel(ref: ModelRef, values: Values, extra: Pick<HFConfigOptions, 'tensorParallel' | 'contextParallel' | 'attention' | 'expertParallel'> = {}): Layer {
  if (ref.cnn !== undefined) {
    const numClasses = count(values, 'classes', DEFAULTS.classes);
    return ref.cnn === 'mobilenet_v3_small' ? mobilenetV3Small({ numClasses }) : mobilenetV3Large({ numClasses });
  }
  if (ref.vision !== undefined) return vision(ref.vision, { numClasses: count(values, 'classes', DEFAULTS.classes) });
  const decoder: HFConfigOptions = {
    ...(values.attention !== undefined ? { attention: oneOf(values.attention, '--attention', ATTENTIONS) } : {}),
    ...(values.transformers !== undefined ? { transformers: values.transformers } : {}),
    ...(values.dtype !== undefined ? { dtype: oneOf(values.dtype, '--dtype', DTYPES) } : {}),
    ...(values['no-cache'] ? { useCache: false } : {}),
    ...extra,
  };
  if (ref.hub !== undefined) return hubModel(ref.hub, decoder);
  if (ref.file === undefined) return llm(ref.name, decoder);
  const config = readConfig(ref.file);
  try {
    return fromHFConfig(config, decoder);
  } catch (error) {
    // The config's own problems are named by their keys, as in the file.
    if (error instanceof VramError) throw fromVramError(error);
    throw error;
  }
}

/** Gradient checkpointing as transformers applies it: every decoder layer is one region. */
function decoderLayers(model: Layer): { modules: string[] } {
  const meta = decoderMeta(model);
  return { modules: Array.from({ length: meta.layers }, (_, i) => (meta.family === 'gpt2' ? `transformer.h.${i}` : `model.layers.${i}`)) };
}

function estimateOptions(values: Values, ref: ModelRef, model: Layer, solve?: (typeof SOLVES)[number]): EstimateOptions {
  const batch: Dim = solve === 'batch' ? sym('B') : count(values, 'batch', DEFAULTS.batch);
  let input: Dim[];
  if (ref.kind === 'llm') {
    // Context parallelism with load balancing cuts the sequence into 2 · cp equal pieces.
    const cp = values.cp === undefined ? 1 : count(values, 'cp', 1);
    input = [batch, solve === 'seq' ? sym('S', cp > 1 ? { multipleOf: 2 * cp } : {}) : count(values, 'seq', DEFAULTS.seq)];
  } else {
    const [c, h, w] = imageSize(values.input ?? DEFAULTS.input);
    const side = sym('R');
    input = solve === 'resolution' ? [batch, c, side, side] : [batch, c, h, w];
  }
  const rank = values['lora-rank'] === undefined ? undefined : count(values, 'lora-rank', 1);
  const gpus = values.gpus === undefined ? 1 : count(values, 'gpus', 1);
  const zero = zeroStage(values);
  const explicitEngine = values.fsdp === true || zero !== undefined || values.engine !== undefined;
  const engine = values.fsdp ? 'fsdp2' : zero !== undefined ? 'deepspeed' : values.engine === undefined ? 'fsdp2' : oneOf(values.engine, '--engine', ENGINES);
  const pp = values.pp === undefined ? 1 : count(values, 'pp', 1);
  const tp = values.tp === undefined ? 1 : count(values, 'tp', 1);
  const cp = values.cp === undefined ? 1 : count(values, 'cp', 1);
  const ep = values.ep === undefined ? 1 : count(values, 'ep', 1);
  const split = pp * tp * cp * ep;
  if (gpus % split !== 0) usage('--gpus', `must be a multiple of --tp × --pp × --cp × --ep (${split}): the rest are data-parallel ranks`, { received: String(gpus) });
  const dp = gpus / split;
  // Context-parallel ranks share the data-parallel engine's group (dp · cp ranks).
  const rankOf = values.rank === undefined ? 0 : wholeNumber(values.rank, '--rank', 0, dp * cp - 1);
  const pipeline =
    pp > 1
      ? {
          pp,
          ...(values.stage !== undefined ? { stage: wholeNumber(values.stage, '--stage', 0, pp - 1) } : {}),
          ...(values.schedule !== undefined ? { schedule: oneOf(values.schedule, '--schedule', SCHEDULES) } : {}),
          ...(values['virtual-stages'] !== undefined ? { virtualStages: count(values, 'virtual-stages', 1) } : {}),
          ...(values['no-return-outputs'] ? { keepOutputs: false } : {}),
        }
      : {};
  const offload = values.offload === undefined ? {} : { offload: offloadOf(values.offload) };
  if (values['distributed-optimizer'] && engine !== 'megatron') usage('--distributed-optimizer', "is Megatron's: give --engine megatron");
  const megatronOptions = values['distributed-optimizer'] ? { megatron: { distributedOptimizer: true } } : {};
  // One GPU is one GPU whatever the engine; a pipeline stage on one rank per stage has no data-parallel engine unless asked for.
  const parallel = gpus > 1 ? { parallel: { ...(dp * cp > 1 || explicitEngine ? { engine } : {}), dp, rank: rankOf, ...(zero !== undefined ? { zero } : {}), ...(tp > 1 ? { tp } : {}), ...(cp > 1 ? { cp } : {}), ...(ep > 1 ? { ep } : {}), ...pipeline, ...offload, ...megatronOptions } } : {};
  return {
    input,
    mode: values.infer ? 'inference' : 'train',
    ...(values.precision !== undefined ? { precision: oneOf(values.precision, '--precision', PRECISIONS) } : {}),
    ...(values.optimizer !== undefined ? { optimizer: oneOf(values.optimizer, '--optimizer', OPTIMIZERS) } : {}),
    ...(values.device !== undefined ? { device: oneOf(values.device, '--device', DEVICES) } : {}),
    ...(values.framework !== undefined ? { framework: oneOf(values.framework, '--framework', FRAMEWORKS) } : {}),
    ...(values.checkpointing ? { checkpoint: ref.kind === 'llm' ? decoderLayers(model) : cnnCheckpoint(ref, model) } : {}),
    ...(rank !== undefined ? { lora: { rank, quantizeBase: Boolean(values.qlora) } } : {}),
    ...(values['micro-batches'] !== undefined ? { microBatches: count(values, 'micro-batches', 1) } : {}),
    ...parallel,
  };
}

/** --checkpointing of a CNN: every block of its `features` (MobileNet, EfficientNet), or of ResNet's stages. */
function cnnCheckpoint(ref: ModelRef, model: Layer): { readonly within: string; readonly every: number } | { readonly modules: readonly string[] } {
  const children = model.kind === 'seq' ? model.children.map((child, i) => child.name ?? String(i)) : model.kind === 'module' && model.body.kind === 'seq' ? model.body.children.map((child, i) => child.name ?? String(i)) : [];
  if (ref.cnn !== undefined || children.includes('features')) return { within: 'features', every: 1 };
  const stages = children.filter((name) => /^layer\d+$/.test(name));
  if (stages.length > 0) return { modules: stages };
  return usage('--checkpointing', `no block structure known for ${ref.name}: checkpoint it through the API (estimate's checkpoint option)`);
}

/**
 * --tp N (--sp): the decoder built as one tensor-parallel rank (PyTorch DTensor's plan); --cp N:
 * one context-parallel rank (ring attention needs sdpa: the default attention then).
 */
function tensorParallelOf(values: Values): Pick<HFConfigOptions, 'tensorParallel' | 'contextParallel' | 'attention' | 'expertParallel'> {
  const size = values.tp === undefined ? 1 : count(values, 'tp', 1);
  const cp = values.cp === undefined ? 1 : count(values, 'cp', 1);
  const ep = values.ep === undefined ? 1 : count(values, 'ep', 1);
  const context = { ...(cp > 1 ? { contextParallel: { size: cp }, ...(values.attention === undefined ? { attention: 'sdpa' as const } : {}) } : {}), ...(ep > 1 ? { expertParallel: { size: ep } } : {}) };
  if (size === 1) {
    if (values.sp) usage('--sp', 'sequence parallelism shards across tensor-parallel ranks: give --tp N (N > 1)');
    return context;
  }
  return { tensorParallel: { size, ...(values.sp ? { sequenceParallel: true } : {}) }, ...context };
}

/** --offload: what DeepSpeed (or FSDP2's CPUOffloadPolicy, with all) keeps in host memory. */
function offloadOf(value: string): { optimizer?: boolean; parameters?: boolean } {
  const which = oneOf(value, '--offload', OFFLOADS);
  return which === 'optimizer' ? { optimizer: true } : which === 'parameters' ? { parameters: true } : { optimizer: true, parameters: true };
}

/** --zero: DeepSpeed's stage, which only the deepspeed engine takes. */
function zeroStage(values: Values): 1 | 2 | 3 | undefined {
  if (values.zero === undefined) return undefined;
  const stage = wholeNumber(values.zero, '--zero', 1, 3) as 1 | 2 | 3;
  if (values.engine !== undefined && values.engine !== 'deepspeed') usage('--zero', `is a DeepSpeed ZeRO stage: not with --engine ${values.engine}`);
  return stage;
}

/** The --gpu budget, refusing unknown names with the list of known ones. */
function gpuBudget(value: string): number {
  let budget: number;
  try {
    budget = memoryBudget(value);
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    return usage('--gpu', 'unknown GPU', { expected: `a size like 24GB or one of ${GPUS.map((g) => g.name).join(', ')}`, received: JSON.stringify(value) });
  }
  if (!Number.isSafeInteger(budget) || budget < 1) usage('--gpu', 'a memory size must be at least 1 byte', { received: JSON.stringify(value) });
  return budget;
}

function commandOf(positionals: readonly string[], values: Values): Command {
  const first = positionals[0];
  if (first === 'fit' || first === 'plan' || first === 'compat' || first === 'grpo' || first === 'korthikanti') return first;
  return values.safetensors !== undefined ? 'safetensors' : 'estimate';
}

/** Refuses flags the command does not take, extra or missing arguments, and flags that contradict each other. */
function checkUsage(command: Command, values: Values, positionals: readonly string[]): void {
  for (const flag of Object.keys(values) as Flag[]) {
    if (values[flag] === undefined || SCOPE[flag].includes(command)) continue;
    const why = WHY[`${command} ${flag}`];
    const where = listAnd(SCOPE[flag].map((c) => COMMAND_NAMES[c]));
    if (command === 'safetensors') usage(`--${flag}`, '--safetensors FILE takes no other option');
    if (flag === 'safetensors') usage('--safetensors', `works on its own (vram-ts --safetensors FILE), not with ${COMMAND_NAMES[command]}`);
    usage(`--${flag}`, `applies to ${where} only, not to ${COMMAND_NAMES[command]}${why !== undefined ? `: ${why}` : ''}`);
  }
  const commands = ['fit', 'plan', 'compat', 'grpo', 'korthikanti'];
  const args = command === 'estimate' || command === 'safetensors' ? positionals : positionals.slice(command === 'compat' ? 2 : 1);
  const wanted = command === 'korthikanti' || command === 'safetensors' ? 0 : 1;
  if (command === 'compat') {
    const which = positionals[1];
    if (which === undefined) usage('compat', 'which closed form?', { expected: COMPATS.join(', ') });
    oneOf(which, 'compat', COMPATS);
  }
  if (args.length > wanted) {
    const near = command === 'estimate' ? nearest(args[0]!, commands) : undefined;
    if (near !== undefined) usage(args[0]!, `unknown command; did you mean ${near}?`, { expected: commands.join(', ') });
    if (wanted === 0) usage(args[0]!, `unexpected argument: ${COMMAND_NAMES[command]} takes no <model>`);
    usage(args[1]!, 'unexpected argument', { expected: 'one <model>' });
  }
  if (args.length < wanted) usage('model', 'no model given', { expected: `${MODEL_NAMES.join(', ')} or the path of a config.json` });
  if (values.train && values.infer) usage('--train, --infer', 'pick one: a training step (--train, the default) or an inference forward (--infer)');
  if (values.infer && values.optimizer !== undefined) usage('--optimizer', 'applies to training; --infer runs no optimizer');
  if (values.infer && values.checkpointing) usage('--checkpointing', 'applies to training; --infer keeps nothing for backward');
  if (values.infer && (values.gpus !== undefined || values.engine !== undefined || values.fsdp || values.rank !== undefined || values.zero !== undefined)) usage(values.gpus !== undefined ? '--gpus' : values.fsdp ? '--fsdp' : values.engine !== undefined ? '--engine' : values.zero !== undefined ? '--zero' : '--rank', 'data-parallel ranks are estimated for training; --infer is one GPU');
  if (values.fsdp && values.engine !== undefined && values.engine !== 'fsdp2') usage('--fsdp', `not with --engine ${values.engine}: --fsdp is --engine fsdp2`);
  if (values.fsdp && values.zero !== undefined) usage('--zero', 'is a DeepSpeed ZeRO stage: not with --fsdp');
  if (values.engine === 'deepspeed' && values.zero === undefined && command !== 'plan') usage('--engine', 'deepspeed needs the ZeRO stage', { expected: '--zero 1, 2 or 3' });
  if (values.zero !== undefined && command !== 'plan' && (values.gpus === undefined || values.gpus === '1')) usage('--zero', 'needs --gpus N (N > 1): ZeRO partitions over data-parallel ranks');
  if (values['all-ranks'] && (values.gpus === undefined || values.gpus === '1')) usage('--all-ranks', 'needs --gpus N (N > 1): one GPU is one rank');
  for (const flag of ['stage', 'schedule', 'virtual-stages', 'no-return-outputs'] as const) if (values[flag] !== undefined && values.pp === undefined) usage(`--${flag}`, 'applies to a pipeline: give --pp N');
  if ((command === 'estimate' || command === 'fit') && values.pp !== undefined && values.gpus === undefined) usage('--pp', 'needs --gpus (pp × the data-parallel ranks of each stage)');
  if ((command === 'estimate' || command === 'fit') && values.tp !== undefined && values.gpus === undefined) usage('--tp', 'needs --gpus (tp × pp × the data-parallel ranks)');
  if ((command === 'estimate' || command === 'fit') && values.cp !== undefined && values.gpus === undefined) usage('--cp', 'needs --gpus (tp × pp × cp × the data-parallel ranks)');
  if ((command === 'estimate' || command === 'fit') && values.ep !== undefined && values.gpus === undefined) usage('--ep', 'needs --gpus (ep × the data-parallel ranks)');
  if (values.infer && (values.pp !== undefined || values.offload !== undefined || values['micro-batches'] !== undefined)) usage(values.pp !== undefined ? '--pp' : values.offload !== undefined ? '--offload' : '--micro-batches', 'applies to training; --infer is one forward');
  if (values.offload !== undefined && (values.gpus === undefined || values.gpus === '1')) usage('--offload', 'needs --gpus N with --zero or --fsdp: offloading is an engine feature');
  if (values['all-ranks'] && values.rank !== undefined) usage('--all-ranks', 'lists every rank: leave out --rank');
  if (values.qlora && values['lora-rank'] === undefined) usage('--qlora', 'needs --lora-rank: QLoRA trains LoRA adapters over the 4-bit base');
  if (values.dtype !== undefined && values.precision !== undefined) usage('--dtype', `not with --precision, which sets the weights' dtype too`, { received: `--dtype ${values.dtype} --precision ${values.precision}` });
  if (command === 'fit' && values.gpu === undefined) usage('--gpu', 'fit needs the GPU to fit', { expected: `a size like 24GB or one of ${listOf(GPUS.map((g) => g.name), 4)}` });
  if (command === 'plan') {
    if (values.gpu === undefined) usage('--gpu', 'plan needs the GPU each rank runs on', { expected: `a size like 24GB or one of ${listOf(GPUS.map((g) => g.name), 4)}` });
    if (values.gpus === undefined) usage('--gpus', 'plan needs the most GPUs it may use', { expected: 'a whole number N: layouts on 1 .. N GPUs are tried' });
    if (values['global-batch'] === undefined) usage('--global-batch', 'plan needs the samples of one optimizer step over all GPUs');
    if (values.infer) usage('--infer', 'plan lays out training steps');
  }
  if (values.check && values.gpu === undefined && command !== 'fit') usage('--check', 'needs --gpu, the GPU to check against');
}

/** Model-kind rules: LLM flags on a CNN, CNN flags on an LLM. */
function checkKind(command: Command, ref: ModelRef, values: Values): void {
  if (ref.kind === 'cnn') {
    if (command === 'grpo') usage('model', `grpo needs an LLM; ${ref.name} is a CNN`);
    for (const flag of LLM_ONLY) {
      if (values[flag] === undefined) continue;
      const hint = flag === 'seq' ? ': use --input' : flag === 'lora-rank' || flag === 'qlora' ? ' (adapters on the attention projections)' : '';
      usage(`--${flag}`, `applies to LLMs; ${ref.name} is a CNN${hint}`);
    }
  } else {
    for (const flag of CNN_ONLY) {
      if (values[flag] === undefined) continue;
      usage(`--${flag}`, flag === 'input' ? `applies to CNNs; ${ref.name} is an LLM: use --seq` : `applies to the CNN catalog; ${ref.name} is an LLM`);
    }
  }
}

/** Values that need no model: enumerations, the release, the GPU. */
function checkValues(values: Values): void {
  if (values.optimizer !== undefined) oneOf(values.optimizer, '--optimizer', OPTIMIZERS);
  if (values.precision !== undefined) oneOf(values.precision, '--precision', PRECISIONS);
  if (values.device !== undefined) oneOf(values.device, '--device', DEVICES);
  if (values.framework !== undefined) oneOf(values.framework, '--framework', FRAMEWORKS);
  if (values.attention !== undefined) oneOf(values.attention, '--attention', ATTENTIONS);
  if (values.dtype !== undefined) oneOf(values.dtype, '--dtype', DTYPES);
  if (values.transformers !== undefined) {
    try {
      transformersRules(values.transformers);
    } catch (error) {
      if (!(error instanceof VramError)) throw error;
      const issue = error.issues[0];
      usage('--transformers', issue?.message ?? 'unknown release', { expected: issue?.expected, received: issue?.received });
    }
  }
  if (values.gpu !== undefined) gpuBudget(values.gpu);
}

interface Outcome {
  readonly stdout: string;
  readonly code: number;
}

function fitVerdictLine(gpu: string, verdict: FitResult): string {
  return `${verdict.fits ? 'Fits' : 'Does not fit'} ${gpu} (${formatBytes(verdict.budget)}): needs ${formatBytes(verdict.needed)}, ${verdict.fits ? 'leaves' : 'short by'} ${formatBytes(Math.abs(verdict.headroom))} (CUDA context and library workspaces not included).\n`;
}

function runEstimate(ref: ModelRef, values: Values): Outcome {
  const format = oneOf(values.format ?? DEFAULTS.format, '--format', FORMATS);
  if (values.gpu !== undefined && !values.check && NO_VERDICT_FORMATS.includes(format)) {
    usage('--gpu', `--format ${format} has no room for a fit verdict: add --check (exit 1 when it does not fit) or use --format table, markdown or json`);
  }
  const model = buildModel(ref, values, tensorParallelOf(values));
  const options = estimateOptions(values, ref, model);
  const gpu = values.gpu;
  const verdict = gpu !== undefined ? fits(model, { ...options, gpu }) : undefined;
  const code = values.check && verdict !== undefined && !verdict.fits ? 1 : 0;
  const needsEstimate = (format !== 'torchsummary' && format !== 'torchinfo') || values.svg !== undefined;
  if (values.chart !== undefined && values.svg === undefined) usage('--chart', 'picks the chart --svg FILE writes: give --svg');
  const chart = oneOf(values.chart ?? 'timeline', '--chart', CHARTS);
  // With --gpu the charts draw the card's memory.
  const chartOptions = gpu !== undefined ? { capacity: gpuBudget(gpu) } : {};
  const result = needsEstimate ? estimate(model, options) : undefined;
  let text: string;
  if (format === 'torchsummary' || format === 'torchinfo') text = summary(model, { ...options, format });
  else {
    const r = result!;
    let kv: { batch: number; seq: number; dtype: string; bytes: number; inPeak: boolean } | undefined;
    if (ref.kind === 'llm' && options.mode === 'inference') {
      const [batch, seq] = options.input as [number, number];
      const dtype = r.ir.settings.paramDtype;
      kv = { batch, seq, dtype, bytes: kvCache(model, { batch, seq, dtype }), inPeak: !values['no-cache'] };
    }
    const notes =
      (kv !== undefined
        ? `\nKV cache for ${kv.batch} × ${kv.seq} tokens (${kv.dtype}): ${formatCount(kv.bytes)} B (${formatBytes(kv.bytes)}), ${kv.inPeak ? "included in the peak above (use_cache: the forward keeps every layer's keys and values)" : 'not included (--no-cache)'}.\n`
        : '') + moeNote(model, r.params.total) + hubNote(ref) + (verdict !== undefined && gpu !== undefined ? `\n${fitVerdictLine(gpu, verdict)}` : '');
    const ranks = values['all-ranks'] ? estimateRanks(model, { ...options, timeline: false }) : undefined;
    const rankText = ranks === undefined ? '' : `\n${formatRanks(ranks, format === 'markdown')}`;
    switch (format) {
      case 'table':
        text = formatBreakdown(r) + rankText + notes;
        break;
      case 'markdown':
        text = formatBreakdownMarkdown(r) + rankText + notes;
        break;
      case 'json': {
        const json = {
          ...estimateToJSON(r),
          ...(ranks !== undefined ? { ranks: ranks.map(({ rank, stage, dpRank, peak, parameters, gradients, optimizer }) => ({ rank, stage, dpRank, peak, parameters, gradients, optimizer })) } : {}),
          ...(kv !== undefined ? { kvCache: kv } : {}),
          ...(ref.hub !== undefined ? { hub: hubJSON(ref.hub) } : {}),
          ...(verdict !== undefined ? { fit: { gpu, fits: verdict.fits, needed: verdict.needed, budget: verdict.budget, headroom: verdict.headroom } } : {}),
        };
        text = `${JSON.stringify(json, null, 2)}\n`;
        break;
      }
      case 'explain':
        text = formatExplain(explain(r));
        break;
      case 'svg':
        text = breakdownSvg(r, chartOptions);
        break;
    }
  }
  if (values.svg !== undefined) {
    try {
      writeFileSync(values.svg, chart === 'breakdown' ? breakdownSvg(result!, chartOptions) : timelineSvg(result!, chartOptions));
    } catch (error) {
      usage('--svg', `cannot write ${values.svg} (${fsReason(error)})`);
    }
  }
  return { stdout: text, code };
}

/** Every rank's peak and states, runs of equal ranks on one line (`0-6`). */
function formatRanks(ranks: readonly RankFigures[], markdown: boolean): string {
  const staged = ranks.some((r) => r.stage > 0);
  // With pipeline stages each rank's stage is a column (ranks of one stage merge into runs).
  const cells = (r: RankFigures) => [...(staged ? [String(r.stage)] : []), ...[r.peak, r.parameters, r.gradients, r.optimizer].map((b) => formatBytes(b as number))];
  const runs: { first: number; last: number; cells: string[] }[] = [];
  for (const r of ranks) {
    const row = cells(r);
    const prev = runs.at(-1);
    if (prev !== undefined && prev.cells.join() === row.join()) prev.last = r.rank;
    else runs.push({ first: r.rank, last: r.rank, cells: row });
  }
  const head = ['rank', ...(staged ? ['stage'] : []), 'peak', 'parameters', 'gradients', 'optimizer'];
  const rows = runs.map((run) => [run.first === run.last ? String(run.first) : `${run.first}-${run.last}`, ...run.cells]);
  if (markdown) return [`| ${head.join(' | ')} |`, `| --- | ${head.slice(1).map(() => '---:').join(' | ')} |`, ...rows.map((row) => `| ${row.join(' | ')} |`), ''].join('\n');
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  return [`Every rank (${ranks.length}):`, line(head), ...rows.map(line), ''].join('\n');
}

/** The options of one GPU without checkpointing: what a plan varies itself. */
function withoutParallel(values: Values): Values {
  const { gpus: _gpus, engine: _engine, zero: _zero, pp: _pp, tp: _tp, cp: _cp, ep: _ep, checkpointing: _checkpointing, ...rest } = values;
  return rest;
}

/** The layouts a plan tried, fewest GPUs first, and the one it picks. */
function formatPlan(result: PlanResult, title: string): string {
  const order = [...result.layouts].sort((a, b) => gpusOf(a) - gpusOf(b) || a.tp - b.tp || a.cp - b.cp || a.pp - b.pp || Number(b.fits) - Number(a.fits) || a.accumulation - b.accumulation || a.peak - b.peak);
  const piped = result.layouts.some((l) => l.pp > 1);
  const split = result.layouts.some((l) => l.tp > 1);
  const context = result.layouts.some((l) => l.cp > 1);
  const head = ['gpus', ...(split ? ['tp'] : []), ...(context ? ['cp'] : []), ...(piped ? ['pp'] : []), 'engine', 'micro-batch', piped ? 'micro-batches' : 'accumulation', 'checkpointing', 'peak (highest rank)', ''];
  const engineOf = (l: Layout) => (l.zero !== null ? `${l.engine} ZeRO-${l.zero}` : l.engine === 'single' && (l.pp > 1 || l.tp > 1) ? 'none' : l.engine);
  const rows = order.map((l) => [String(gpusOf(l)), ...(split ? [String(l.tp)] : []), ...(context ? [String(l.cp)] : []), ...(piped ? [String(l.pp)] : []), engineOf(l), l.fits ? String(l.microBatch) : '-', l.fits ? String(l.accumulation) : '-', l.checkpointing ? 'yes' : 'no', `${formatBytes(l.peak)}${l.dp * l.pp * l.cp > 1 ? ` (rank ${l.rank})` : ''}`, l.fits ? 'fits' : 'not even 1 sample per forward fits']);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) => row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd();
  const best = result.fewest;
  const verdict =
    best === undefined
      ? 'No layout fits.'
      : `Fewest GPUs: ${gpusOf(best)} (${best.tp > 1 ? `tensor parallel ${best.tp}${best.dp > 1 ? ` × ${best.dp} data-parallel (fsdp2)` : ''}` : best.cp > 1 ? `context parallel ${best.cp} × ${best.dp} data-parallel (${engineOf(best)} over ${best.dp * best.cp} ranks)` : best.pp > 1 ? `${best.pp} pipeline stages, ${best.dp} data-parallel (${engineOf(best)})` : best.engine === 'single' ? 'one GPU' : engineOf(best)}, micro-batch ${best.microBatch} × ${best.accumulation} accumulation step${best.accumulation === 1 ? '' : 's'}${best.checkpointing ? ', checkpointing' : ''}): ${formatBytes(best.peak)} of ${formatBytes(result.budget)}.`;
  return [`Layouts of ${title} (${formatBytes(result.budget)} each):`, line(head), ...rows.map(line), '', verdict, [piped ? 'Pipelines run 1F1B.' : '--pp N also tries pipelines.', split ? 'Tensor-parallel replicas run under FSDP2 (2-D).' : '--tp N also tries tensor parallelism.', context ? 'Context-parallel ranks share each sample; their engine spans dp × cp ranks.' : '--cp N also tries context parallelism.'].join(' '), ''].join('\n');
}

function runFit(ref: ModelRef, values: Values): Outcome {
  const solve = oneOf(values.solve ?? DEFAULTS.solve, '--solve', SOLVES);
  if (solve === 'seq' && ref.kind !== 'llm') usage('--solve', `seq needs an LLM; ${ref.name} is a CNN`, { expected: 'batch or resolution', received: 'seq' });
  if (solve === 'resolution' && ref.kind !== 'cnn') usage('--solve', `resolution needs a CNN; ${ref.name} is an LLM`, { expected: 'batch or seq', received: 'resolution' });
  if (solve === 'batch' && values.batch !== undefined) usage('--batch', 'is what --solve batch solves for: leave it out');
  if (solve === 'seq' && values.seq !== undefined) usage('--seq', 'is what --solve seq solves for: leave it out');
  const model = buildModel(ref, values, tensorParallelOf(values));
  const symbol = solve === 'batch' ? 'B' : solve === 'seq' ? 'S' : 'R';
  const best = maxFitting(model, symbol, { ...estimateOptions(values, ref, model, solve), gpu: values.gpu! });
  return { stdout: `${best}\n`, code: values.check && best < 1 ? 1 : 0 };
}

function runPlan(ref: ModelRef, values: Values): Outcome {
  const format = oneOf(values.format ?? DEFAULTS.format, '--format', PLAN_FORMATS);
  const model = buildModel(ref, values);
  const { input, parallel: _parallel, checkpoint, ...options } = estimateOptions(withoutParallel(values), ref, model);
  const zero = zeroStage(values);
  const engines = zero !== undefined ? (['deepspeed'] as const) : values.engine === undefined ? undefined : [oneOf(values.engine, '--engine', ENGINES)];
  const tryCheckpoint = values.checkpointing ? estimateOptions(values, ref, model).checkpoint : undefined;
  const job = { gpu: values.gpu!, gpus: count(values, 'gpus', 1), globalBatch: count(values, 'global-batch', 1) };
  const maxPp = values.pp === undefined ? 1 : count(values, 'pp', 1);
  const pipelines = Array.from({ length: maxPp }, (_, i) => i + 1);
  const maxTp = values.tp === undefined ? 1 : count(values, 'tp', 1);
  if (maxTp > 1 && ref.kind !== 'llm') usage('--tp', `tensor parallelism splits a decoder's heads; ${ref.name} is a CNN`);
  // The sizes DTensor's plan can cut this decoder by (heads, KV heads and the MLP divide).
  const meta = ref.kind === 'llm' ? decoderMeta(model) : undefined;
  const cuts = (t: number) => meta !== undefined && meta.heads % t === 0 && meta.kvHeads % t === 0 && meta.intermediate % t === 0;
  const tensorParallel = maxTp > 1 ? { sizes: Array.from({ length: maxTp }, (_, i) => i + 1).filter(cuts), model: (size: number) => (size === 1 ? model : buildModel(ref, values, { tensorParallel: { size } })) } : undefined;
  const maxCp = values.cp === undefined ? 1 : count(values, 'cp', 1);
  if (maxCp > 1 && ref.kind !== 'llm') usage('--cp', `context parallelism cuts a decoder's sequence; ${ref.name} is a CNN`);
  // Ring attention runs on sdpa: the CP ranks' model uses it unless --attention says otherwise.
  const contextParallel = maxCp > 1 ? { sizes: Array.from({ length: maxCp - 1 }, (_, i) => i + 2), model: (size: number) => buildModel(ref, values, { contextParallel: { size }, ...(values.attention === undefined ? { attention: 'sdpa' as const } : {}) }) } : undefined;
  const result = plan(model, { ...options, ...job, sample: (input as readonly number[]).slice(1), ...(engines !== undefined ? { engines } : {}), ...(zero !== undefined ? { zero } : {}), ...(maxPp > 1 ? { pipelines } : {}), ...(tensorParallel !== undefined ? { tensorParallel } : {}), ...(contextParallel !== undefined ? { contextParallel } : {}), ...(tryCheckpoint !== undefined ? { checkpoint: tryCheckpoint } : {}) });
  const code = values.check && result.fewest === undefined ? 1 : 0;
  if (format === 'json') return { stdout: `${JSON.stringify({ ...job, budget: result.budget, fewest: result.fewest ?? null, layouts: result.layouts }, null, 2)}\n`, code };
  const what = ref.kind === 'llm' ? `${job.globalBatch} × ${(input as number[])[1]} tokens` : `${job.globalBatch} images of ${(input as number[]).slice(1).join('×')}`;
  return { stdout: formatPlan(result, `${ref.name}, ${what} per optimizer step, on up to ${job.gpus} × ${job.gpu}`), code };
}

function runCompat(which: Compat, ref: ModelRef, values: Values): Outcome {
  if (ref.kind !== 'llm') usage('model', `compat compares decoder LLMs; ${ref.name} is a CNN`);
  const model = buildModel(ref, values);
  const tp = count(values, 'tp', 1);
  const pp = count(values, 'pp', 1);
  const gpus = count(values, 'gpus', 8);
  if (which !== 'megatron' && (tp > 1 || pp > 1)) usage(tp > 1 ? '--tp' : '--pp', 'applies to compat megatron only');
  const nodes = count(values, 'nodes', 1);
  if (which !== 'deepspeed' && nodes > 1) usage('--nodes', 'applies to compat deepspeed only');
  if (gpus % (tp * pp) !== 0) usage('--gpus', `must be a multiple of --tp × --pp = ${tp * pp}`, { received: String(gpus) });
  const job = { name: ref.name, gpus, nodes, seq: count(values, 'seq', DEFAULTS.seq), batch: count(values, 'batch', DEFAULTS.batch), tp, pp };
  const rebuild = (tensorParallel: { readonly size: number; readonly sequenceParallel: boolean }) => (decoderMeta(model).family === 'gpt2' ? undefined : buildModel(ref, values, { tensorParallel }));
  return { stdout: compatText(which, model, decoderMeta(model), job, rebuild), code: 0 };
}

function runGrpo(ref: ModelRef, values: Values): Outcome {
  const format = oneOf(values.format ?? DEFAULTS.format, '--format', GRPO_FORMATS);
  const d = DEFAULTS.grpo;
  const prompts = count(values, 'prompts', d.prompts);
  const group = count(values, 'group', d.group);
  const prompt = count(values, 'prompt', d.prompt);
  const completion = count(values, 'completion', d.completion);
  const micro = values['micro-batch'] === undefined ? undefined : count(values, 'micro-batch', 1);
  if (micro !== undefined && micro > prompts * group) {
    usage('--micro-batch', 'larger than the step', { expected: `at most prompts × group = ${prompts * group}`, received: String(micro) });
  }
  const model = buildModel(ref, values);
  const { input: _input, mode: _mode, ...common } = estimateOptions(values, ref, model);
  const g = grpoStep(model, { ...common, prompts, group, prompt, completion, ...(micro !== undefined ? { microBatch: micro } : {}) });
  const budget = values.gpu !== undefined ? gpuBudget(values.gpu) : undefined;
  const fitsGpu = budget !== undefined ? g.peak <= budget : undefined;
  const code = values.check && fitsGpu === false ? 1 : 0;
  if (format === 'json') {
    const json = { ...g, ...(budget !== undefined ? { fit: { gpu: values.gpu, fits: fitsGpu, needed: g.peak, budget, headroom: budget - g.peak } } : {}) };
    return { stdout: `${JSON.stringify(json, null, 2)}\n`, code };
  }
  const line = (label: string, phase: { peak: number; detail: string }) => `  ${label.padEnd(11)} ${formatBytes(phase.peak).padStart(11)}  ${phase.detail}\n`;
  let text = `GRPO step: ${g.sequences} sequences\n${line('generation', g.generation)}${line('reference', g.reference)}${line('training', g.training)}  peak        ${formatBytes(g.peak).padStart(11)}\n`;
  if (budget !== undefined) text += `${fitsGpu ? 'Fits' : 'Does not fit'} ${values.gpu} (${formatBytes(budget)}).\n`;
  return { stdout: text, code };
}

/** Korthikanti et al.'s formula beside vram-ts's count for one GPT-2 layer (16-bit, dropout 0.1). */
function runKorthikanti(values: Values): Outcome {
  const d = DEFAULTS.korthikanti;
  const seq = count(values, 'seq', d.seq);
  const batch = count(values, 'batch', d.batch);
  const hidden = count(values, 'hidden', d.hidden);
  const heads = count(values, 'heads', d.heads);
  if (hidden % heads !== 0) usage('--heads', `must divide --hidden ${hidden}`, { expected: 'a divisor of the hidden size', received: String(heads) });
  const paper = korthikanti({ seq, batch, hidden, heads }) as number;
  const layer = (layers: number) =>
    estimate(fromHFConfig({ model_type: 'gpt2', n_embd: hidden, n_head: heads, n_layer: layers, n_positions: seq, vocab_size: 1024, attn_pdrop: 0.1, resid_pdrop: 0.1, embd_pdrop: 0.1 }, { attention: 'eager' }), { input: [batch, seq], precision: 'bf16', timeline: false }).bytes.activations as number;
  const ours = layer(2) - layer(1);
  const sbh = seq * batch * hidden;
  const stdout = [
    `One transformer layer, s=${seq} b=${batch} h=${hidden} a=${heads}, 16-bit activations:`,
    `  Korthikanti et al. 2022, sbh(34 + 5as/h):      ${formatCount(paper)} B (${formatBytes(paper)}) = sbh × ${(paper / sbh).toFixed(2)}`,
    `  vram-ts, Hugging Face GPT-2 layer op by op:  ${formatCount(ours)} B (${formatBytes(ours)}) = sbh × ${(ours / sbh).toFixed(2)}`,
    '',
  ].join('\n');
  return { stdout, code: 0 };
}

function listAnd(items: readonly string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}

const FLAG_NAMES = Object.keys(OPTIONS).map((f) => `--${f}`);

/** node:util parseArgs errors as one line naming the flag (and the nearest valid one). */
function parseError(error: unknown, argv: readonly string[]): CliError | undefined {
  if (!(error instanceof TypeError) || !('code' in error) || !String((error as { code: unknown }).code).startsWith('ERR_PARSE_ARGS')) return undefined;
  const code = String((error as { code: unknown }).code);
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const flag = /Unknown option '([^']+)'/.exec(error.message)?.[1] ?? '';
    const near = flag.startsWith('--') ? nearest(flag, FLAG_NAMES) : undefined;
    return new CliError(flag, near !== undefined ? `unknown option; did you mean ${near}?` : 'unknown option (see vram-ts --help)');
  }
  const flag = /'(?:-\w, )?(--[\w-]+)/.exec(error.message)?.[1];
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && flag !== undefined) {
    if (/does not take an argument/.test(error.message)) return new CliError(flag, 'takes no value', { received: JSON.stringify(argv.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1) ?? '') });
    if (/argument missing/.test(error.message)) return new CliError(flag, 'needs a value');
    if (/ambiguous/.test(error.message)) {
      const next = argv[argv.indexOf(flag) + 1];
      return new CliError(flag, `needs a value; write ${flag}=VALUE for a value that starts with a dash`, { received: next !== undefined ? JSON.stringify(next) : undefined });
    }
  }
  return new CliError(flag ?? '', oneLine(error.message));
}

function execute(argv: readonly string[]): Outcome {
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...argv], allowPositionals: true, strict: true, options: OPTIONS }) as { values: Values; positionals: string[] };
  } catch (error) {
    throw parseError(error, argv) ?? error;
  }
  const { values, positionals } = parsed;
  const command = commandOf(positionals, values);
  if (values.help) {
    const help = { fit: FIT_HELP, plan: PLAN_HELP, compat: COMPAT_HELP, grpo: GRPO_HELP, korthikanti: KORTHIKANTI_HELP } as Partial<Record<Command, string>>;
    return { stdout: help[command] ?? HELP, code: 0 };
  }
  checkUsage(command, values, positionals);
  if (command === 'safetensors') return { stdout: readSafetensors(values.safetensors!), code: 0 };
  if (command === 'korthikanti') return runKorthikanti(values);
  const ref = withHub(resolveModel(command === 'estimate' ? positionals[0]! : command === 'compat' ? positionals[2]! : positionals[1]!), values);
  checkKind(command, ref, values);
  checkValues(values);
  if (command === 'fit') return runFit(ref, values);
  if (command === 'plan') return runPlan(ref, values);
  if (command === 'compat') return runCompat(positionals[1] as Compat, ref, values);
  if (command === 'grpo') return runGrpo(ref, values);
  return runEstimate(ref, values);
}

/** Whether VRAM_TS_DEBUG asks for internal errors to propagate (with their stack). */
function debugging(): boolean {
  return typeof process !== 'undefined' && process.env.VRAM_TS_DEBUG !== undefined;
}

/**
 * Runs the command; returns the exit code (0 done or fits, 1 does not fit with --check, 2 usage
 * or input error). stdout text goes to `out` in one piece once everything succeeded; an error
 * is one line to `err` and nothing to `out`.
 */
export function run(argv: readonly string[], out: (text: string) => void, err: (text: string) => void): number {
  try {
    const { stdout, code } = execute(argv);
    out(stdout);
    return code;
  } catch (error) {
    return report(error, err);
  }
}

/** An error as its one line on stderr; exit code 2. */
function report(error: unknown, err: (text: string) => void): number {
  if (error instanceof NeedsHub) err(errorLine(new CliError('model', `${error.repo} is a Hugging Face Hub repository: runAsync reads it (run() makes no requests)`)));
  else if (error instanceof CliError) err(errorLine(error));
  else if (error instanceof VramError) err(errorLine(fromVramError(error)));
  else if (debugging()) throw error;
  else err(internalErrorLine(error));
  return 2;
}

/**
 * {@link run}, and a model named `<org>/<name>` (not a file here) is read from the Hugging Face Hub
 * first: config.json and the safetensors headers (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE as
 * huggingface_hub reads them; `--revision`), cached on disk so that a second call asks at most
 * one conditional request. The bin runs this.
 */
export async function runAsync(argv: readonly string[], out: (text: string) => void, err: (text: string) => void, env: HubEnv = process.env): Promise<number> {
  try {
    const { stdout, code } = execute(argv);
    out(stdout);
    return code;
  } catch (error) {
    if (!(error instanceof NeedsHub)) return report(error, err);
    const key = hubKey(error.repo, error.revision);
    try {
      HUB_LOADED.set(key, await hubLookup(error.repo, error.revision, env));
    } catch (failure) {
      if (!(failure instanceof VramError)) return report(failure, err);
      const line = fromVramError(failure, error.repo);
      const catalog = LLMS.find((e) => e.repo.toLowerCase() === error.repo.toLowerCase());
      const hint = catalog !== undefined && ['hub-auth', 'hub-offline'].includes(failure.issues[0]?.code ?? '') ? `; the built-in ${catalog.id} needs no network` : '';
      return report(new CliError(line.path, `${line.message}${hint}`, { expected: line.expected, received: line.received, more: line.more }), err);
    }
    try {
      return run(argv, out, err);
    } finally {
      // Kept for this call only: the next one reads the disk cache (or the Hub) again.
      HUB_LOADED.delete(key);
    }
  }
}

/** <org>/<name>, as the Hub spells repository ids. */
const HUB_REPO = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/;

/** A Hub model that execute() needs and runAsync has not read yet. */
class NeedsHub {
  constructor(
    readonly repo: string,
    readonly revision: string | undefined,
  ) {}
}

/** What runAsync read, by repo@revision, for the execute() that follows. */
const HUB_LOADED = new Map<string, HubModel>();

function hubKey(repo: string, revision: string | undefined): string {
  return `${repo}@${revision ?? 'main'}`;
}

/** A Hub model's reference with what was read of it; --revision only for one. */
function withHub(ref: ModelRef, values: Values): ModelRef {
  if (ref.repo === undefined) {
    if (values.revision !== undefined) usage('--revision', 'applies to a Hugging Face Hub model (<org>/<name>)', { received: JSON.stringify(ref.name) });
    return ref;
  }
  const hub = HUB_LOADED.get(hubKey(ref.repo, values.revision));
  if (hub === undefined) throw new NeedsHub(ref.repo, values.revision);
  return { ...ref, hub };
}

/** The model from a Hub config with the command's decoder options; its problems named by the config's keys. */
function hubModel(hub: HubModel, decoder: HFConfigOptions): Layer {
  try {
    return hub.build(decoder);
  } catch (error) {
    if (error instanceof VramError) throw fromVramError(error, `${hub.repo}: config.json`);
    throw error;
  }
}

/** The checkpoint's line under an estimate of a Hub model. */
function hubNote(ref: ModelRef): string {
  const hub = ref.hub;
  if (hub === undefined) return '';
  const at = `${hub.repo}@${hub.revision}${hub.commit !== undefined && hub.commit !== hub.revision ? ` (${hub.commit.slice(0, 12)})` : ''}`;
  const c = hub.checkpoint;
  if (c === undefined) return `\nHub ${at}: no safetensors checkpoint to check the ${hub.parameters.toLocaleString('en-US')} parameters of config.json against.\n`;
  const dtypes = Object.entries(c.byDtype).map(([d, v]) => `${d} ${v.parameters.toLocaleString('en-US')}`).join(', ');
  const files = `${c.files.length} safetensors file${c.files.length === 1 ? '' : 's'}`;
  return `\nHub ${at}: ${files}, ${c.parameters.toLocaleString('en-US')} parameters (${dtypes}), ${formatBytes(c.bytes)} of weights; ${hub.mismatch ?? 'the model built from config.json has as many'}.\n`;
}

/** The Hub lookup in --format json. */
function hubJSON(hub: HubModel): Record<string, unknown> {
  return { repo: hub.repo, revision: hub.revision, commit: hub.commit ?? null, parameters: hub.parameters, checkpoint: hub.checkpoint ?? null, mismatch: hub.mismatch ?? null };
}

/**
 * What the bin does when writing to stdout fails: a reader that went away (`| head -1`, EPIPE)
 * ends the command quietly with the exit code it already has; any other failure is one line and 2.
 */
export function stdoutFailure(error: unknown, exitCode: number): { exitCode: number; line: string | undefined } {
  const code = typeof error === 'object' && error !== null && 'code' in error ? String((error as { code: unknown }).code) : '';
  if (code === 'EPIPE' || code === 'ERR_STREAM_DESTROYED') return { exitCode, line: undefined };
  return { exitCode: 2, line: `vram-ts: stdout: cannot write (${fsReason(error)})\n` };
}

/** Mixture-of-experts models: the active parameters per token next to the total; MLA: what its cache holds. */
function moeNote(model: Layer, total: number): string {
  const meta = model.kind === 'module' ? model.meta : undefined;
  const moe = meta?.moe;
  let note = '';
  if (moe !== undefined) {
    const ep = meta?.expertParallel;
    const whole = wholeParams(model as { meta?: ModelMeta }, total);
    const rank = ep === undefined ? '' : ` Expert parallel ${ep.size}: rank ${ep.rank} holds ${moe.experts / ep.size} of the ${moe.experts} routed experts of each MoE layer, ${formatCount(total)} parameters.`;
    note += `\nMixture of experts: ${formatCount(whole)} parameters, ${formatCount(activeParams(model as { meta?: ModelMeta }, total))} active per token (${moe.k} of ${moe.experts} routed experts in ${moe.moeLayers} MoE layers${moe.sharedExperts > 0 ? `, ${moe.sharedExperts} shared` : ''}).${rank}\n`;
  }
  if (meta?.mla !== undefined) note += `Multi-head latent attention: the cache holds the latent, ${meta.mla.latentPerToken} elements per token and layer (kv_lora_rank + qk_rope_head_dim).\n`;
  return note;
}
