/**
 * The command's flags, each one entry: its type, the commands that take it, its limits or
 * values, the model kind it needs, why a command refuses it, and its help line. parseArgs'
 * options, the scope and model-kind checks, the value readers and the option lines of every
 * help text are made from this table (readers and checks: ./values.ts; help: ./help.ts), so a
 * new flag is one entry here.
 */
import { decimal, gpuBudget, imageSize, transformersRelease } from './args.js';
import { CONFIG_FILE_FLAGS } from './config-flags.js';
import { ENGINE_FLAGS, RL_FRAMEWORKS } from './engine-flags.js';
import { fieldFlags, type FieldFlagSpec } from './fields.js';
import {
  DEFAULT_ENGINE,
  DEFAULT_TRANSFORMERS,
  ENGINE_NAMES,
  GPUS,
  TRANSFORMERS_RANGES,
  TRL_RELEASES,
  DEFAULT_TRL,
  type AttentionImpl,
  type Device,
  type DType,
  type Engine,
  type Framework,
  type OptimizerName,
  type PipelineSchedule,
  type Precision,
} from '../index.js';

/** The command's modes: an estimate of one model, or a subcommand. */
export type Command = 'estimate' | 'fit' | 'plan' | 'compat' | 'grpo' | 'sft' | 'vllm' | 'rl' | 'korthikanti' | 'explain-config' | 'safetensors';

/** Every command, in the order of the usage text. */
export const COMMANDS: readonly Command[] = ['estimate', 'fit', 'plan', 'compat', 'grpo', 'sft', 'vllm', 'rl', 'korthikanti', 'explain-config', 'safetensors'];

/**
 * A list naming every member of the library's union `U` (the compiler refuses a list that misses
 * one or adds a name the library does not know), in the order the command shows them.
 */
const every =
  <U extends string>() =>
  <const T extends readonly U[]>(list: T & ([Exclude<U, T[number]>] extends [never] ? unknown : { readonly missing: Exclude<U, T[number]> })): T =>
    list;

/** --optimizer: the library's optimizers. */
export const OPTIMIZERS = every<OptimizerName>()(['sgd', 'sgd_momentum', 'adam', 'adamw', 'adafactor', 'lion', 'adam8bit']);
/** --precision: the library's training precisions. */
export const PRECISIONS = every<Precision>()(['fp32', 'bf16', 'fp16', 'amp-bf16', 'amp-fp16']);
/** --attention: the library's attention implementations. */
export const ATTENTIONS = every<AttentionImpl>()(['eager', 'sdpa', 'flash']);
/** The parameter dtypes an LLM's --dtype takes (the floating ones of the library's DType). */
export const DTYPES = ['float32', 'bfloat16', 'float16', 'float64'] as const satisfies readonly DType[];
/** --device: where the library's rules say the step runs. */
export const DEVICES = every<Device>()(['cuda', 'cpu']);
/** --framework: the PyTorch versions whose autograd rules the library follows. */
export const FRAMEWORKS = every<Framework>()(['torch-2', 'torch-1.13']);
/** --engine: the library's data-parallel engines, the command's default first. */
export const ENGINES: readonly Engine[] = [DEFAULT_ENGINE, ...ENGINE_NAMES.filter((name) => name !== DEFAULT_ENGINE)];
/** --schedule: the library's pipeline schedules. */
export const SCHEDULES = every<PipelineSchedule>()(['1f1b', 'gpipe', 'interleaved-1f1b']);
/** --offload: what goes to host memory (the command's words for the library's offload option). */
export const OFFLOADS = ['optimizer', 'parameters', 'all'] as const;
/** --format of an estimate. */
export const FORMATS = ['table', 'json', 'markdown', 'torchsummary', 'torchinfo', 'explain', 'svg'] as const;
/** --format of grpo and sft. */
export const TRAINER_FORMATS = ['table', 'json'] as const;
/** --format of vllm and rl. */
export const ENGINE_FORMATS = ['table', 'json'] as const;
/** --format of plan. */
export const PLAN_FORMATS = ['table', 'json'] as const;
/** --chart: which chart --svg writes. */
export const CHARTS = ['timeline', 'breakdown'] as const;
/** --verdict: what the fit verdict compares. */
export const VERDICTS = ['reserved', 'allocated'] as const;

/** --solve: what fit solves for. */
export const SOLVES = ['batch', 'seq', 'resolution'] as const;

/** What the command assumes when a flag is left out. */
export const DEFAULTS = {
  input: '3x224x224',
  batch: 1,
  seq: 512,
  classes: 1000,
  optimizer: 'adam',
  device: 'cuda',
  framework: 'torch-2',
  format: 'table',
  solve: 'batch',
  prompt: 512,
  korthikanti: { seq: 2048, batch: 1, hidden: 1024, heads: 16 },
} as const;

/** A help line: its text (lines after the first are indented under it), or [value name, text]. */
export type HelpLine = string | readonly [meta: string, text: string];

/** One flag. */
interface FlagSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  /** The commands that take it; any other use is refused. */
  readonly scope: readonly Command[];
  /** A count: the largest value accepted (the smallest is 1). */
  readonly max?: number;
  /** Its reader where it is neither a count nor a choice (it refuses a bad value with a CliError). */
  readonly read?: (value: string) => unknown;
  /** The values accepted, per command where they differ. */
  readonly values?: readonly string[] | Partial<Record<Command, readonly string[]>>;
  /** Only for one kind of model; `says` and `hint` word the refusal. */
  readonly only?: { readonly kind: 'llm' | 'cnn'; readonly says?: string; readonly hint?: string };
  /** Why a command outside the scope refuses it, where the scope alone does not say it. */
  readonly why?: Partial<Record<Command, string>>;
  /** The value's name in help (`--batch N`), and the help's own label where it is not `--flag META`. */
  readonly meta?: string;
  readonly label?: string;
  /** Its help line, one for every command or by command (`default` for the others); none: not listed. */
  readonly help?: HelpLine | Partial<Record<Command | 'default', HelpLine>>;
}

const ESTIMATES = ['estimate', 'fit', 'plan'] as const satisfies readonly Command[];
const TRAINERS = ['grpo', 'sft'] as const satisfies readonly Command[];
const MODEL_COMMANDS = [...ESTIMATES, ...TRAINERS] as const satisfies readonly Command[];
const k = DEFAULTS.korthikanti;
const releases = TRANSFORMERS_RANGES.map(([a, b]) => `${a} – ${b}`).join(' and ');
const gpuHelp = (what: string): HelpLine => `${what}: a size (24GB, 80GiB; GB is read as GiB) or\n${GPUS.map((gpu) => gpu.name).join(', ')}`;
const STEP_CHART = 'it charts the step of one estimate';
const GRPO_STEP = 'a GRPO step always generates, scores and trains';
const SFT_STEP = 'an SFT step always trains';
/** Why grpo and sft refuse an estimate's flag: the trainer's own field says it. */
const asField = (field: string, what = 'field') => ({ grpo: `grpo takes GRPOConfig's ${field} ${what}`, sft: `sft takes SFTConfig's ${field} ${what}` });
const EXPLAIN_AUTO = (field: string) => `TrainingArguments' ${field}: fills the file's "auto" (none: the file says it)`;
const LAYER_ONLY = 'it compares two counts of one layer and fits nothing';

/** Every flag, in the order the did-you-mean hints and the model-kind checks see them. */
export const FLAGS = {
  input: {
    type: 'string',
    read: imageSize,
    scope: ['estimate', 'fit', 'plan'],
    only: { kind: 'cnn', hint: ': use --seq' },
    why: { grpo: 'grpo needs an LLM', sft: 'sft needs an LLM' },
    meta: 'CxHxW',
    help: {
      default: `image size for CNNs (default ${DEFAULTS.input})`,
      fit: `image size for CNNs (default ${DEFAULTS.input}); with --solve resolution\nonly C is used and H = W is solved for`,
    },
  },
  batch: {
    type: 'string',
    max: 1_000_000_000,
    scope: ['estimate', 'fit', 'compat', 'korthikanti', 'rl', 'explain-config'],
    why: { plan: 'a plan splits --global-batch over ranks and micro-batches', ...asField('--per-device-train-batch-size') },
    meta: 'N',
    help: {
      default: `batch size (default ${DEFAULTS.batch})`,
      fit: `batch size (default ${DEFAULTS.batch}); not with --solve batch`,
      compat: `micro-batch size (default ${DEFAULTS.batch})`,
      korthikanti: ['B', `batch size b (default ${k.batch})`],
      'explain-config': EXPLAIN_AUTO('per_device_train_batch_size'),
    },
  },
  seq: {
    type: 'string',
    max: 1_000_000_000,
    scope: ['estimate', 'fit', 'plan', 'compat', 'korthikanti', 'rl'],
    only: { kind: 'llm', hint: ': use --input' },
    why: { grpo: 'a GRPO step is --prompt plus --max-completion-length tokens long', sft: "sft takes --sequence (at most SFTConfig's --max-length)" },
    meta: 'N',
    help: {
      default: `sequence length for LLMs (default ${DEFAULTS.seq})`,
      fit: `sequence length for LLMs (default ${DEFAULTS.seq}); not with --solve seq`,
      compat: `sequence length of vram-ts's step and Megatron's activations (default ${DEFAULTS.seq})`,
      korthikanti: ['S', `sequence length s (default ${k.seq})`],
    },
  },
  classes: {
    type: 'string',
    max: 1_000_000_000,
    scope: ['estimate', 'fit', 'plan'],
    only: { kind: 'cnn', says: 'applies to the CNN catalog' },
    why: { grpo: 'grpo needs an LLM', sft: 'sft needs an LLM' },
    meta: 'N',
    help: `classifier outputs for the CNN catalog (default ${DEFAULTS.classes})`,
  },
  train: {
    type: 'boolean',
    scope: ['estimate', 'fit'],
    why: { grpo: GRPO_STEP, sft: SFT_STEP },
    label: '--train | --infer',
    help: 'a training step (the default) or an inference forward',
  },
  infer: { type: 'boolean', scope: ['estimate', 'fit'], why: { grpo: GRPO_STEP, sft: SFT_STEP } },
  optimizer: {
    type: 'string',
    scope: [...ESTIMATES, 'rl'],
    why: asField('--optim'),
    values: OPTIMIZERS,
    meta: 'NAME',
    help: {
      default: `${OPTIMIZERS.join(', ')} (default ${DEFAULTS.optimizer}); training only`,
      plan: `${OPTIMIZERS.join(', ')} (default ${DEFAULTS.optimizer})`,
    },
  },
  precision: {
    type: 'string',
    scope: [...ESTIMATES, 'rl', 'explain-config'],
    why: asField('--bf16'),
    values: PRECISIONS,
    meta: 'P',
    help: {
      default: `${PRECISIONS.join(', ')} (default: none, the weights\nkeep the model's dtype: float32 for the CNNs, the config's torch_dtype for LLMs)`,
      plan: `${PRECISIONS.join(', ')} (default: the model's dtype)`,
      'explain-config': EXPLAIN_AUTO('bf16 / fp16'),
    },
  },
  checkpointing: {
    type: 'boolean',
    scope: [...ESTIMATES, 'rl'],
    why: asField('--gradient-checkpointing'),
    help: {
      default: 'activation checkpointing of every block (decoder layers, CNN feature blocks);\ntraining only',
      plan: 'also try activation checkpointing of every block',
    },
  },
  attention: {
    type: 'string',
    scope: [...MODEL_COMMANDS, 'compat', 'rl'],
    values: ATTENTIONS,
    only: { kind: 'llm' },
    meta: 'A',
    help: {
      default: `${ATTENTIONS.join(', ')} (LLMs; default: what the transformers release picks)`,
      compat: `${ATTENTIONS.join(', ')} (default: what the transformers release picks)`,
    },
  },
  device: { type: 'string', scope: MODEL_COMMANDS, values: DEVICES, meta: 'D', help: `${DEVICES.join(' or ')} (default ${DEFAULTS.device})` },
  framework: {
    type: 'string',
    scope: [...ESTIMATES, 'rl'],
    why: { grpo: 'the trainers follow torch 2', sft: 'the trainers follow torch 2' },
    values: { estimate: FRAMEWORKS, fit: FRAMEWORKS, plan: FRAMEWORKS, rl: RL_FRAMEWORKS },
    meta: 'F',
    help: {
      default: `${FRAMEWORKS.join(' or ')} (default ${DEFAULTS.framework}): autograd rules where versions differ`,
      rl: `${RL_FRAMEWORKS.join(', ')}: whose placement of trainer and engine (required)`,
    },
  },
  transformers: {
    type: 'string',
    read: transformersRelease,
    scope: [...MODEL_COMMANDS, 'compat', 'vllm', 'rl'],
    only: { kind: 'llm' },
    meta: 'X.Y.Z',
    help: {
      default: `the Hugging Face transformers release whose code to follow (LLMs; default ${DEFAULT_TRANSFORMERS});\n${releases} were read`,
      compat: `the Hugging Face transformers release whose code to follow (default ${DEFAULT_TRANSFORMERS})`,
    },
  },
  dtype: {
    type: 'string',
    scope: [...MODEL_COMMANDS, 'vllm', 'rl'],
    values: DTYPES,
    only: { kind: 'llm' },
    meta: 'D',
    help: {
      default: `parameter dtype of an LLM: ${DTYPES.join(', ')}\n(default: the config's torch_dtype); not with --precision, which sets it too`,
      grpo: 'float32 only: the step is estimated on a model loaded in float32 (a 16-bit one is not modelled)',
      sft: 'float32 only: the step is estimated on a model loaded in float32 (a 16-bit one is not modelled)',
    },
  },
  'no-cache': {
    type: 'boolean',
    scope: ESTIMATES,
    why: asField('--use-cache'),
    only: { kind: 'llm' },
    help: "forward with use_cache=False (LLMs; default: the config's use_cache, true)",
  },
  'lora-rank': {
    type: 'string',
    max: 1_000_000,
    scope: ESTIMATES,
    why: { grpo: "grpo takes PEFT's LoraConfig: --lora-r", sft: "sft takes PEFT's LoraConfig: --lora-r" },
    only: { kind: 'llm', hint: ' (adapters on the attention projections)' },
    meta: 'R',
    help: "LoRA adapters of rank R on PEFT's default targets\n(q_proj, v_proj; GPT-2: c_attn); LLMs only",
  },
  qlora: {
    type: 'boolean',
    scope: ESTIMATES,
    why: { grpo: 'a 4-bit base is not modelled for the trainers', sft: 'a 4-bit base is not modelled for the trainers' },
    only: { kind: 'llm', hint: ' (adapters on the attention projections)' },
    help: 'with --lora-rank: a 4-bit (NF4) base, as bitsandbytes loads it',
  },
  revision: {
    type: 'string',
    scope: [...MODEL_COMMANDS, 'vllm', 'rl'],
    meta: 'R',
    help: 'branch, tag or commit of a Hub model (<org>/<name>); main when left out',
  },
  timeout: {
    type: 'string',
    max: 3_600,
    scope: [...MODEL_COMMANDS, 'vllm', 'rl'],
    meta: 'S',
    help: 'seconds a Hub model (<org>/<name>) may take to read (default 60)',
  },
  gpu: {
    type: 'string',
    read: gpuBudget,
    scope: [...MODEL_COMMANDS, 'vllm', 'rl'],
    why: { korthikanti: LAYER_ONLY },
    meta: 'NAME|SIZE',
    help: {
      estimate: gpuHelp('says whether it fits (default: none)'),
      fit: gpuHelp('the GPU to fit (required)'),
      plan: gpuHelp('the GPU of every rank (required)'),
      grpo: gpuHelp('says whether the step fits (default: none)'),
      sft: gpuHelp('says whether the step fits (default: none)'),
      vllm: 'the GPU (required): a name whose torch-reported total is recorded, or that\ntotal as a size (torch.cuda.mem_get_info()[1], e.g. 79.15GiB)',
      rl: "the trainer's GPU (required), as vllm --gpu takes it",
    },
  },
  check: {
    type: 'boolean',
    scope: [...MODEL_COMMANDS, 'vllm', 'rl'],
    why: { korthikanti: LAYER_ONLY },
    help: { default: 'with --gpu: exit 1 when it does not fit', fit: 'exit 1 when nothing fits (the number is 0)', plan: 'exit 1 when no layout fits' },
  },
  format: {
    type: 'string',
    scope: ['estimate', 'plan', 'grpo', 'sft', 'vllm', 'rl'],
    values: { estimate: FORMATS, plan: PLAN_FORMATS, grpo: TRAINER_FORMATS, sft: TRAINER_FORMATS, vllm: ENGINE_FORMATS, rl: ENGINE_FORMATS },
    why: { fit: 'fit prints one number' },
    meta: 'F',
    help: {
      estimate: `${FORMATS.join(', ')} (default ${DEFAULTS.format});\njson carries the fit verdict and the KV cache as fields`,
      plan: `${PLAN_FORMATS.join(', ')} (default ${DEFAULTS.format})`,
      grpo: `${TRAINER_FORMATS.join(' or ')} (default ${DEFAULTS.format})`,
      sft: `${TRAINER_FORMATS.join(' or ')} (default ${DEFAULTS.format})`,
      vllm: `${ENGINE_FORMATS.join(' or ')} (default ${DEFAULTS.format})`,
      rl: `${ENGINE_FORMATS.join(' or ')} (default ${DEFAULTS.format})`,
    },
  },
  svg: {
    type: 'string',
    scope: ['estimate'],
    why: { fit: STEP_CHART, grpo: STEP_CHART, sft: STEP_CHART, plan: STEP_CHART },
    meta: 'FILE',
    help: "write a chart (SVG) of the step to FILE (with --gpu: the card's memory drawn)",
  },
  chart: { type: 'string', scope: ['estimate'], values: CHARTS, meta: 'C', help: `${CHARTS.join(' or ')} (default timeline): which chart --svg writes` },
  solve: {
    type: 'string',
    scope: ['fit'],
    values: SOLVES,
    meta: 'WHAT',
    help: `${SOLVES.join(', ')} (default ${DEFAULTS.solve}); seq needs an LLM, resolution a CNN`,
  },
  advise: { type: 'boolean', scope: ['fit', 'rl'], help: 'what change makes it fit: each lever estimated, ranked by cost (fit --gpus N: sharding too)' },
  fewest: {
    type: 'boolean',
    scope: ['plan'],
    help: 'stop at the fewest GPUs: layouts weighed smallest GPU count first, the search\nended at the first count where one fits (the table lists those weighed)',
  },
  verdict: {
    type: 'string',
    scope: ['estimate', 'fit'],
    values: VERDICTS,
    meta: 'V',
    help: 'reserved (default): capacity − CUDA context − cuBLAS workspaces against what the\ncaching allocator reserves; allocated: the allocated peak against the nominal memory',
  },
  safetensors: { type: 'string', scope: ['safetensors'] },
  prompt: { type: 'string', max: 1_000_000_000, scope: ['grpo', 'rl'], meta: 'P', help: `prompt tokens of every prompt (default ${DEFAULTS.prompt})` },
  sequence: {
    type: 'string',
    max: 1_000_000_000,
    scope: ['sft'],
    meta: 'S',
    help: 'tokens per example (default: --max-length; longer examples are truncated to it)',
  },
  ...CONFIG_FILE_FLAGS,
  'lora-r': {
    type: 'string',
    max: 1_000_000,
    scope: [...TRAINERS, 'rl'],
    meta: 'R',
    help: "LoRA adapters of rank R (LoraConfig's r; PEFT's default 8 with any --lora-*)",
  },
  'lora-alpha': {
    type: 'string',
    read: (v: string) => decimal(v, '--lora-alpha'),
    scope: [...TRAINERS, 'rl'],
    meta: 'A',
    help: "LoraConfig's lora_alpha (scales values only)",
  },
  'lora-dropout': {
    type: 'string',
    read: (v: string) => decimal(v, '--lora-dropout'),
    scope: [...TRAINERS, 'rl'],
    meta: 'P',
    help: "LoraConfig's lora_dropout (a mask per adapted layer when > 0)",
  },
  'lora-target-modules': {
    type: 'string',
    scope: [...TRAINERS, 'rl'],
    meta: 'M,M|all-linear',
    help: "LoraConfig's target_modules (PEFT's default: q_proj, v_proj)",
  },
  trl: {
    type: 'string',
    scope: [...TRAINERS, 'rl'],
    values: TRL_RELEASES,
    meta: 'X.Y.Z',
    help: `the TRL release whose trainer and defaults to follow (default ${DEFAULT_TRL})`,
  },
  hidden: {
    type: 'string',
    max: 1_000_000,
    scope: ['korthikanti', 'explain-config'],
    meta: 'H',
    help: { default: `hidden size h (default ${k.hidden})`, 'explain-config': 'the model\'s hidden_size (fills the ZeRO buckets\' "auto")' },
  },
  heads: { type: 'string', max: 1_000_000, scope: ['korthikanti'], meta: 'A', help: `attention heads a, a divisor of h (default ${k.heads})` },
  gpus: {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit', 'plan', 'compat', 'rl', 'explain-config'],
    meta: 'N',
    help: {
      default: 'one rank of N data-parallel GPUs (training; default 1: one GPU)',
      plan: 'the most GPUs to use (required)',
      compat: 'GPUs (per node for deepspeed; default 8)',
      rl: "the trainer's data-parallel GPUs (default 1); verl's rollout spans\n--tensor-parallel-size of them",
      'explain-config': 'the data-parallel world (none: train_batch_size / (micro × accumulation))',
    },
  },
  engine: {
    type: 'string',
    scope: ['estimate', 'fit', 'plan', 'rl'],
    values: ENGINES,
    meta: 'E',
    help: {
      default: `${ENGINES.join(', ')} (with --gpus; default fsdp2): FSDP2 shards parameters,\ngradients and optimizer state; DDP keeps them whole plus its gradient buckets;\nzero-redundancy is torch's ZeroRedundancyOptimizer over DDP; deepspeed\nis DeepSpeed ZeRO (needs --zero); megatron is Megatron-core's DDP (its\ngradient buffer, Float16Optimizer's fp32 copy)`,
      plan: `try only this engine: ${ENGINES.join(', ')} (deepspeed: ZeRO 1, 2, 3)`,
    },
  },
  fsdp: { type: 'boolean', scope: ['estimate', 'fit'], why: { plan: 'a plan tries every engine (--engine keeps one)' }, help: 'the same as --engine fsdp2' },
  rank: {
    type: 'string',
    scope: ['estimate', 'fit'],
    why: { plan: 'a plan weighs every rank' },
    meta: 'R',
    help: "which rank to estimate (default 0: FSDP2's and ZeRO's ranks differ)",
  },
  'all-ranks': { type: 'boolean', scope: ['estimate'], help: "also every rank's peak, parameters, gradients and optimizer state" },
  'global-batch': { type: 'string', max: 1_000_000_000, scope: ['plan'], meta: 'G', help: 'samples per optimizer step over all GPUs (required)' },
  zero: {
    type: 'string',
    max: 3,
    scope: ['estimate', 'fit', 'plan'],
    meta: '1|2|3',
    help: {
      default:
        "DeepSpeed ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters\npartitioned (implies --engine deepspeed; DeepSpeed's defaults for its buckets)",
      plan: 'try only this DeepSpeed ZeRO stage (implies --engine deepspeed)',
    },
  },
  pp: {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit', 'plan', 'compat'],
    meta: 'N',
    help: {
      default:
        'pipeline stages (torch.distributed.pipelining): --gpus is then pp × the\ndata-parallel ranks of each stage; needs --micro-batches >= N for 1f1b',
      plan: 'also try pipelines of 2 .. N stages (1F1B; DDP across pipelines)',
      compat: 'pipeline-parallel size (megatron; default 1)',
    },
  },
  stage: { type: 'string', scope: ['estimate', 'fit'], meta: 'S', help: 'which pipeline stage to estimate (default 0)' },
  schedule: { type: 'string', scope: ['estimate', 'fit'], values: SCHEDULES, meta: 'S', help: `${SCHEDULES.join(', ')} (default 1f1b)` },
  'virtual-stages': {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit'],
    meta: 'V',
    help: 'stages per pipeline rank with interleaved-1f1b (default 2)',
  },
  'no-return-outputs': { type: 'boolean', scope: ['estimate', 'fit'], help: 'schedule.step(return_outputs=False): the last stage keeps no outputs' },
  'distributed-optimizer': {
    type: 'boolean',
    scope: ['estimate', 'fit'],
    help: "with --engine megatron: Megatron's distributed optimizer (fp32 master\nand Adam state sharded, parameters in a padded buffer)",
  },
  'micro-batches': {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit', 'explain-config'],
    meta: 'M',
    help: {
      default: "micro-batches per optimizer step (gradient accumulation; a pipeline's\nmicro-batches), each of --batch samples (default 1)",
      'explain-config': EXPLAIN_AUTO('gradient_accumulation_steps'),
    },
  },
  offload: {
    type: 'string',
    scope: ['estimate', 'fit'],
    values: OFFLOADS,
    meta: 'WHAT',
    help: `${OFFLOADS.join(', ')}: host memory instead of the GPU (DeepSpeed\noffload_optimizer / offload_param at ZeRO-3; FSDP2's CPUOffloadPolicy is all)`,
  },
  nodes: { type: 'string', max: 1_000_000, scope: ['compat'], meta: 'N', help: 'nodes (deepspeed; default 1)' },
  tp: {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit', 'plan', 'compat'],
    meta: 'N',
    help: {
      default:
        "tensor parallelism (PyTorch DTensor's plan on Llama/Qwen2/Mistral: heads,\nMLP and vocabulary split N ways); --gpus is tp × pp × data-parallel ranks",
      plan: 'also try tensor parallelism of 2 .. N ranks (decoders; replicas under FSDP2)',
      compat: 'tensor-parallel size (megatron; default 1)',
    },
  },
  cp: {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit', 'plan'],
    meta: 'N',
    help: {
      default:
        "context parallelism (PyTorch's context_parallel, ring attention over sdpa;\nLlama/Qwen2/Mistral): activations hold S/N positions; --gpus is\ntp × pp × cp × data-parallel ranks, the engine spanning dp × cp",
      plan: 'also try context parallelism of 2 .. N ranks (ring attention, decoders;\nthe engine over dp × cp ranks)',
    },
  },
  ep: {
    type: 'string',
    max: 1_000_000,
    scope: ['estimate', 'fit'],
    meta: 'N',
    help: "expert parallelism of a MoE decoder (transformers 5.x's ep_plan: each rank\nholds 1/N of the routed experts, every rank runs every token)",
  },
  sp: {
    type: 'boolean',
    scope: ['estimate', 'fit'],
    help: 'sequence parallelism with --tp (norms and residuals hold S/N; needs a\nconcrete --seq, not fit --solve seq)',
  },
  // grpo's flags before it took GRPOConfig's own fields (issue 20): refused with the field to use.
  group: { type: 'string', scope: [], why: { grpo: 'the group is --num-generations (GRPOConfig.num_generations)' } },
  completion: { type: 'string', scope: [], why: { grpo: 'the completion length is --max-completion-length' } },
  prompts: {
    type: 'string',
    scope: [],
    why: { grpo: 'the prompts of a rollout are --per-device-train-batch-size × --steps-per-generation / --num-generations' },
  },
  'micro-batch': { type: 'string', scope: [], why: { grpo: 'the micro-batch is --per-device-train-batch-size (with --gradient-accumulation-steps)' } },
  ...ENGINE_FLAGS,
  help: { type: 'boolean', short: 'h', scope: COMMANDS, label: '-h, --help', help: 'this help' },
} as const satisfies Readonly<Record<string, FlagSpec>>;

export type Flag = keyof typeof FLAGS;

/**
 * The generated group: every field of GRPOConfig and SFTConfig as `--<field, _ → ->` (./fields.ts),
 * a string for node's parser, read by the type of the field's default. A name the table above
 * already has (`--fsdp`) stays the command's flag: that field is a --config key only.
 */
export const FIELD_FLAGS: Readonly<Record<string, FieldFlagSpec>> = fieldFlags(new Set(Object.keys(FLAGS)));

/** What node's parser read: a string or a boolean by the flag's type; the field flags' strings by their names. */
export type Values = { [F in Flag]?: (typeof FLAGS)[F]['type'] extends 'string' ? string : boolean } & {
  readonly [field: string]: string | boolean | undefined;
};

/** Which commands take each flag of the table above; any other use is an error (the field flags: {@link scopeOf}). */
export const SCOPE = Object.fromEntries(Object.entries(FLAGS).map(([flag, spec]) => [flag, spec.scope])) as { readonly [F in Flag]: readonly Command[] };

/** node:util parseArgs' options: the table's flags and the field flags. */
export const OPTIONS = {
  ...Object.fromEntries(Object.keys(FIELD_FLAGS).map((flag) => [flag, { type: 'string' as const }])),
  ...Object.fromEntries(Object.entries(FLAGS).map(([flag, spec]) => [flag, { type: spec.type, ...('short' in spec ? { short: spec.short } : {}) }])),
} as { readonly [F in Flag]: { readonly type: (typeof FLAGS)[F]['type']; readonly short?: string } } & Readonly<
  Record<string, { readonly type: 'string' | 'boolean' }>
>;

/** The table entry of a flag, as the generic checks read it; a field flag's entry is made from its field. */
export function specOf(flag: string): FlagSpec {
  const spec: FlagSpec | undefined = (FLAGS as Readonly<Record<string, FlagSpec>>)[flag];
  if (spec !== undefined) return spec;
  const field = FIELD_FLAGS[flag];
  if (field === undefined) throw new Error(`no flag --${flag}`);
  const only = (c: 'grpo' | 'sft') => `a field of ${c === 'grpo' ? 'SFTConfig, not of GRPOConfig' : 'GRPOConfig, not of SFTConfig'}`;
  return { type: 'string', scope: field.scope, why: { grpo: only('grpo'), sft: only('sft') } };
}

/** The commands that take a flag (of the table or a field flag). */
export function scopeOf(flag: string): readonly Command[] {
  return specOf(flag).scope;
}
