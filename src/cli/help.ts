/**
 * The command's help texts. Every default shown is read from the constants the command uses
 * (or the library's own), and test/cli checks that passing a shown default changes nothing.
 */
import { DEFAULT_TRANSFORMERS, GPUS, LLMS, TRANSFORMERS_RANGES, VISION_MODELS } from '../index.js';

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
  grpo: { group: 8, prompt: 512, completion: 1024, prompts: 1 },
  korthikanti: { seq: 2048, batch: 1, hidden: 1024, heads: 16 },
} as const;

export const OPTIMIZERS = ['sgd', 'sgd_momentum', 'adam', 'adamw', 'adafactor', 'lion', 'adam8bit'] as const;
export const PRECISIONS = ['fp32', 'bf16', 'fp16', 'amp-bf16', 'amp-fp16'] as const;
export const ATTENTIONS = ['eager', 'sdpa', 'flash'] as const;
export const DTYPES = ['float32', 'bfloat16', 'float16', 'float64'] as const;
export const DEVICES = ['cuda', 'cpu'] as const;
export const FRAMEWORKS = ['torch-2', 'torch-1.13'] as const;
export const FORMATS = ['table', 'json', 'markdown', 'torchsummary', 'torchinfo', 'explain', 'svg'] as const;
export const CHARTS = ['timeline', 'breakdown'] as const;
export const GRPO_FORMATS = ['table', 'json'] as const;
export const PLAN_FORMATS = ['table', 'json'] as const;
export const SOLVES = ['batch', 'seq', 'resolution'] as const;
export const CNNS = ['mobilenet_v3_small', 'mobilenet_v3_large'] as const;

const releases = TRANSFORMERS_RANGES.map(([a, b]) => `${a} – ${b}`).join(' and ');
const gpus = GPUS.map((g) => g.name).join(', ');
const models = `${CNNS.join(', ')}, ${LLMS.map((e) => e.id).join(', ')}; torchvision models: ${VISION_MODELS.filter((v) => !(CNNS as readonly string[]).includes(v)).join(', ')}`;
const g = DEFAULTS.grpo;
const k = DEFAULTS.korthikanti;

const MODEL = `<model>: a catalog name (${models})
         or the path of a Hugging Face config.json (llama, qwen2, mistral, gpt2)
         or a Hugging Face Hub repository, <org>/<name> (config.json and the safetensors headers
         are read, never the weights; HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE; cached under
         $XDG_CACHE_HOME/vram-ts/hub, else ~/.cache/vram-ts/hub)`;

const LLM_OPTIONS = `  --lora-rank R          LoRA adapters of rank R on PEFT's default targets
                         (q_proj, v_proj; GPT-2: c_attn); LLMs only
  --qlora                with --lora-rank: a 4-bit (NF4) base, as bitsandbytes loads it
  --attention A          ${ATTENTIONS.join(', ')} (LLMs; default: what the transformers release picks)
  --transformers X.Y.Z   the Hugging Face transformers release whose code to follow (LLMs; default ${DEFAULT_TRANSFORMERS});
                         ${releases} were read
  --dtype D              parameter dtype of an LLM: ${DTYPES.join(', ')}
                         (default: the config's torch_dtype); not with --precision, which sets it too
  --no-cache             forward with use_cache=False (LLMs; default: the config's use_cache, true)
  --revision R           branch, tag or commit of a Hub model (<org>/<name>); main when left out`;

const TRAINING_OPTIONS = `  --optimizer NAME       ${OPTIMIZERS.join(', ')} (default ${DEFAULTS.optimizer}); training only
  --precision P          ${PRECISIONS.join(', ')} (default: none, the weights
                         keep the model's dtype: float32 for the CNNs, the config's torch_dtype for LLMs)
  --checkpointing        activation checkpointing of every block (decoder layers, CNN feature blocks);
                         training only`;

export const ENGINES = ['fsdp2', 'ddp', 'zero-redundancy', 'deepspeed', 'megatron'] as const;
export const SCHEDULES = ['1f1b', 'gpipe', 'interleaved-1f1b'] as const;
export const OFFLOADS = ['optimizer', 'parameters', 'all'] as const;

const PARALLEL_OPTIONS = `  --gpus N               one rank of N data-parallel GPUs (training; default 1: one GPU)
  --engine E             ${ENGINES.join(', ')} (with --gpus; default ${'fsdp2'}): FSDP2 shards parameters,
                         gradients and optimizer state; DDP keeps them whole plus its gradient buckets;
                         zero-redundancy is torch's ZeroRedundancyOptimizer over DDP; deepspeed
                         is DeepSpeed ZeRO (needs --zero); megatron is Megatron-core's DDP (its
                         gradient buffer, Float16Optimizer's fp32 copy)
  --distributed-optimizer  with --engine megatron: Megatron's distributed optimizer (fp32 master
                         and Adam state sharded, parameters in a padded buffer)
  --zero 1|2|3           DeepSpeed ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters
                         partitioned (implies --engine deepspeed; DeepSpeed's defaults for its buckets)
  --offload WHAT         ${OFFLOADS.join(', ')}: host memory instead of the GPU (DeepSpeed
                         offload_optimizer / offload_param at ZeRO-3; FSDP2's CPUOffloadPolicy is all)
  --tp N                 tensor parallelism (PyTorch DTensor's plan on Llama/Qwen2/Mistral: heads,
                         MLP and vocabulary split N ways); --gpus is tp × pp × data-parallel ranks
  --sp                   sequence parallelism with --tp (norms and residuals hold S/N; needs a
                         concrete --seq, not fit --solve seq)
  --cp N                 context parallelism (PyTorch's context_parallel, ring attention over sdpa;
                         Llama/Qwen2/Mistral): activations hold S/N positions; --gpus is
                         tp × pp × cp × data-parallel ranks, the engine spanning dp × cp
  --ep N                 expert parallelism of a MoE decoder (transformers 5.x's ep_plan: each rank
                         holds 1/N of the routed experts, every rank runs every token)
  --pp N                 pipeline stages (torch.distributed.pipelining): --gpus is then pp × the
                         data-parallel ranks of each stage; needs --micro-batches >= N for 1f1b
  --stage S              which pipeline stage to estimate (default 0)
  --schedule S           ${SCHEDULES.join(', ')} (default 1f1b)
  --virtual-stages V     stages per pipeline rank with interleaved-1f1b (default 2)
  --no-return-outputs    schedule.step(return_outputs=False): the last stage keeps no outputs
  --micro-batches M      micro-batches per optimizer step (gradient accumulation; a pipeline's
                         micro-batches), each of --batch samples (default 1)
  --fsdp                 the same as --engine fsdp2
  --rank R               which rank to estimate (default 0: FSDP2's and ZeRO's ranks differ)`;

const RUNTIME_OPTIONS = `  --device D             ${DEVICES.join(' or ')} (default ${DEFAULTS.device})
  --framework F          ${FRAMEWORKS.join(' or ')} (default ${DEFAULTS.framework}): autograd rules where versions differ`;

const gpu = (what: string) => `  --gpu NAME|SIZE        ${what}: a size (24GB, 80GiB; GB is read as GiB) or
                         ${gpus}`;

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
  vram-ts grpo <model> [--group G] [--prompt P] [--completion L] [options]
                                        a GRPO step: generation, reference scoring, training
  vram-ts korthikanti [--seq S] [--batch B] [--hidden H] [--heads A]
                                        Korthikanti et al.'s per-layer activations next to
                                        vram-ts's op-level count for a GPT-2 layer of that shape
  vram-ts --safetensors FILE            parameters and dtypes from a checkpoint's header
  vram-ts fit|plan|compat|grpo|korthikanti --help
                                        the options of each command

${MODEL}

Options of an estimate (an option that does not apply is an error)
  --input CxHxW          image size for CNNs (default ${DEFAULTS.input})
  --batch N              batch size (default ${DEFAULTS.batch})
  --seq N                sequence length for LLMs (default ${DEFAULTS.seq})
  --classes N            classifier outputs for the CNN catalog (default ${DEFAULTS.classes})
  --train | --infer      a training step (the default) or an inference forward
${TRAINING_OPTIONS}
${PARALLEL_OPTIONS}
  --all-ranks            also every rank's peak, parameters, gradients and optimizer state
${LLM_OPTIONS}
${RUNTIME_OPTIONS}
${gpu('says whether it fits (default: none)')}
  --check                with --gpu: exit 1 when it does not fit
  --format F             ${FORMATS.join(', ')} (default ${DEFAULTS.format});
                         json carries the fit verdict and the KV cache as fields
  --svg FILE             write a chart (SVG) of the step to FILE (with --gpu: the card's memory drawn)
  --chart C              ${CHARTS.join(' or ')} (default timeline): which chart --svg writes
  -h, --help             this help

${EXIT}

Examples
  vram-ts mobilenet_v3_small --input 3x4000x2672 --classes 3 --train
  vram-ts qwen2.5-0.5b --seq 4096 --batch 8 --precision bf16 --gpu A800-80GB
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --train --solve seq --precision bf16
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --solve seq --precision bf16 --gpus 8 --fsdp
  vram-ts grpo qwen2.5-0.5b --group 8 --prompt 512 --completion 4096 --precision bf16 --attention sdpa --micro-batch 1
  vram-ts ./config.json --infer --seq 8192 --format json
  vram-ts --safetensors model.safetensors
`;

export const FIT_HELP = `vram-ts fit <model> --gpu <gpu> [options]

Prints one number: the largest batch, sequence length or image side whose step fits the GPU
(0 when not even 1 fits).

${MODEL}

Options
${gpu('the GPU to fit (required)')}
  --solve WHAT           ${SOLVES.join(', ')} (default ${DEFAULTS.solve}); seq needs an LLM, resolution a CNN
  --check                exit 1 when nothing fits (the number is 0)
  --input CxHxW          image size for CNNs (default ${DEFAULTS.input}); with --solve resolution
                         only C is used and H = W is solved for
  --batch N              batch size (default ${DEFAULTS.batch}); not with --solve batch
  --seq N                sequence length for LLMs (default ${DEFAULTS.seq}); not with --solve seq
  --classes N            classifier outputs for the CNN catalog (default ${DEFAULTS.classes})
  --train | --infer      a training step (the default) or an inference forward
${TRAINING_OPTIONS}
${PARALLEL_OPTIONS}
${LLM_OPTIONS}
${RUNTIME_OPTIONS}
  -h, --help             this help

${EXIT}

Examples
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --train --solve seq --precision bf16
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --solve seq --precision bf16 --gpus 8 --fsdp
  vram-ts fit mobilenet_v3_small --input 3x224x224 --gpu RTX-4090 --solve resolution
`;

export const PLAN_HELP = `vram-ts plan <model> --gpu <gpu> --gpus N --global-batch G [options]

Which data-parallel layouts of a training job fit the GPU, and which needs the fewest GPUs. For
every number of GPUs from 1 to N that divides G, every engine (FSDP2, ZeroRedundancyOptimizer, DDP)
and, with --checkpointing, with and without activation checkpointing: the largest micro-batch
dividing each rank's share whose step fits on every rank (each rank's exact peak, gradient
accumulation included). Tensor and pipeline parallelism are not searched (not modelled yet).

${MODEL}

Options
${gpu('the GPU of every rank (required)')}
  --gpus N               the most GPUs to use (required)
  --global-batch G       samples per optimizer step over all GPUs (required)
  --engine E             try only this engine: ${ENGINES.join(', ')} (deepspeed: ZeRO 1, 2, 3)
  --zero 1|2|3           try only this DeepSpeed ZeRO stage (implies --engine deepspeed)
  --pp N                 also try pipelines of 2 .. N stages (1F1B; DDP across pipelines)
  --tp N                 also try tensor parallelism of 2 .. N ranks (decoders; replicas under FSDP2)
  --cp N                 also try context parallelism of 2 .. N ranks (ring attention, decoders;
                         the engine over dp × cp ranks)
  --checkpointing        also try activation checkpointing of every block
  --seq N                sequence length for LLMs (default ${DEFAULTS.seq})
  --input CxHxW          image size for CNNs (default ${DEFAULTS.input})
  --classes N            classifier outputs for the CNN catalog (default ${DEFAULTS.classes})
  --optimizer NAME       ${OPTIMIZERS.join(', ')} (default ${DEFAULTS.optimizer})
  --precision P          ${PRECISIONS.join(', ')} (default: the model's dtype)
  --check                exit 1 when no layout fits
  --format F             ${PLAN_FORMATS.join(', ')} (default ${DEFAULTS.format})
${LLM_OPTIONS}
${RUNTIME_OPTIONS}
  -h, --help             this help

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
  --gpus N               GPUs (per node for deepspeed; default 8)
  --nodes N              nodes (deepspeed; default 1)
  --tp N                 tensor-parallel size (megatron; default 1)
  --pp N                 pipeline-parallel size (megatron; default 1)
  --seq N                sequence length of vram-ts's step and Megatron's activations (default ${DEFAULTS.seq})
  --batch N              micro-batch size (default ${DEFAULTS.batch})
  --attention A          ${ATTENTIONS.join(', ')} (default: what the transformers release picks)
  --transformers X.Y.Z   the Hugging Face transformers release whose code to follow (default ${DEFAULT_TRANSFORMERS})
  -h, --help             this help

${EXIT}

Examples
  vram-ts compat zero-paper qwen2.5-0.5b --gpus 64
  vram-ts compat deepspeed qwen2.5-0.5b --gpus 8 --nodes 2
  vram-ts compat megatron llama-3-8b --gpus 8 --tp 2 --seq 4096
`;

export const GRPO_HELP = `vram-ts grpo <model> [options]

A GRPO step on one GPU (TRL's GRPOTrainer without vLLM): generate --group completions per
prompt with a KV cache, score them with a frozen reference model, then train on them.
<model> is an LLM: ${LLMS.map((e) => e.id).join(', ')} or a config.json path.

Options
  --group G              completions per prompt (default ${g.group})
  --prompt P             prompt tokens (default ${g.prompt})
  --completion L         completion tokens (default ${g.completion})
  --prompts N            prompts per step (default ${g.prompts})
  --micro-batch M        sequences per training and reference forward, at most prompts × group
                         (default: all of them)
${TRAINING_OPTIONS}
${LLM_OPTIONS}
${RUNTIME_OPTIONS}
${gpu('says whether the step fits (default: none)')}
  --check                with --gpu: exit 1 when it does not fit
  --format F             ${GRPO_FORMATS.join(' or ')} (default ${DEFAULTS.format})
  -h, --help             this help

${EXIT}

Example
  vram-ts grpo qwen2.5-0.5b --group 8 --prompt 512 --completion 4096 --precision bf16 --micro-batch 1 --gpu A800-80GB
`;

export const KORTHIKANTI_HELP = `vram-ts korthikanti [options]

Korthikanti et al. 2022's activations per transformer layer, sbh(34 + 5as/h) bytes, next to
vram-ts's op-by-op count for one Hugging Face GPT-2 layer of that shape (16-bit, dropout 0.1,
eager attention).

Options
  --seq S                sequence length s (default ${k.seq})
  --batch B              batch size b (default ${k.batch})
  --hidden H             hidden size h (default ${k.hidden})
  --heads A              attention heads a, a divisor of h (default ${k.heads})
  -h, --help             this help

Exit codes
  0  done
  2  bad usage or input: one line on stderr, nothing on stdout
`;
