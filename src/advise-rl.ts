/**
 * {@link adviseRl}: what change makes a whole RL job fit its GPU. The levers of an RL job — the
 * rollout engine's `gpu_memory_utilization`, its sleep mode, the engine on GPUs of its own, and the
 * trainer's (micro-batches of the update and of the log-probability passes, activation
 * checkpointing, parameter and optimizer offload, LoRA, no reference model) — each applied by
 * building new {@link RlJobOptions} and judged by {@link rlJob} on them: every figure is the real
 * job's, never a rule of thumb. Costs in {@link advise}'s words ({@link LeverCost}).
 */
import { COST_ORDER, blocksOf, type LeverCost } from './advise-levers.js';
import { VramError } from './errors.js';
import { rlJob, type RlEngineTrainer, type RlJob, type RlJobOptions, type RlRollout, type RlTrlTrainer } from './jobs/rl.js';
import type { EstimateOptions } from './estimate-types.js';
import type { ModuleLayer } from './nn/types.js';

/** An RL job's figures, as {@link rlJob} gives them: the baseline's and each lever's. */
export interface AdviseRlFigures {
  /** The job's options: the one given, or the one a lever built. */
  readonly options: RlJobOptions;
  /** rlJob's verdict, and the rollout engine starts (vLLM's start-up checks: `engine.starts`). */
  readonly fits: boolean;
  /** Whether vLLM starts (its KV pool holds one request of `max_model_len`). */
  readonly starts: boolean;
  /** `rlJob(model, options).peak`. */
  readonly peak: number;
  readonly peakPhase: string;
  /** rlJob's `usable` less the highest phase on the trainer's GPU. */
  readonly headroom: number;
  /** The rollout engine's utilization and its KV pool in tokens. */
  readonly gpuMemoryUtilization: number;
  readonly kvTokens: number;
  /** GPUs the job needs: the trainer's and the engines' own. */
  readonly gpus: number;
}

/** One lever (or two) applied to the RL job, with the figures of its own rlJob. */
export interface RlLeverResult extends AdviseRlFigures {
  /** Stable id (`rollout-utilization`), or a combination's ids joined by `+`. */
  readonly lever: string;
  readonly levers: readonly string[];
  /** What to change, in the framework's words. */
  readonly description: string;
  /** The kind is a combination's dearest; the notes are joined. */
  readonly cost: LeverCost;
}

/** What {@link adviseRl} found. */
export interface AdviseRlResult {
  readonly baseline: AdviseRlFigures & { readonly totalBytes: number; readonly usable: number };
  /** Fitting first (cheapest cost kind, then fewer levers, then most headroom), then the rest by headroom. */
  readonly levers: readonly RlLeverResult[];
  /** The first fitting entry of `levers`, or undefined when none fits. */
  readonly best: RlLeverResult | undefined;
  /** Levers that do not apply to this job, and why. */
  readonly skipped: readonly { readonly lever: string; readonly reason: string }[];
}

/** What a lever knows: the job as given, and rlJob remembered by options. */
interface Ctx {
  readonly model: ModuleLayer;
  readonly options: RlJobOptions;
  readonly baseline: RlJob;
  readonly run: (options: RlJobOptions) => RlJob;
}

interface Applied {
  readonly options: RlJobOptions;
  readonly description: string;
}

interface RlLever {
  readonly id: string;
  /** A combination holds at most one lever of each group. */
  readonly group: string;
  /** Levers a combination does not join with this one (they undo or ignore each other). */
  readonly conflicts?: readonly string[];
  readonly cost: (ctx: Ctx) => LeverCost;
  /** Why it does not apply to the job as given, or undefined when it does. */
  readonly skip: (ctx: Ctx) => string | undefined;
  /** The options with this lever over `options` (whose job is `job`), or why not. */
  readonly apply: (ctx: Ctx, options: RlJobOptions, job: RlJob) => Applied | string;
}

const trlOf = (o: RlJobOptions) => o.trainer as RlTrlTrainer;
const actorOf = (o: RlJobOptions) => o.trainer as RlEngineTrainer;
const withConfig = (o: RlJobOptions, fields: Record<string, unknown>): RlJobOptions => ({
  ...o,
  trainer: { ...trlOf(o), config: { ...trlOf(o).config, ...fields } },
});
const withActor = (o: RlJobOptions, fields: Partial<RlEngineTrainer>): RlJobOptions => ({ ...o, trainer: { ...actorOf(o), ...fields } });
const withRollout = (o: RlJobOptions, fields: Partial<RlRollout>): RlJobOptions => ({ ...o, rollout: { ...(o.rollout ?? {}), ...fields } });
const args = (job: RlJob) => job.trl!.args;
const trl = (ctx: Ctx) => ctx.options.framework === 'trl';
const words = (ctx: Ctx, names: Readonly<Record<'trl' | 'verl' | 'openrlhf', string>>) => names[ctx.options.framework];

/** The figures of a job. */
function figures(job: RlJob, options: RlJobOptions): AdviseRlFigures {
  const highest = Math.max(...job.phases.map((p) => p.peak));
  return {
    options,
    fits: job.fits && job.engine.starts,
    starts: job.engine.starts,
    peak: job.peak,
    peakPhase: job.peakPhase,
    headroom: job.usable - highest,
    gpuMemoryUtilization: job.engine.settings.gpuMemoryUtilization,
    kvTokens: job.engine.kvCache.tokens,
    gpus: job.gpus.total,
  };
}

/** KV blocks (of every layer) the rollout needs: one request of max_model_len (vLLM's start-up check), and for TRL every sequence it generates at once. */
function kvNeed(options: RlJobOptions, job: RlJob): { readonly blocks: number; readonly what: string } {
  const s = job.engine.settings;
  const start = Math.ceil(s.maxModelLen / s.blockSize);
  if (options.framework !== 'trl') return { blocks: start, what: `one request of max_model_len ${s.maxModelLen} (vLLM's start-up check)` };
  const length = trlOf(options).prompt + args(job).grpo!.maxCompletionLength;
  const rollout = s.maxNumSeqs * Math.ceil(length / s.blockSize);
  return rollout >= start
    ? { blocks: rollout, what: `the ${s.maxNumSeqs} sequences of ${length} tokens TRL generates at once (max_num_seqs ${s.maxNumSeqs})` }
    : { blocks: start, what: `one request of max_model_len ${s.maxModelLen} (vLLM's start-up check; TRL's ${s.maxNumSeqs} sequences of ${length} need less)` };
}

const round = (u: number) => Math.round(u * 100) / 100;

/** The smallest utilization in steps of 0.01 whose pool holds `blocks` and whose engine starts, or undefined past 1. */
function floorUtilization(ctx: Ctx, options: RlJobOptions, job: RlJob, blocks: number): number | undefined {
  const e = job.engine;
  const nonKv = e.requested - e.kvCache.bytes;
  const bytes = blocks * e.settings.blockSize * e.kvCache.bytesPerToken;
  let step = Math.max(1, Math.ceil(((nonKv + bytes) / e.totalBytes) * 100 - 1e-9));
  // The pool's blocks are floored per layer: a step or two more where the division leaves it short.
  for (let tries = 0; step <= 100 && tries < 4; tries += 1, step += 1) {
    const k = ctx.run(withRollout(options, { gpuMemoryUtilization: step / 100 })).engine;
    if (k.starts && k.kvCache.blocks >= blocks) return step / 100;
  }
  return undefined;
}

/** The rollout engine's `gpu_memory_utilization`: TRL's down to what holds its rollout; verl's and OpenRLHF's, the most that fits above vLLM's floor. */
function utilizationLever(): RlLever {
  const name = { trl: 'vllm_gpu_memory_utilization=', verl: 'actor_rollout_ref.rollout.gpu_memory_utilization=', openrlhf: '--vllm.gpu_memory_utilization ' };
  return {
    id: 'rollout-utilization',
    group: 'utilization',
    cost: (ctx) =>
      trl(ctx)
        ? { kind: 'none', note: "the pool still holds every sequence TRL's engine runs at once (max_num_seqs): none waits" }
        : { kind: 'throughput', note: 'a smaller KV pool: fewer sequences decode at once, vLLM queues (and preempts) the rest' },
    skip: (ctx) => {
      if (ctx.options.rollout?.kvCacheMemoryBytes !== undefined) return 'rollout.kvCacheMemoryBytes sets the KV pool: vLLM ignores gpu_memory_utilization';
      return ctx.baseline.colocated ? undefined : "the engine is on GPUs of its own: its utilization does not touch the trainer's GPU";
    },
    apply: (ctx, options, job) => {
      if (!job.colocated) return "the engine is on GPUs of its own: its utilization does not touch the trainer's GPU";
      const current = job.engine.settings.gpuMemoryUtilization;
      const need = kvNeed(options, job);
      const least = floorUtilization(ctx, options, job, need.blocks);
      if (least === undefined) return `no utilization up to 1 holds ${need.what}`;
      if (least >= current) return `${current} is already the least utilization (in steps of 0.01) that holds ${need.what}`;
      let chosen = least;
      const searched = !trl(ctx) && ctx.run(withRollout(options, { gpuMemoryUtilization: least })).fits;
      if (searched) {
        // The most that fits (more KV, more sequences at once): the job's peak grows with the utilization.
        let [good, bad] = [Math.round(least * 100), Math.ceil(current * 100 - 1e-9)];
        while (bad - good > 1) {
          const mid = (good + bad) >> 1;
          const k = ctx.run(withRollout(options, { gpuMemoryUtilization: mid / 100 }));
          if (k.fits && k.engine.starts) good = mid;
          else bad = mid;
        }
        chosen = good / 100;
      }
      const next = withRollout(options, { gpuMemoryUtilization: round(chosen) });
      const tokens = ctx.run(next).engine.kvCache.tokens.toLocaleString('en-US');
      const uncounted =
        job.engine.assumed.length > 0 ? "; vLLM's non-torch memory and CUDA-graph estimate are not counted (rollout.measured): they raise the floor" : '';
      const why = searched ? `the most that fits; vLLM's floor is ${least}, ${need.what}` : `the least that holds ${need.what}`;
      return { options: next, description: `${words(ctx, name)}${round(chosen)} (was ${current}): a KV pool of ${tokens} tokens, ${why}${uncounted}` };
    },
  };
}

/** Whether the job's engine sleeps outside the rollout. */
function sleeping(ctx: Ctx, job: RlJob): boolean {
  if (trl(ctx)) return args(job).grpo!.vllm!.sleepMode;
  return ctx.options.rollout?.sleep ?? ctx.options.framework === 'verl';
}

/** Sleep mode (the engine's weights and KV pool released outside the rollout), and the engine on GPUs of its own. */
function placementLevers(): RlLever[] {
  const sleep = {
    trl: 'vllm_enable_sleep_mode=True (level 2 outside generation)',
    verl: 'actor_rollout_ref.rollout.free_cache_engine=True (sleep level 2 after each rollout)',
    openrlhf: '--vllm.enable_sleep (sleep level 1 after generation)',
  };
  const apart = (ctx: Ctx) => (ctx.options.rollout?.engines ?? 1) * ctx.baseline.engine.settings.tensorParallelSize;
  return [
    {
      id: 'sleep',
      group: 'sleep',
      cost: () => ({ kind: 'throughput', note: 'the engine is woken every step: its weights reloaded or re-synced and its KV pool re-allocated' }),
      skip: (ctx) => {
        if (!ctx.baseline.colocated) return 'OpenRLHF forces sleep off when the engines are not colocated (train_ppo_ray.py l.663-665)';
        return sleeping(ctx, ctx.baseline) ? 'the engine sleeps already' : undefined;
      },
      apply: (ctx, options, job) =>
        job.colocated ? { options: withRollout(options, { sleep: true }), description: words(ctx, sleep) } : 'the engine is not colocated: it never sleeps',
    },
    {
      id: 'separate-engine',
      group: 'placement',
      // OpenRLHF forces sleep off apart, and the utilization of an engine apart does not touch the trainer's GPU.
      conflicts: ['sleep', 'rollout-utilization'],
      cost: (ctx) => ({ kind: 'hardware', note: `${apart(ctx)} more GPU(s) for the engines; the weights cross to them over NCCL every step` }),
      skip: (ctx) => {
        if (ctx.options.framework === 'trl')
          return "TRL's server mode (vllm_mode='server', the engine on GPUs of its own) is not modelled by rlJob: colocate mode only";
        if (ctx.options.framework === 'verl') return "verl's hybrid engine shares the actor's GPUs: a rollout on GPUs of its own is not modelled";
        return ctx.baseline.colocated ? undefined : 'the engines are on GPUs of their own already';
      },
      apply: (ctx, options) => {
        const { sleep: _sleep, ...rollout } = options.rollout ?? {};
        const engines = rollout.engines ?? 1;
        return {
          options: { ...options, rollout: { ...rollout, colocate: false, engines } },
          description: `drop --train.colocate_all (and --vllm.enable_sleep): --vllm.num_engines ${engines} on ${apart(ctx)} GPU(s) of their own`,
        };
      },
    },
  ];
}

/** The divisors m > 1 of `batch`, ascending (at most 64-way). */
const splits = (batch: number) => Array.from({ length: Math.min(batch, 64) - 1 }, (_, i) => i + 2).filter((m) => batch % m === 0);

/** The smallest split of `ms` whose job fits (the job's memory falls as the micro-batch shrinks), else the largest. */
function smallestSplit(ctx: Ctx, ms: readonly number[], build: (m: number) => RlJobOptions): number {
  const fitsAt = (i: number) => {
    const j = ctx.run(build(ms[i]!));
    return j.fits && j.engine.starts;
  };
  let bad = -1;
  let good = ms.length - 1;
  if (fitsAt(good))
    while (good - bad > 1) {
      const mid = (bad + good) >> 1;
      if (fitsAt(mid)) good = mid;
      else bad = mid;
    }
  return ms[good]!;
}

/** An estimate's input as [batch, seq], or undefined. */
function batchSeq(o: EstimateOptions | undefined): readonly [number, number] | undefined {
  const input = o?.input as unknown;
  return Array.isArray(input) && input.length === 2 && input.every((d) => typeof d === 'number') ? (input as [number, number]) : undefined;
}

/** TRL: per_device_train_batch_size split, with gradient accumulation (and steps_per_generation where set) so that the generation batch stays. */
function trlSplit(options: RlJobOptions, job: RlJob, m: number): RlJobOptions {
  const a = args(job);
  const spg = trlOf(options).config.steps_per_generation;
  return withConfig(options, {
    per_device_train_batch_size: a.batch / m,
    gradient_accumulation_steps: a.accumulation * m,
    ...(spg !== undefined && spg !== null ? { steps_per_generation: a.grpo!.stepsPerGeneration * m } : {}),
  });
}

/** verl / OpenRLHF: the update's micro-batch split, with gradient accumulation. */
function actorSplit(options: RlJobOptions, m: number): RlJobOptions {
  const update = actorOf(options).update;
  const [b, s] = batchSeq(update)!;
  return withActor(options, { update: { ...update, input: [b / m, s], microBatches: (update.microBatches ?? 1) * m } });
}

/** The update's micro-batch: the smallest split of the batch that fits. */
function microBatchLever(): RlLever {
  const skip = (ctx: Ctx, job: RlJob): string | undefined => {
    if (trl(ctx)) return splits(args(job).batch).length === 0 ? `per_device_train_batch_size ${args(job).batch} has no divisor to split by` : undefined;
    const input = batchSeq(actorOf(ctx.options).update);
    if (input === undefined) return "the update's input is not [batch, seq]: split it yourself";
    if ((actorOf(ctx.options).update.parallel?.pp ?? 1) > 1) return "a pipeline's micro-batches are its schedule's";
    return splits(input[0]).length === 0 ? `the update's batch ${input[0]} has no divisor to split by` : undefined;
  };
  return {
    id: 'micro-batches',
    group: 'update-batch',
    cost: () => ({ kind: 'throughput', note: 'smaller passes one after another: the same samples per step, lower GPU utilisation' }),
    skip: (ctx) => skip(ctx, ctx.baseline),
    apply: (ctx, options, job) => {
      const why = skip(ctx, job);
      if (why !== undefined) return why;
      if (trl(ctx)) {
        const a = args(job);
        const m = smallestSplit(ctx, splits(a.batch), (k) => trlSplit(options, job, k));
        return {
          options: trlSplit(options, job, m),
          description: `per_device_train_batch_size ${a.batch} → ${a.batch / m} with gradient_accumulation_steps=${a.accumulation * m}: the same ${job.trl!.generationBatch} completions per generation`,
        };
      }
      const [b] = batchSeq(actorOf(options).update)!;
      const m = smallestSplit(ctx, splits(b), (k) => actorSplit(options, k));
      const flag = words(ctx, { trl: '', verl: 'actor.ppo_micro_batch_size_per_gpu', openrlhf: 'the update micro-batch (micro_train_batch_size)' });
      return { options: actorSplit(options, m), description: `${flag} ${b / m} (was ${b}): ${m} micro-batches of gradient accumulation` };
    },
  };
}

/** verl / OpenRLHF: the log-probability passes' micro-batch (no grad: no accumulation). */
function logProbLever(): RlLever {
  const skip = (ctx: Ctx): string | undefined => {
    if (trl(ctx)) return "TRL's log-probability passes run per_device_train_batch_size at a time: micro-batches splits them";
    const input = batchSeq(actorOf(ctx.options).logProbs);
    if (input === undefined) return "the log-probability pass's input is not [batch, seq]";
    return splits(input[0]).length === 0 ? `the log-probability batch ${input[0]} has no divisor to split by` : undefined;
  };
  const split = (options: RlJobOptions, m: number): RlJobOptions => {
    const t = actorOf(options);
    const [b, s] = batchSeq(t.logProbs)!;
    const ref = batchSeq(t.reference);
    return withActor(options, {
      logProbs: { ...t.logProbs, input: [b / m, s] },
      ...(t.reference !== undefined && ref !== undefined && ref[0] % m === 0 ? { reference: { ...t.reference, input: [ref[0] / m, ref[1]] } } : {}),
    });
  };
  return {
    id: 'log-prob-batch',
    group: 'log-prob-batch',
    cost: () => ({ kind: 'throughput', note: 'the no-grad passes in smaller pieces one after another' }),
    skip,
    apply: (ctx, options) => {
      const why = skip({ ...ctx, options });
      if (why !== undefined) return why;
      const [b] = batchSeq(actorOf(options).logProbs)!;
      const m = smallestSplit(ctx, splits(b), (k) => split(options, k));
      const flag = words(ctx, { trl: '', verl: 'rollout.log_prob_micro_batch_size_per_gpu', openrlhf: 'micro_rollout_batch_size' });
      return { options: split(options, m), description: `${flag} ${b / m} (was ${b})` };
    },
  };
}

/** Activation checkpointing of the update. */
function checkpointLever(): RlLever {
  return {
    id: 'checkpoint',
    group: 'checkpoint',
    cost: () => ({ kind: 'compute', note: 'one more forward of every layer in the update, ~+30% update time' }),
    skip: (ctx) => {
      if (trl(ctx)) return args(ctx.baseline).checkpointing ? 'gradient_checkpointing is on already (TRL turns it on)' : undefined;
      if (actorOf(ctx.options).update.checkpoint !== undefined) return "the update's options already set checkpoint";
      const blocks = blocksOf(ctx.model);
      return typeof blocks === 'string' ? blocks : undefined;
    },
    apply: (ctx, options) => {
      if (trl(ctx)) return { options: withConfig(options, { gradient_checkpointing: true }), description: 'gradient_checkpointing=True' };
      const blocks = blocksOf(ctx.model) as Exclude<ReturnType<typeof blocksOf>, string>;
      const update = { ...actorOf(options).update, checkpoint: { modules: blocks.paths } };
      const flag = words(ctx, { trl: '', verl: 'actor_rollout_ref.model.enable_gradient_checkpointing=True', openrlhf: '--gradient_checkpointing' });
      return { options: withActor(options, { update }), description: `${flag} (every ${blocks.word}: ${blocks.paths.length})` };
    },
  };
}

/** verl's / OpenRLHF's offload of the actor's parameters or optimizer state outside the update. */
function offloadLevers(): RlLever[] {
  const lever = (
    id: 'param-offload' | 'optimizer-offload',
    field: 'paramOffload' | 'optimizerOffload',
    what: string,
    flags: Record<'verl' | 'openrlhf', string>,
  ): RlLever => ({
    id,
    group: id,
    cost: () => ({ kind: 'throughput', note: `the actor's ${what} cross PCIe to the CPU and back every step; needs host memory` }),
    skip: (ctx) => {
      if (trl(ctx)) return "TRL's GRPOTrainer keeps the policy and its optimizer on the GPU (DeepSpeed offload under TRL is not modelled by rlJob)";
      return actorOf(ctx.options)[field] === true ? `the actor's ${what} are offloaded already` : undefined;
    },
    apply: (ctx, options) => ({
      options: withActor(options, { [field]: true }),
      description: `${flags[ctx.options.framework as 'verl' | 'openrlhf']}: the ${what} on the CPU outside the update`,
    }),
  });
  return [
    lever('param-offload', 'paramOffload', 'parameters', { verl: 'actor.fsdp_config.param_offload=True', openrlhf: '--ds.enable_sleep' }),
    lever('optimizer-offload', 'optimizerOffload', 'optimizer state', { verl: 'actor.fsdp_config.optimizer_offload=True', openrlhf: '--ds.enable_sleep' }),
  ];
}

/** What changes the model that trains: LoRA adapters, no reference model. */
function qualityLevers(): RlLever[] {
  return [
    {
      id: 'lora',
      group: 'adapters',
      cost: () => ({ kind: 'quality', note: 'only rank-16 adapters train: usually close to full fine-tuning, not the same' }),
      skip: (ctx) => {
        if (trl(ctx)) return trlOf(ctx.options).peft != null ? 'the trainer trains PEFT adapters already' : undefined;
        const t = actorOf(ctx.options);
        if (t.update.lora !== undefined) return 'the update trains LoRA adapters already';
        return t.reference !== undefined
          ? "with LoRA the reference is the actor with its adapters disabled, which rlJob's reference (a copy) is not: give the trainer yourself"
          : undefined;
      },
      apply: (ctx, options) => {
        if (trl(ctx))
          return {
            options: { ...options, trainer: { ...trlOf(options), peft: { r: 16 } } },
            description: "peft_config=LoraConfig(r=16) on PEFT's default target_modules",
          };
        const t = actorOf(options);
        const lora = { rank: 16 };
        const flag = words(ctx, { trl: '', verl: 'actor_rollout_ref.model.lora_rank=16', openrlhf: '--lora_rank 16' });
        return { options: withActor(options, { update: { ...t.update, lora }, logProbs: { ...t.logProbs, lora } }), description: `${flag}: the base frozen` };
      },
    },
    {
      id: 'no-reference',
      group: 'reference',
      cost: () => ({ kind: 'quality', note: 'no KL penalty against the reference policy: the policy may drift further' }),
      skip: (ctx) => {
        if (trl(ctx)) return args(ctx.baseline).grpo!.beta === 0 ? "beta is 0 (TRL's default): there is no reference model" : undefined;
        return actorOf(ctx.options).reference === undefined ? 'the job has no reference model' : undefined;
      },
      apply: (ctx, options) => {
        if (trl(ctx))
          return {
            options: withConfig(options, { beta: 0 }),
            description: `beta=0 (was ${args(ctx.baseline).grpo!.beta}): no reference model, no ref_logps pass`,
          };
        const { reference: _ref, ...t } = actorOf(options);
        const flag = words(ctx, { trl: '', verl: 'algorithm.use_kl_in_reward=False, actor.use_kl_loss=False', openrlhf: '--init_kl_coef 0' });
        return { options: { ...options, trainer: t }, description: `${flag}: no reference model` };
      },
    },
  ];
}

let catalogue: readonly RlLever[] | undefined;

/** Every lever, in the order a combination applies them: fixed changes first, the searches after, the utilization last (it reads the job the others made). */
function allRlLevers(): readonly RlLever[] {
  catalogue ??= [...qualityLevers(), checkpointLever(), ...offloadLevers(), ...placementLevers(), microBatchLever(), logProbLever(), utilizationLever()];
  return catalogue;
}

const kindRank = (cost: LeverCost) => COST_ORDER.indexOf(cost.kind);

/** The job as given with these levers applied in order, with its figures, or why not. */
function attempt(ctx: Ctx, defs: readonly RlLever[]): RlLeverResult | string {
  try {
    let options = ctx.options;
    const descriptions: string[] = [];
    for (const def of defs) {
      const applied = def.apply(ctx, options, ctx.run(options));
      if (typeof applied === 'string') return applied;
      options = applied.options;
      descriptions.push(applied.description);
    }
    const costs = defs.map((d) => d.cost(ctx));
    const dearest = costs.reduce((a, b) => (kindRank(b) > kindRank(a) ? b : a));
    return {
      lever: defs.map((d) => d.id).join('+'),
      levers: defs.map((d) => d.id),
      description: descriptions.join('; '),
      cost: { kind: dearest.kind, note: costs.map((c) => c.note).join('; ') },
      ...figures(ctx.run(options), options),
    };
  } catch (error) {
    // A change the framework's rules refuse for this job (rlJob's own check): its reason.
    if (error instanceof VramError) return error.issues[0]?.message ?? error.message;
    throw error;
  }
}

/** A single lever that neither fits nor lowers the trainer's GPU: why it is left out. */
function helps(result: RlLeverResult | string, base: AdviseRlFigures): RlLeverResult | string {
  if (typeof result === 'string' || result.fits || result.headroom > base.headroom) return result;
  return `lowers nothing on the trainer's GPU: its highest phase (${base.peakPhase}) stays`;
}

/** Pairs of the single levers that help without fitting alone (the six that save most), of different groups, cheapest first, until one fits and those as dear. */
function pairs(
  ctx: Ctx,
  singles: readonly { def: RlLever; result: RlLeverResult }[],
  baseline: number,
  skipped: { lever: string; reason: string }[],
): RlLeverResult[] {
  const helpful = singles
    .filter((s) => !s.result.fits && s.result.headroom > baseline)
    .sort((a, b) => b.result.headroom - a.result.headroom)
    .slice(0, 6);
  const sets: (typeof helpful)[] = [];
  for (let i = 0; i < helpful.length; i += 1)
    for (let j = i + 1; j < helpful.length; j += 1) {
      const [a, b] = [helpful[i]!.def, helpful[j]!.def];
      if (a.group !== b.group && !a.conflicts?.includes(b.id) && !b.conflicts?.includes(a.id)) sets.push([helpful[i]!, helpful[j]!]);
    }
  const dearest = (set: typeof helpful) => Math.max(...set.map((s) => kindRank(s.result.cost)));
  const order = (set: typeof helpful) => [dearest(set), set.reduce((n, s) => n + kindRank(s.result.cost), 0), -set.reduce((n, s) => n + s.result.headroom, 0)];
  sets.sort((a, b) => compareLists(order(a), order(b)));
  const out: RlLeverResult[] = [];
  let stopAt: number | undefined;
  for (const set of sets.slice(0, 12)) {
    if (stopAt !== undefined && dearest(set) > stopAt) break;
    const all = allRlLevers();
    const defs = set.map((s) => s.def).sort((a, b) => all.indexOf(a) - all.indexOf(b));
    const result = attempt(ctx, defs);
    if (typeof result === 'string') skipped.push({ lever: defs.map((d) => d.id).join('+'), reason: result });
    else {
      out.push(result);
      if (result.fits && stopAt === undefined) stopAt = dearest(set);
    }
  }
  return out;
}

function compareLists(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i += 1) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** Fitting first: by cost kind, then fewer levers, then most headroom; the rest by headroom. */
function rank(results: readonly RlLeverResult[]): RlLeverResult[] {
  const order = (r: RlLeverResult) => (r.fits ? [0, kindRank(r.cost), r.levers.length, -r.headroom] : [1, -r.headroom, r.levers.length]);
  return [...results].sort((a, b) => compareLists(order(a), order(b)));
}

/**
 * What change makes an RL job fit its GPU. Every lever of the job — the rollout engine's
 * `gpu_memory_utilization` (TRL: down to the least whose KV pool still holds the sequences its
 * engine runs at once, at no cost; verl and OpenRLHF: the most that fits above vLLM's start-up
 * floor), sleep mode, OpenRLHF's engines on GPUs of their own, the update's micro-batches (the
 * smallest split that fits, the same samples per step), the log-probability passes' micro-batch,
 * activation checkpointing, verl's and OpenRLHF's parameter and optimizer offload, LoRA, no
 * reference model — is applied alone, then in pairs of the ones that help, cheapest first, until
 * one fits. Each builds new {@link RlJobOptions} and is judged by {@link rlJob} on them: a lever's
 * `peak` is `rlJob(model, lever.options).peak`. The options are rlJob's, checked as rlJob checks
 * them (a VramError with the path).
 *
 * @example
 * ```ts
 * import { adviseRl, llm } from 'vram-ts';
 * const a = adviseRl(llm('qwen2.5-0.5b'), {
 *   framework: 'trl',
 *   totalBytes: 85_061_827_297,
 *   trainer: { config: { num_generations: 8, max_completion_length: 4096 }, prompt: 256 },
 * });
 * console.log(a.baseline.fits, a.best?.lever, a.best?.cost.kind, a.best?.gpuMemoryUtilization); // false rollout-utilization none 0.02
 * ```
 */
export function adviseRl(model: ModuleLayer, options: RlJobOptions): AdviseRlResult {
  const baseline = rlJob(model, options);
  // rlJob remembered by its options (the searches ask again); options JSON cannot spell are run each time.
  const memo = new Map<string, RlJob>();
  const keyOf = (o: RlJobOptions) => {
    try {
      return JSON.stringify(o);
    } catch {
      return undefined;
    }
  };
  const run = (o: RlJobOptions) => {
    const key = keyOf(o);
    const known = key === undefined ? undefined : memo.get(key);
    if (known !== undefined) return known;
    const job = rlJob(model, o);
    if (key !== undefined) memo.set(key, job);
    return job;
  };
  const baseKey = keyOf(options);
  if (baseKey !== undefined) memo.set(baseKey, baseline);
  const ctx: Ctx = { model, options, baseline, run };
  const base = figures(baseline, options);
  const skipped: { lever: string; reason: string }[] = [];
  const singles: { def: RlLever; result: RlLeverResult }[] = [];
  for (const def of allRlLevers()) {
    const reason = def.skip(ctx);
    const outcome = reason === undefined ? helps(attempt(ctx, [def]), base) : reason;
    if (typeof outcome === 'string') skipped.push({ lever: def.id, reason: outcome });
    else singles.push({ def, result: outcome });
  }
  const levers = rank([...singles.map((s) => s.result), ...pairs(ctx, singles, base.headroom, skipped)]);
  return { baseline: { ...base, totalBytes: baseline.totalBytes, usable: baseline.usable }, levers, best: levers.find((l) => l.fits), skipped };
}
