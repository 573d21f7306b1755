/**
 * The levers {@link advise} pulls: each one change a user can make to a training step (checkpoint
 * more, split the batch, shorten the context, train adapters, a lighter optimizer, 16-bit weights,
 * a loss head without full logits, offload, shard), when it applies to the job as given and why
 * not otherwise, what it costs, and the job it makes. Every figure comes from {@link fits} on
 * that job: nothing here is a rule of thumb.
 */
import type { FitOptions, FitResult } from './fit.js';
import { fits, maxFitting } from './fit.js';
import { estimateRanks } from './ranks.js';
import { LIMITS } from './limits.js';
import { gpu as gpuByName } from './gpus/catalog.js';
import { deepspeedEngine } from './parallel/engines/deepspeed/index.js';
import { fsdp2Engine } from './parallel/engines/fsdp2.js';
import type { Layer, LmHead, ModelMeta, ModuleLayer } from './nn/types.js';
import type { Precision } from './estimate-types.js';
import { sym } from './sym/ops.js';

/**
 * What a lever costs, from free to what changes the model that trains.
 *
 * @category Estimate and fit
 */
export type LeverCostKind = 'none' | 'throughput' | 'compute' | 'hardware' | 'quality';

/**
 * A lever's cost: its kind (the ranking's order) and what it means in practice.
 *
 * @category Estimate and fit
 */
export interface LeverCost {
  readonly kind: LeverCostKind;
  readonly note: string;
}

/** The ranking's order of cost kinds. */
export const COST_ORDER: readonly LeverCostKind[] = ['none', 'throughput', 'compute', 'hardware', 'quality'];

/** A configuration to estimate: the model (a lever may change its loss head) and the fit options. */
export interface Job {
  readonly model: Layer;
  readonly options: FitOptions;
}

/** A job with its fit figures (`peak` is `estimate(job.model, job.options).bytes.peak`). */
export interface Fitted {
  readonly job: Job;
  readonly fits: boolean;
  readonly peak: number;
  readonly reserved: number;
  readonly needed: number;
  readonly headroom: number;
}

/** What advise knows of the job as given. */
export interface AdviseContext {
  readonly model: Layer;
  readonly options: FitOptions;
  /** GPUs the sharding levers may use. */
  readonly gpus: number;
  readonly baseline: FitResult;
  /** The model's blocks (decoder layers, `features.i`, ResNet's blocks), or why none is known. */
  readonly blocks: { readonly paths: readonly string[]; readonly word: string } | string;
  readonly decoder: ModelMeta | undefined;
}

/** A lever's change of a job, in the user's words. */
export interface Change {
  readonly job: Job;
  readonly description: string;
}

/** One lever. */
export interface LeverDef {
  /** Stable id (`checkpoint-every-block`). */
  readonly id: string;
  /** A combination holds at most one lever of each group. */
  readonly group: string;
  readonly cost: LeverCost;
  /** Why it does not apply to the job as given, or undefined when it does. */
  readonly skip: (ctx: AdviseContext) => string | undefined;
  /** The job with this lever (a fixed change). */
  readonly change?: (ctx: AdviseContext, job: Job) => Change;
  /** A lever that searches (the micro-batch count, the context): the fitted job it finds, or why there is none. */
  readonly find?: (ctx: AdviseContext, job: Job) => { readonly change: Change; readonly fitted: Fitted } | string;
}

/**
 * The fit figures of a job. A data-parallel job a lever made, of more than one rank, is judged on
 * its highest rank ({@link estimateRanks}: the rank with the highest allocated peak, the first of
 * equals), and the job's options then name that rank, so that its figures are those options'.
 */
export function fitJob(ctx: AdviseContext, job: Job): Fitted {
  const plan = job.options.parallel;
  let options = job.options;
  // A plan the job came with is judged as given (its rank, else rank 0), as the baseline is.
  if (plan !== undefined && ctx.options.parallel === undefined && plan.dp * (plan.cp ?? 1) > 1 && plan.rank === undefined) {
    const { gpu: _gpu, runtime: _runtime, env: _env, verdict: _verdict, ...only } = options;
    const ranks = estimateRanks(job.model, { ...only, timeline: false });
    const worst = ranks.reduce((a, b) => ((b.peak as number) > (a.peak as number) ? b : a));
    options = { ...options, parallel: { ...plan, rank: worst.dpRank } };
  }
  const r = fits(job.model, options);
  return { job: { model: job.model, options }, fits: r.fits, peak: r.allocated, reserved: r.reserved, needed: r.needed, headroom: r.headroom };
}

const training = (ctx: AdviseContext) => (ctx.options.mode ?? 'train') === 'train';

/** The input as a concrete batch-first shape, or undefined for tensor specs. */
function shapeOf(options: FitOptions): readonly number[] | undefined {
  const input = options.input as unknown;
  return Array.isArray(input) && input.every((d) => typeof d === 'number') ? (input as number[]) : undefined;
}

/** The model's blocks: a model's repeated decoder layers, the blocks of its `features`, or ResNet's stage blocks. */
export function blocksOf(model: Layer): AdviseContext['blocks'] {
  if (model.kind === 'module' && model.repeated !== undefined) {
    const { prefix, count } = model.repeated;
    if (typeof prefix !== 'string' || !Number.isSafeInteger(count) || count < 1 || count > LIMITS.layers)
      return `the model's repeated blocks are not 1 to ${LIMITS.layers} named layers`;
    return { paths: Array.from({ length: count }, (_, i) => `${prefix}${i}`), word: model.meta?.kind === 'decoder' ? 'decoder layer' : 'block' };
  }
  const top = model.kind === 'seq' ? model.children : model.kind === 'module' && model.body.kind === 'seq' ? model.body.children : [];
  const named = top.map((child, i) => ({ child, name: child.name ?? String(i) }));
  const inner = (entry: (typeof named)[number]) =>
    entry.child.kind === 'seq' ? entry.child.children.map((c, i) => `${entry.name}.${c.name ?? String(i)}`) : [entry.name];
  const features = named.find((e) => e.name === 'features' && e.child.kind === 'seq');
  if (features !== undefined && inner(features).length > 1) return { paths: inner(features), word: 'block of features' };
  const stages = named.filter((e) => /^layer\d+$/.test(e.name));
  if (stages.length > 0) return { paths: stages.flatMap(inner), word: 'residual block' };
  return 'no block structure is known for this model (repeated decoder layers, a features sequence or layerN stages): give checkpoint.modules yourself';
}

const withOptions = (job: Job, options: Partial<FitOptions>, description: string): Change => ({
  job: { model: job.model, options: { ...job.options, ...options } },
  description,
});

/** The parameters' dtype of a job (its precision, dtype, the model's own, else float32). */
function paramDtype(ctx: AdviseContext): string {
  const precision = ctx.options.precision;
  if (precision !== undefined) return precision === 'bf16' ? 'bfloat16' : precision === 'fp16' ? 'float16' : 'float32';
  return ctx.options.dtype ?? (ctx.model.kind === 'module' ? ctx.model.dtype : undefined) ?? 'float32';
}

/** bf16, or fp16 on a catalog GPU without bfloat16 (Volta, Turing). */
function halfPrecision(ctx: AdviseContext): Extract<Precision, 'bf16' | 'fp16'> {
  if (typeof ctx.options.gpu !== 'string') return 'bf16';
  try {
    const family = gpuByName(ctx.options.gpu).family;
    return family === 'volta' || family === 'turing' ? 'fp16' : 'bf16';
  } catch {
    return 'bf16';
  }
}

const checkpointSkip = (ctx: AdviseContext, least: number): string | undefined => {
  if (!training(ctx)) return 'activation checkpointing recomputes for backward: inference keeps no activations for it';
  if (ctx.options.checkpoint !== undefined) return 'the options already set checkpoint';
  if (typeof ctx.blocks === 'string') return ctx.blocks;
  return ctx.blocks.paths.length < least ? `the model has ${ctx.blocks.paths.length} block(s): too few for this plan` : undefined;
};

const blocks = (ctx: AdviseContext) => ctx.blocks as Exclude<AdviseContext['blocks'], string>;

/** The checkpointing levers. */
function checkpointLevers(): LeverDef[] {
  return [
    {
      id: 'checkpoint-every-block',
      group: 'checkpoint',
      cost: { kind: 'compute', note: 'one more forward of every block per step, ~+30% step time' },
      skip: (ctx) => checkpointSkip(ctx, 1),
      change: (ctx, job) => {
        const { paths, word } = blocks(ctx);
        const how = word === 'decoder layer' ? 'gradient_checkpointing=True' : 'torch.utils.checkpoint';
        return withOptions(job, { checkpoint: { modules: paths } }, `${how} (every ${word}: ${paths.length})`);
      },
    },
    {
      id: 'checkpoint-every-2nd-block',
      group: 'checkpoint',
      cost: { kind: 'compute', note: 'one more forward of half the blocks per step, ~+15% step time' },
      skip: (ctx) => checkpointSkip(ctx, 2),
      change: (ctx, job) => {
        const { paths, word } = blocks(ctx);
        const every = paths.filter((_, i) => i % 2 === 0);
        return withOptions(
          job,
          { checkpoint: { modules: every } },
          `checkpoint every 2nd ${word} (${every.length} of ${paths.length}: ${paths[0]}, ${paths[2] ?? '…'}, …)`,
        );
      },
    },
    {
      id: 'checkpoint-selective',
      group: 'checkpoint',
      cost: { kind: 'compute', note: "attention's matmul, softmax and dropout again in backward, a few % step time" },
      skip: (ctx) => {
        if (!training(ctx)) return 'selective recomputation is for backward: inference keeps no activations for it';
        if (ctx.options.checkpoint !== undefined) return 'the options already set checkpoint';
        if (ctx.decoder === undefined)
          return "selective recomputation (Megatron's: the attention core's matmul, softmax, dropout) is for a decoder's attention";
        if (ctx.decoder.attention !== 'eager')
          return `attention runs in one ${ctx.decoder.attention ?? 'fused'} kernel, which keeps no score matrix: recomputing the attention core saves nothing`;
        return undefined;
      },
      change: (_ctx, job) =>
        withOptions(
          job,
          { checkpoint: { selective: ['matmul', 'softmax', 'dropout'] } },
          "selective recomputation of the attention core (Megatron's recompute_granularity='selective')",
        ),
    },
  ];
}

/** The divisors m > 1 of `batch` (ascending) with micro-batches·m within the limit. */
function splits(batch: number, microBatches: number): number[] {
  const most = Math.min(batch, Math.floor(LIMITS.microBatches / microBatches));
  const out: number[] = [];
  for (let m = 2; m <= most; m += 1) if (batch % m === 0) out.push(m);
  return out;
}

/** The batch split into m micro-batches of accumulation: the smallest m that fits (a binary search over the divisors). */
function microBatchLever(): LeverDef {
  const split = (job: Job, m: number): Change => {
    const shape = shapeOf(job.options)!;
    const before = job.options.microBatches ?? 1;
    const after = before * m;
    return withOptions(
      job,
      { input: [shape[0]! / m, ...shape.slice(1)], microBatches: after },
      `per-device batch ${shape[0]} → ${shape[0]! / m} with gradient_accumulation_steps=${after}${before > 1 ? ` (was ${before})` : ''}: the same ${shape[0]! * before} samples per step`,
    );
  };
  return {
    id: 'micro-batches',
    group: 'search',
    cost: { kind: 'throughput', note: 'smaller passes one after another: the same samples per step, lower GPU utilisation' },
    skip: (ctx) => {
      if (!training(ctx)) return 'gradient accumulation is for training: run smaller batches one after another';
      const shape = shapeOf(ctx.options);
      if (shape === undefined) return 'the input is tensor specs: split the batch yourself';
      if ((ctx.options.parallel?.pp ?? 1) > 1) return "a pipeline's micro-batches are its schedule's: give parallel.pp's micro-batches yourself";
      if (splits(shape[0]!, ctx.options.microBatches ?? 1).length === 0) return `batch ${shape[0]} has no divisor to split by`;
      return undefined;
    },
    find: (ctx, job) => {
      const ms = splits(shapeOf(job.options)![0]!, job.options.microBatches ?? 1);
      if (ms.length === 0) return 'no divisor of the batch to split by';
      const at = new Map<number, Fitted>();
      const tryAt = (i: number) => {
        const known = at.get(i);
        if (known !== undefined) return known;
        const fitted = fitJob(ctx, split(job, ms[i]!).job);
        at.set(i, fitted);
        return fitted;
      };
      let bad = -1;
      let good = ms.length - 1;
      if (tryAt(good).fits) {
        // The smallest m that fits: memory falls as the micro-batch shrinks.
        while (good - bad > 1) {
          const mid = (bad + good) >> 1;
          if (tryAt(mid).fits) good = mid;
          else bad = mid;
        }
      }
      return { change: split(job, ms[good]!), fitted: tryAt(good) };
    },
  };
}

/** The longest context that fits (maxFitting on a symbolic sequence). */
function contextLever(): LeverDef {
  return {
    id: 'shorter-context',
    group: 'search',
    cost: { kind: 'quality', note: 'the model sees fewer tokens of each example' },
    skip: (ctx) => {
      if (ctx.decoder === undefined) return 'a shorter context is for a causal LM (a decoder from the catalog or fromHFConfig)';
      const shape = shapeOf(ctx.options);
      if (shape === undefined || shape.length !== 2) return 'the input is not [batch, seq] token ids';
      if ((ctx.options.parallel?.cp ?? 1) > 1) return "under context parallelism the sequence is the ranks' split: give it yourself";
      if (ctx.baseline.fits) return 'the context as given fits already';
      return undefined;
    },
    find: (ctx, job) => {
      const shape = shapeOf(job.options)!;
      const solved = maxFitting(job.model, 'S', { ...job.options, input: [shape[0]!, sym('S')] });
      if (solved < 1) return 'not even one token fits: the weights and states alone pass the GPU';
      if (solved >= shape[1]!) return 'the context as given fits';
      const change = withOptions(job, { input: [shape[0]!, solved] }, `max_length=${solved} (was ${shape[1]}): the longest sequence that fits`);
      return { change, fitted: fitJob(ctx, change.job) };
    },
  };
}

const quantized = (ctx: AdviseContext) => ctx.model.kind === 'module' && ctx.model.quantization !== undefined;

/** LoRA and QLoRA on PEFT's default targets. */
function adapterLevers(): LeverDef[] {
  const skip = (ctx: AdviseContext, qlora: boolean): string | undefined => {
    if (!training(ctx)) return 'adapters change what trains: inference trains nothing';
    if (ctx.options.lora !== undefined) return 'the options already train LoRA adapters';
    if (qlora && quantized(ctx)) return 'the model is quantized already (its quantization_config)';
    if (qlora && (ctx.options.device ?? 'cuda') !== 'cuda') return "bitsandbytes' 4-bit layers run on CUDA";
    return undefined;
  };
  return [
    {
      id: 'lora',
      group: 'adapters',
      cost: { kind: 'quality', note: 'only rank-16 adapters train: usually close to full fine-tuning, not the same' },
      skip: (ctx) => skip(ctx, false),
      change: (_ctx, job) => withOptions(job, { lora: { rank: 16 } }, "LoRA r=16 on PEFT's default target_modules, the base frozen"),
    },
    {
      id: 'qlora',
      group: 'adapters',
      cost: { kind: 'quality', note: '4-bit NF4 base weights: quantisation error, and dequantising them slows each step' },
      skip: (ctx) => skip(ctx, true),
      change: (_ctx, job) =>
        withOptions(
          job,
          { lora: { rank: 16, quantizeBase: true } },
          "QLoRA: the base in 4-bit NF4 (bitsandbytes, double quantisation), LoRA r=16 on PEFT's defaults",
        ),
    },
  ];
}

const optimizerName = (ctx: AdviseContext) => {
  const o = ctx.options.optimizer;
  return o === undefined ? 'adam' : o === null ? null : typeof o === 'string' ? o : o.name;
};

/** 8-bit Adam, Adafactor and plain SGD in place of Adam / AdamW. */
function optimizerLevers(): LeverDef[] {
  const skip = (ctx: AdviseContext): string | undefined => {
    if (!training(ctx)) return 'inference runs no optimizer';
    const name = optimizerName(ctx);
    if (name === null) return 'the step runs no optimizer (optimizer: null)';
    return name === 'adam' || name === 'adamw' ? undefined : `the optimizer is ${name}: these levers replace Adam / AdamW`;
  };
  const lever = (id: 'adam8bit' | 'adafactor' | 'sgd', description: string, note: string): LeverDef => ({
    id,
    group: 'optimizer',
    cost: { kind: 'quality', note },
    skip,
    change: (_ctx, job) => withOptions(job, { optimizer: id }, description),
  });
  return [
    lever('adam8bit', "optim='adamw_bnb_8bit' (bitsandbytes 8-bit moments)", 'usually on par with 32-bit AdamW; a small convergence risk'),
    lever('adafactor', "optim='adafactor' (factored second moments, no first moment)", 'often needs its own learning-rate schedule'),
    lever('sgd', "optim='sgd' (no optimizer state)", 'no adaptive moments: transformers usually train much worse'),
  ];
}

/** Pure 16-bit weights; fp8 is not modelled. */
function precisionLevers(): LeverDef[] {
  return [
    {
      id: 'half-precision',
      group: 'precision',
      cost: { kind: 'quality', note: 'no fp32 master weights: small updates round away (stochastic rounding or Kahan summation help)' },
      skip: (ctx) => {
        const dtype = paramDtype(ctx);
        return dtype === 'float32' ? undefined : `the weights are ${dtype} already`;
      },
      change: (ctx, job) => {
        const precision = halfPrecision(ctx);
        const { dtype: _dtype, ...rest } = job.options;
        const was = ctx.options.precision ?? 'fp32';
        return {
          job: { model: job.model, options: { ...rest, precision } },
          description: `model.to(torch.${precision === 'bf16' ? 'bfloat16' : 'float16'}): ${precision} weights, gradients and optimizer state (was ${was})`,
        };
      },
    },
    {
      id: 'fp8',
      group: 'precision',
      cost: { kind: 'quality', note: 'fp8 matmuls' },
      skip: () => 'fp8 training (Transformer Engine, torchao) is not modelled: precision takes fp32, bf16, fp16, amp-bf16 and amp-fp16',
    },
  ];
}

/** A causal LM's loss heads without full logits. */
function headLevers(): LeverDef[] {
  const skip = (ctx: AdviseContext, liger: boolean): string | undefined => {
    if (!training(ctx)) return 'a loss head is for training';
    if (ctx.model.kind !== 'module' || typeof ctx.model.withHead !== 'function') return 'the model is not a causal LM that can change its loss head (withHead)';
    if (liger && (ctx.options.device ?? 'cuda') !== 'cuda') return "Liger's kernels need Triton on a GPU";
    return undefined;
  };
  const reheaded = (job: Job, head: LmHead): Job => {
    const amp = job.options.precision === 'amp-bf16' || job.options.precision === 'amp-fp16';
    return { model: (job.model as ModuleLayer).withHead!({ ...head, ...(amp ? { autocast: true } : {}) }), options: job.options };
  };
  return [
    {
      id: 'chunked-nll',
      group: 'head',
      cost: { kind: 'compute', note: 'lm_head runs again for each chunk in backward' },
      skip: (ctx) => skip(ctx, false),
      change: (_ctx, job) => ({
        job: reheaded(job, { kind: 'chunked-nll' }),
        description: "chunked cross-entropy (TRL SFTConfig(loss_type='chunked_nll'): lm_head and the loss in checkpointed chunks of 256 tokens)",
      }),
    },
    {
      id: 'liger-flce',
      group: 'head',
      cost: { kind: 'none', note: 'a Triton kernel (pip install liger-kernel): no full logits, no extra pass' },
      skip: (ctx) => skip(ctx, true),
      change: (_ctx, job) => ({
        job: reheaded(job, { kind: 'liger-flce' }),
        description: "use_liger_kernel=True (Liger's fused linear cross-entropy)",
      }),
    },
  ];
}

/** The CPU offload of the optimizer and, with more GPUs, sharding. */
function parallelLevers(): LeverDef[] {
  const skip = (ctx: AdviseContext, needsGpus: boolean, cpuOptimizer: boolean): string | undefined => {
    if (needsGpus && ctx.gpus < 2) return 'sharding needs more than one GPU (gpus; --gpus N on the command line)';
    if (!training(ctx)) return 'these engines shard and offload training state';
    if (ctx.options.parallel !== undefined) return 'the options already give a parallel plan';
    if ((ctx.options.device ?? 'cuda') !== 'cuda') return 'multi-GPU engines and offload run on CUDA';
    const name = optimizerName(ctx);
    if (name === null) return 'DeepSpeed ZeRO partitions an optimizer: the step has none';
    if (cpuOptimizer && !['adam', 'adamw', 'lion'].includes(name))
      return `ZeRO-Offload steps on the host with DeepSpeedCPUAdam or DeepSpeedCPULion, not ${name}`;
    return undefined;
  };
  const per = (ctx: AdviseContext, job: Job) => `${ctx.gpus} GPUs, batch ${shapeOf(job.options)?.[0] ?? 'as given'} on each`;
  const hardware: LeverCost = { kind: 'hardware', note: 'more GPUs, with gathers and reduce-scatters every step; the global batch grows with the GPUs' };
  return [
    {
      id: 'offload-optimizer',
      group: 'parallel',
      cost: { kind: 'throughput', note: 'the optimizer steps on the CPU, gradients and weights cross PCIe every step; needs host memory' },
      skip: (ctx) => skip(ctx, false, true),
      change: (ctx, job) =>
        withOptions(
          job,
          { parallel: { engine: deepspeedEngine.name, dp: ctx.gpus, zero: 2, offload: { optimizer: true } } },
          `DeepSpeed ZeRO-2 with offload_optimizer: {device: cpu} (${ctx.gpus === 1 ? '1 GPU' : per(ctx, job)})`,
        ),
    },
    {
      id: 'shard-fsdp2',
      group: 'parallel',
      cost: hardware,
      skip: (ctx) => skip(ctx, true, false),
      change: (ctx, job) => withOptions(job, { parallel: { engine: fsdp2Engine.name, dp: ctx.gpus } }, `FSDP2 (fully_shard) over ${per(ctx, job)}`),
    },
    ...([2, 3] as const).map(
      (zero): LeverDef => ({
        id: `shard-zero${zero}`,
        group: 'parallel',
        cost: hardware,
        skip: (ctx) => skip(ctx, true, false),
        change: (ctx, job) =>
          withOptions(job, { parallel: { engine: deepspeedEngine.name, dp: ctx.gpus, zero } }, `DeepSpeed ZeRO-${zero} over ${per(ctx, job)}`),
      }),
    ),
  ];
}

let levers: readonly LeverDef[] | undefined;

/** Every lever, in the order a combination applies them (fixed changes first, a search last); made when first asked for, so that a bundle without advise leaves them out. */
export function allLevers(): readonly LeverDef[] {
  levers ??= [
    ...precisionLevers(),
    ...adapterLevers(),
    ...optimizerLevers(),
    ...checkpointLevers(),
    ...headLevers(),
    ...parallelLevers(),
    microBatchLever(),
    contextLever(),
  ];
  return levers;
}
