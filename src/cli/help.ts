/**
 * The command's help texts: the prose is written here, every option line is made from the flag
 * table (./flags.ts), and test/cli checks that passing a shown default changes nothing.
 */
import { LLMS, VISION_MODELS, resolveTrainerArgs, trainerFields, type TrainerKind } from '../index.js';
import { FIELD_FLAGS, FLAGS, SCOPE, specOf, type Command, type Flag, type HelpLine } from './flags.js';
import { kebab } from './fields.js';
import { CNNS } from './model.js';
import { RESOLVED } from './trainer.js';

const models = `${CNNS.join(', ')}, ${LLMS.map((e) => e.id).join(', ')}; torchvision models: ${VISION_MODELS.filter((v) => !(CNNS as readonly string[]).includes(v)).join(', ')}`;

const MODEL = `<model>: a catalog name (${models})
         or the path of a Hugging Face config.json (llama, qwen2, mistral, gpt2)
         or a Hugging Face Hub repository, <org>/<name> (config.json and the safetensors headers
         are read, never the weights; HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE; cached under
         $XDG_CACHE_HOME/vram-ts/hub, else ~/.cache/vram-ts/hub)`;

/** A flag's help for one command, or undefined when that command's help does not list it. */
function helpOf(flag: Flag, command: Command): HelpLine | undefined {
  const help = specOf(flag).help;
  return help === undefined || typeof help === 'string' || Array.isArray(help)
    ? (help as HelpLine | undefined)
    : ((help as Partial<Record<string, HelpLine>>)[command] ?? (help as Partial<Record<string, HelpLine>>).default);
}

/** A flag's help text for one command on one line, or '' (explain-config's meanings). */
export function helpText(flag: string, command: Command): string {
  const line = FLAGS[flag as Flag] === undefined ? undefined : helpOf(flag as Flag, command);
  return (typeof line === 'string' ? line : (line?.[1] ?? '')).replace(/\n/g, ' ');
}

/** A flag's help line for one command, or undefined when that command's help does not list it. */
function helpLine(flag: Flag, command: Command): string | undefined {
  const line = helpOf(flag, command);
  if (line === undefined) return undefined;
  const spec = specOf(flag);
  const [meta, text] = typeof line === 'string' ? [spec.meta, line] : line;
  return optionLine(spec.label ?? `--${flag}${meta !== undefined ? ` ${meta}` : ''}`, text);
}

/** One option line: the label, then the text from column 26 (a label as wide as the column keeps two spaces). */
function optionLine(label: string, text: string): string {
  return `  ${label.length < 23 ? label.padEnd(23) : `${label}  `}${text.replace(/\n/g, `\n${' '.repeat(25)}`)}`;
}

/** The value's name in help by the field flag's kind. */
const FIELD_META = { boolean: 'true|false', number: 'N', string: 'S', list: 'A,B', any: 'V' } as const;

/** What each modelled field does to the step, for its help line (`grpo.` / `sft.` where the trainers differ). */
export const FIELD_NOTES: Readonly<Record<string, string>> = {
  per_device_train_batch_size: 'sequences per micro-batch',
  gradient_accumulation_steps: 'micro-batches per optimizer step',
  gradient_checkpointing: 'every decoder layer one non-reentrant checkpoint',
  gradient_checkpointing_kwargs: 'only {"use_reentrant": false} is modelled',
  bf16: 'autocast to bfloat16 over float32 weights',
  optim: 'adamw_torch_fused, adamw_torch or sgd',
  max_grad_norm: 'clip_grad_norm_ when above 0',
  'grpo.loss_type': 'grpo, bnpo, dr_grpo, dapo or luspo',
  'sft.loss_type': 'chunked_nll (no full logits) or nll',
  max_length: 'the most tokens per example',
  num_generations: 'completions per prompt',
  max_completion_length: 'tokens generated per completion',
  beta: 'the KL coefficient: above 0 a reference model is loaded',
  temperature: 'sampling temperature',
  num_iterations: 'optimization passes over each generation',
  steps_per_generation: 'micro-batches per generation',
  generation_batch_size: 'completions generated at once',
};

/** The option lines of the fields a trainer models, with the defaults the library resolves (resolveTrainerArgs with no fields). */
function modelledFields(trainer: TrainerKind): string {
  const resolved = resolveTrainerArgs(trainer, {});
  const fields = trainerFields(trainer);
  return fields.modelled
    .filter((field) => FIELD_FLAGS[kebab(field)] !== undefined)
    .map((field) => {
      const spec = FIELD_FLAGS[kebab(field)]!;
      const value = RESOLVED[field]?.(resolved) ?? fields.defaults[field];
      const note = FIELD_NOTES[`${trainer}.${field}`] ?? FIELD_NOTES[field];
      const shown = `(default ${JSON.stringify(value).replace(/^"|"$/g, '')})`;
      return optionLine(`--${kebab(field)} ${FIELD_META[spec.kind]}`, note !== undefined ? `${note} ${shown}` : shown);
    })
    .join('\n');
}

/** Groups of flags that several helps list together, in this order. */
const TRAINING: readonly Flag[] = ['optimizer', 'precision', 'checkpointing'];
/** The many-GPU flags: the data-parallel size, then the layout of the ranks. */
export const PARALLEL: readonly Flag[] = [
  'gpus',
  'engine',
  'distributed-optimizer',
  'zero',
  'offload',
  'tp',
  'sp',
  'cp',
  'ep',
  'pp',
  'stage',
  'schedule',
  'virtual-stages',
  'no-return-outputs',
  'micro-batches',
  'fsdp',
  'deepspeed',
  'accelerate-config',
  'rank',
];
const LLM: readonly Flag[] = ['lora-rank', 'qlora', 'attention', 'transformers', 'dtype', 'no-cache', 'revision'];
const RUNTIME: readonly Flag[] = ['device', 'framework'];

/**
 * The option lines of a command's help: the flags in `order` first, then any other flag the
 * command takes that has a help line (a new flag shows up without an edit here), then -h.
 */
function options(command: Command, order: readonly Flag[]): string {
  const stray = order.find((flag) => !SCOPE[flag].includes(command));
  if (stray !== undefined) throw new Error(`help of ${command} lists --${stray}, which it does not take`);
  const rest = (Object.keys(FLAGS) as Flag[]).filter((flag) => flag !== 'help' && !order.includes(flag) && SCOPE[flag].includes(command));
  return [...order, ...rest, 'help' as const]
    .map((flag) => helpLine(flag, command))
    .filter((line) => line !== undefined)
    .join('\n');
}

const EXIT = `Exit codes
  0  done (with --check: it fits)
  1  it does not fit the --gpu (only with --check)
  2  bad usage or input: one line on stderr, nothing on stdout
Set VRAM_TS_DEBUG to see the stack trace of an internal error.`;

export const HELP = `vram-ts — how much GPU memory a model needs to train or run, and where it goes.

Usage
  vram-ts <model> [options]             estimate one configuration
  vram-ts fit <model> --gpu <gpu> [--solve batch|seq|resolution] [options]
                                        the largest batch / context / resolution that fits
  vram-ts plan <model> --gpu <gpu> --gpus N --global-batch G [options]
                                        which data-parallel layouts fit, and the fewest GPUs
  vram-ts compat zero-paper|deepspeed|megatron <model> [--gpus N]
                                        a published formula next to vram-ts's rank, and why
                                        they differ
  vram-ts grpo <model> [--prompt P] [--config grpo_config.yaml] [--<GRPOConfig field> V …]
                                        a GRPOTrainer step: generation, log-probabilities, training
  vram-ts sft <model> [--sequence S] [--config sft_config.yaml] [--<SFTConfig field> V …]
                                        an SFTTrainer step: forward and loss, backward, optimizer
  vram-ts vllm <model> --gpu <gpu> [--gpu-memory-utilization F] [--max-model-len N] [vLLM flags]
                                        vLLM's start-up: its budget, weights, profiling peak,
                                        KV pool (tokens) and concurrency; SGLang's pool beside it
  vram-ts rl <model> --framework trl|verl|openrlhf --gpu <gpu> [options]
                                        an RL step with its rollout engine on the GPU, phase by
                                        phase, as the framework places them
  vram-ts korthikanti [--seq S] [--batch B] [--hidden H] [--heads A]
                                        Korthikanti et al.'s per-layer activations next to
                                        vram-ts's op-level count for a GPT-2 layer of that shape
  vram-ts explain-config FILE           what each key of a DeepSpeed, Trainer or accelerate config
                                        means for memory
  vram-ts --safetensors FILE            parameters and dtypes from a checkpoint's header
  vram-ts fit|plan|compat|grpo|sft|korthikanti|explain-config --help
                                        the options of each command

${MODEL}

Options of an estimate (an option that does not apply is an error)
${options('estimate', ['input', 'batch', 'seq', 'classes', 'train', ...TRAINING, ...PARALLEL, 'training-args', 'all-ranks', ...LLM, ...RUNTIME, 'gpu', 'verdict', 'check', 'format', 'svg', 'chart'])}

${EXIT}

Examples
  vram-ts mobilenet_v3_small --input 3x4000x2672 --classes 3 --train
  vram-ts qwen2.5-0.5b --seq 4096 --batch 8 --precision bf16 --gpu A800-80GB
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --train --solve seq --precision bf16
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --solve seq --precision bf16 --gpus 8 --fsdp
  vram-ts grpo qwen2.5-0.5b --num-generations 8 --max-completion-length 4096 --prompt 256 --gpu A800-80GB
  vram-ts sft qwen2.5-0.5b --config sft_config.yaml --per-device-train-batch-size 4 --max-length 2048
  vram-ts ./config.json --infer --seq 8192 --format json
  vram-ts qwen2.5-0.5b --seq 4096 --deepspeed ds_config.json --gpus 8 --batch 4 --precision bf16
  vram-ts --safetensors model.safetensors
`;

export const FIT_HELP = `vram-ts fit <model> --gpu <gpu> [options]

Prints one number: the largest batch, sequence length or image side whose step fits the GPU
(0 when not even 1 fits).

${MODEL}

Options
${options('fit', ['gpu', 'verdict', 'solve', 'advise', 'check', 'input', 'batch', 'seq', 'classes', 'train', ...TRAINING, ...PARALLEL, ...LLM, ...RUNTIME])}

${EXIT}

Examples
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --train --solve seq --precision bf16
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --solve seq --precision bf16 --gpus 8 --fsdp
  vram-ts fit mobilenet_v3_small --input 3x224x224 --gpu RTX-4090 --solve resolution
`;

export const PLAN_HELP = `vram-ts plan <model> --gpu <gpu> --gpus N --global-batch G [options]

Which data-parallel layouts of a training job fit the GPU, and which needs the fewest GPUs. For
every number of GPUs from 1 to N that divides G, every engine (FSDP2, ZeroRedundancyOptimizer, DDP,
DeepSpeed ZeRO 1-3) and, with --checkpointing, with and without activation checkpointing: the
largest micro-batch dividing each rank's share whose step fits on every rank (each rank's exact
peak, gradient accumulation included). --pp, --tp and --cp N also try pipeline, tensor- and
context-parallel sizes up to N; --fewest stops at the first GPU count where a layout fits.

${MODEL}

Options
${options('plan', ['gpu', 'gpus', 'global-batch', 'fewest', 'engine', 'zero', 'pp', 'tp', 'cp', 'checkpointing', 'seq', 'input', 'classes', 'optimizer', 'precision', 'check', 'format', ...LLM, ...RUNTIME])}

${EXIT}

Examples
  vram-ts plan qwen2.5-0.5b --gpu A800-80GB --gpus 8 --global-batch 16 --seq 32768 --precision bf16 --checkpointing
`;

export const COMPAT_HELP = `vram-ts compat zero-paper|deepspeed|megatron <model> [options]

A published closed form, evaluated exactly as its authors' code does, next to vram-ts's
simulation of one rank of the same job (Adam, bf16), and why the two differ:
  zero-paper   the ZeRO paper's model states per GPU for DP, P_os, P_os+g, P_os+g+p
  deepspeed    DeepSpeed's estimate_zero2/3_model_states_mem_needs, every offload option
  megatron     Megatron-LM's theoretical memory (weights and optimizer, activations)
<model> is a decoder LLM: ${LLMS.map((e) => e.id).join(', ')} or a config.json path.

Options
${options('compat', ['gpus', 'nodes', 'tp', 'pp', 'seq', 'batch', 'attention', 'transformers'])}

${EXIT}

Examples
  vram-ts compat zero-paper qwen2.5-0.5b --gpus 64
  vram-ts compat deepspeed qwen2.5-0.5b --gpus 8 --nodes 2
  vram-ts compat megatron llama-3-8b --gpus 8 --tp 2 --seq 4096
`;

/** The part of grpo's and sft's help about their config class's fields. */
function fieldsText(trainer: 'grpo' | 'sft', file: string): string {
  const { className } = trainerFields(trainer);
  return `Every field of ${className} (TRL's dataclass, the release of --trl) is a flag: --<field> with _
written -, e.g. --per-device-train-batch-size 8; booleans also as --<field> and --no-<field>;
null or none is Python's None (for a string field only where its default is None); lists are
A,B or JSON, mappings JSON. --config ${file} gives them as a file (JSON
or YAML, one mapping); flags override it. A field vram-ts does not model is accepted only at its
default (logging, saving and schedule fields at any value); an unknown field is an error.

Fields that change the estimate (with the defaults the trainer resolves)
${modelledFields(trainer)}`;
}

const TRAINER_OPTIONS: readonly Flag[] = [
  'config',
  'peft-config',
  'lora-r',
  'lora-alpha',
  'lora-dropout',
  'lora-target-modules',
  'trl',
  'device',
  'attention',
  'transformers',
  'dtype',
  'revision',
  'gpu',
  'check',
  'format',
];

export const GRPO_HELP = `vram-ts grpo <model> [options]

One step of TRL's GRPOTrainer on one GPU without vLLM, phase by phase: model.generate (the
prefill and the last decode step with its KV cache), the old-policy and reference
log-probabilities when they are computed, then the loss forward, backward, clipping, the
optimizer and zero_grad.
<model> is an LLM: ${LLMS.map((e) => e.id).join(', ')}, a config.json path or a Hub id.

Options
${options('grpo', ['prompt', ...TRAINER_OPTIONS])}

${fieldsText('grpo', 'grpo_config.yaml')}

${EXIT}

Examples
  vram-ts grpo qwen2.5-0.5b --num-generations 8 --max-completion-length 4096 --prompt 256 --gpu A800-80GB
  vram-ts grpo qwen2.5-0.5b --config grpo_config.yaml --beta 0.04 --lora-r 16 --lora-target-modules all-linear
`;

export const SFT_HELP = `vram-ts sft <model> [options]

One step of TRL's SFTTrainer on one GPU, phase by phase: compute_loss (the forward and the loss:
chunked_nll never holds the full logits), backward, clipping, the optimizer and zero_grad.
<model> is an LLM: ${LLMS.map((e) => e.id).join(', ')}, a config.json path or a Hub id.

Options
${options('sft', ['sequence', ...TRAINER_OPTIONS])}

${fieldsText('sft', 'sft_config.yaml')}

${EXIT}

Examples
  vram-ts sft qwen2.5-0.5b --per-device-train-batch-size 4 --max-length 2048 --gpu RTX-4090
  vram-ts sft qwen2.5-0.5b --config sft_config.yaml --no-gradient-checkpointing --loss-type nll
`;

export const EXPLAIN_CONFIG_HELP = `vram-ts explain-config FILE [options]

What each key of a tool's config file means for GPU memory, read as the tool reads it: a
DeepSpeed ds_config.json, transformers' TrainingArguments (JSON or YAML), an accelerate config,
a TRL config (trl sft|grpo --config; --trainer when its keys do not tell which) or vLLM's
config.yaml (vllm serve --config), its kind told by its keys. Every value the estimate uses,
where it came from (the file, the tool's default, an "auto" filled as the Hugging Face Trainer
fills it from the flags, derived), what it decides, and the keys accepted that move no memory.
An unknown key, or one that moves memory in a way vram-ts does not model, is an error naming it.

Options
${options('explain-config', ['batch', 'micro-batches', 'precision', 'gpus', 'hidden', 'layers'])}

Exit codes
  0  done
  2  bad usage or input: one line on stderr, nothing on stdout
`;

export const KORTHIKANTI_HELP = `vram-ts korthikanti [options]

Korthikanti et al. 2022's activations per transformer layer, sbh(34 + 5as/h) bytes, next to
vram-ts's op-by-op count for one Hugging Face GPT-2 layer of that shape (16-bit, dropout 0.1,
eager attention).

Options
${options('korthikanti', ['seq', 'batch', 'hidden', 'heads'])}

Exit codes
  0  done
  2  bad usage or input: one line on stderr, nothing on stdout
`;

const ENGINE: readonly Flag[] = [
  'gpu-memory-utilization',
  'max-model-len',
  'max-num-seqs',
  'max-num-batched-tokens',
  'tensor-parallel-size',
  'kv-cache-dtype',
  'block-size',
  'kv-cache-memory',
  'enforce-eager',
  'cpu-offload-gb',
  'vllm-release',
  'non-torch-memory',
  'cuda-graph-memory',
];

export const VLLM_HELP = `vram-ts vllm <model> --gpu <gpu> [options]

vLLM's engine at start-up on one GPU (V1, the release of --vllm-release): it takes
ceil(total × --gpu-memory-utilization) of the GPU's TOTAL memory whatever the model, loads the
weights (sharded as its parallel layers shard them), runs its profiling forward of
--max-num-batched-tokens tokens and the sampler, and gives the rest to the KV cache: its tokens,
blocks and the concurrency at --max-model-len, whether it starts (vLLM's own error when not) and
the log lines it would print. Non-torch memory and v0.21's CUDA-graph estimate are measured by vLLM
at start-up: give them (--non-torch-memory, --cuda-graph-memory) or they are not counted, and said so.
<model> is an LLM: ${LLMS.map((e) => e.id).join(', ')}, a config.json path or a Hub id.

Options
${options('vllm', ['gpu', ...ENGINE, 'entrypoint', 'weights-memory', 'activation-memory', 'mem-fraction-static', 'dtype', 'transformers', 'revision', 'check', 'format'])}

${EXIT.replace('(with --check: it fits)', '(with --check: it starts)').replace('it does not fit the --gpu (only with --check)', 'it does not start (only with --check)')}

Examples
  vram-ts vllm qwen2.5-0.5b --gpu H100-80GB --gpu-memory-utilization 0.9 --max-model-len 32768
  vram-ts vllm llama-3-8b --gpu 79.15GiB --tensor-parallel-size 2 --non-torch-memory 0.3GiB
`;

export const RL_HELP = `vram-ts rl <model> --framework trl|verl|openrlhf --gpu <gpu> [options]

One RL step on one GPU of the trainer, phase by phase (weight sync, rollout, log-probabilities,
update), with what the rollout engine (vLLM, the framework's defaults over vLLM's) holds in each
phase under the framework's sleep / free / offload rules: the peak and the phase that sets it,
whether it fits, the GPUs the job needs.
  trl        TRL's GRPOTrainer with use_vllm (colocate: the engine in the trainer's process);
             the trainer is GRPOConfig's fields (as vram-ts grpo takes them) and --prompt
  verl       verl's hybrid engine (util 0.5, sleep level 2 after rollout, TP 2 by default);
             the actor's update is --batch × --seq with --optimizer/--precision/--checkpointing
             (--gpus N --engine fsdp2 for its shards), log-probabilities --log-prob-batch at a time
  openrlhf   OpenRLHF (util 0.95; engines on GPUs of their own unless --colocate; --engines N)
<model> is an LLM: ${LLMS.map((e) => e.id).join(', ')}, a config.json path or a Hub id.

Options
${options('rl', ['framework', 'gpu', 'gpus', 'sleep', 'colocate', 'engines', ...ENGINE, 'prompt', 'config', 'batch', 'seq', 'log-prob-batch', 'optimizer', 'precision', 'checkpointing', 'engine', 'param-offload', 'optimizer-offload', 'dtype', 'advise', 'check', 'format'])}

GRPOConfig's fields are flags with --framework trl (see vram-ts grpo --help).

${EXIT}

Examples
  vram-ts rl qwen2.5-0.5b --framework trl --gpu H100-80GB --per-device-train-batch-size 8 --max-completion-length 4096 --prompt 256
  vram-ts rl qwen2.5-0.5b --framework verl --gpu H100-80GB --gpus 2 --batch 1 --seq 4352 --log-prob-batch 8 --checkpointing
  vram-ts rl qwen2.5-0.5b --framework trl --gpu 79.22GiB --num-generations 8 --max-completion-length 4096 --prompt 256 --advise
`;
