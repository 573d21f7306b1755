import { fullParameters, optimizerOver, releaseGradients, wholeGradients, type ParamEntry } from '../../memory/residency/kit.js';
import { ledgerOfRank } from '../../memory/ledger.js';
import type { EngineHooks, RankContext } from '../../memory/residency/types.js';
import { tensorBytes } from '../../memory/step-plan.js';
import { fail } from '../../errors.js';
import { bytesOf, type DType } from '../../tensor/dtype.js';
import { numel } from '../../tensor/spec.js';
import type { IR } from '../../trace/ir.js';
import { parameterOrder } from '../../trace/uses.js';
import { boolean, number } from '../../validate.js';
import { gradientSyncKnob, type CommonPlan, type EngineRecord, type GradientSyncKnob } from './engine.js';

/** The plan keys DDP and ZeroRedundancyOptimizer read. */
export interface DdpKnobs extends GradientSyncKnob {
  /**
   * DDP `gradient_as_bucket_view` (default false). With `microBatches` > 1, DDP runs every
   * micro-batch but the last under `no_sync()` (what Accelerate and the HF Trainer do).
   */
  readonly bucketView?: boolean;
  /** DDP `bucket_cap_mb` (default 25). */
  readonly bucketCapMb?: number;
}

/** The plan DDP and ZeroRedundancyOptimizer reads: the common fields and its knobs. */
export type DdpPlan = CommonPlan & DdpKnobs;

/** torch DistributedDataParallel's knobs that move memory. */
export interface DdpSettings {
  /** `gradient_as_bucket_view`: `.grad` tensors are views into the buckets (no second copy). */
  readonly bucketView: boolean;
  /** `bucket_cap_mb` (default 25). */
  readonly bucketCapMb: number;
  /** Micro-batches that reduce gradients: every one, or only the last (the others under `no_sync()`). */
  readonly gradientSync: 'every' | 'last';
}

/** `dist._DEFAULT_FIRST_BUCKET_BYTES`: the first bucket closes at 1 MiB. */
const FIRST_BUCKET_BYTES = 1024 * 1024;

/**
 * The Reducer's buckets, as `_compute_bucket_assignment_by_size` makes them: the parameters
 * that need gradients in reverse registration order, by dtype, a bucket closing once its bytes
 * reach its limit (the first bucket's 1 MiB, then `bucket_cap_mb`). Each bucket is one flat
 * tensor of its parameters' elements (torch/nn/parallel/distributed.py; reducer.cpp
 * `initialize_buckets`). Returns the buckets' bytes.
 */
export function ddpBuckets(params: readonly ParamEntry[], settings: DdpSettings): number[] {
  const open = new Map<DType, { numel: number; bytes: number; limit: number }>();
  const closed: number[] = [];
  const limits = [FIRST_BUCKET_BYTES, settings.bucketCapMb * 1024 * 1024];
  for (const p of [...params].reverse()) {
    const bucket = open.get(p.dtype) ?? { numel: 0, bytes: 0, limit: 0 };
    open.set(p.dtype, bucket);
    bucket.numel += p.numel;
    bucket.bytes += bytesOf(p.numel, p.dtype) as number;
    if (bucket.bytes >= limits[Math.min(bucket.limit, limits.length - 1)]!) {
      closed.push(bytesOf(bucket.numel, p.dtype) as number);
      open.set(p.dtype, { numel: 0, bytes: 0, limit: bucket.limit + 1 });
    }
  }
  for (const [dtype, bucket] of open) if (bucket.numel > 0) closed.push(bytesOf(bucket.numel, dtype) as number);
  return closed;
}

/**
 * One rank of torch DistributedDataParallel: the whole model, its gradients and the optimizer
 * state as on one device, plus the Reducer's flat buckets (the gradients' size again, made when
 * DDP is constructed; the all-reduce runs in place on them). With `gradient_as_bucket_view`
 * the `.grad` tensors are views into the buckets: autograd's first gradient of a parameter is
 * copied into its view and goes; a later one is added in place. `optimized` picks the
 * parameters this rank's optimizer steps (ZeroRedundancyOptimizer), in its order.
 */
export function ddp(settings: DdpSettings, optimized?: PartitionedOptimizer): (ctx: RankContext) => EngineHooks {
  return (ctx) => {
    const { ir, ledger, plan } = ctx;
    const buckets = ddpBuckets(fullParameters(ctx), settings);
    const gradients = wholeGradients(ctx);
    const optimizer =
      ctx.optimizer === null || optimized === undefined ? optimizerOver(ctx, ctx.optimizer === null ? [] : plan.trainable) : partitioned(ctx, optimized);
    const { trainable } = ctx;
    const viewed = new Set<number>();
    const inPlace: number[] = [];
    // Micro-batches before the last run under no_sync(): no bucket copy, `.grad` stays a tensor of its own.
    const synced = () => settings.gradientSync === 'every' || ctx.microDone() === ctx.microBatches - 1;
    return {
      param: (storage) => {
        ledger.alloc(ir.storages[storage]!.bytes, 'parameters', 1, ctx.owner(storage));
      },
      start() {
        const grads = settings.bucketView
          ? []
          : plan.trainable.map((id) => {
              const block = ledger.alloc(tensorBytes(ir, id), 'gradients', 1, ctx.owner(ir.tensors[id]!.storage));
              gradients.grads.set(id, block);
              return block;
            });
        for (const bytes of buckets) ledger.alloc(bytes, 'communication');
        return { grads, state: optimizer.allocateState() };
      },
      zeroGrad() {
        viewed.clear();
        releaseGradients(ledger, plan.trainable, gradients.grads);
      },
      paramGrads(op, label) {
        if (!settings.bucketView) return gradients.paramGrads(op, label);
        const fresh = op.params.filter((param) => trainable(param) && !viewed.has(param) && !gradients.grads.has(param));
        gradients.paramGrads({ ...op, params: fresh }, label);
        // A later gradient of a parameter that has a `.grad` (its bucket view, or its own tensor
        // under no_sync): AccumulateGrad adds it in place, the node's gradient a temporary.
        for (const param of op.params) if (trainable(param) && !fresh.includes(param)) inPlace.push(ledger.alloc(tensorBytes(ir, param), 'temporaries'));
      },
      afterBackward(op, label) {
        gradients.afterBackward(op, label);
        if (!settings.bucketView) return;
        for (const block of inPlace) ledger.release(block);
        inPlace.length = 0;
        if (!synced()) return;
        // The Reducer's hook on each gradient made ready here copies it into its bucket and makes
        // `.grad` the view; parameters whose hooks have not fired keep their own `.grad`.
        for (const param of op.params) {
          const block = gradients.grads.get(param);
          if (block === undefined) continue;
          ledger.release(block);
          gradients.grads.delete(param);
          viewed.add(param);
        }
      },
      endBackward: gradients.endBackward,
      step: optimizer.step,
      optimizerState: optimizer.optimizerState,
    };
  };
}

/**
 * The optimizer partitioned over the ranks by whole parameters (ZeroRedundancyOptimizer): each
 * rank's parameters, in the order it steps them, the rank simulated, and whether to stand for
 * every rank at once (EngineEnv.family).
 */
export interface PartitionedOptimizer {
  readonly partitions: (ctx: RankContext) => readonly (readonly number[])[];
  readonly rank: number;
  readonly family: boolean;
}

/**
 * The rank's optimizer over its partition; with `family`, every rank's at once: each rank's state
 * and step are its own blocks and events (the rest of the step is every rank's alike), the steps
 * one after another (each frees what it made).
 */
function partitioned(ctx: RankContext, { partitions, rank, family }: PartitionedOptimizer): ReturnType<typeof optimizerOver> {
  const parts = partitions(ctx);
  if (!family || parts.length === 1) return optimizerOver(ctx, parts[rank]!);
  ctx.ledger.forRanks(parts.length);
  const each = parts.map((params, r) => optimizerOver({ ...ctx, ledger: ledgerOfRank(ctx.ledger, r, parts.length) }, params));
  return {
    allocateState: () => each.flatMap((optimizer) => optimizer.allocateState()),
    // Rank 0's figures (a family run is read for its peaks).
    optimizerState: each[0]!.optimizerState,
    hostState: each[0]!.hostState,
    step() {
      for (const optimizer of each) optimizer.step();
    },
  };
}

/**
 * torch's ZeroRedundancyOptimizer (ZeRO-1 by whole parameters): rank r keeps the optimizer state
 * of the parameters the greedy partition gives it — sorted by element count, largest first (a
 * stable sort), each to the rank with the fewest elements so far, the lowest rank on a tie
 * (torch/distributed/optim/zero_redundancy_optimizer.py `_partition_parameters`) — and steps
 * them in that order. Needs the whole trace (the partition is over tensors).
 */
export function zeroRedundancyPartition(ir: IR, world: number): number[][] {
  const params = parameterOrder(ir).filter((id) => ir.storages[ir.tensors[id]!.storage]!.trainable);
  const sorted = params.map((id, i) => ({ id, i, n: numel(ir.tensors[id]!.spec) as number })).sort((a, b) => b.n - a.n || a.i - b.i);
  const sizes = new Array<number>(world).fill(0);
  const ranks: number[][] = Array.from({ length: world }, () => []);
  for (const { id, n } of sorted) {
    let rank = 0;
    for (let r = 1; r < world; r += 1) if (sizes[r]! < sizes[rank]!) rank = r;
    ranks[rank]!.push(id);
    sizes[rank]! += n;
  }
  return ranks;
}

const PARTITION_KEYS = new WeakMap<IR, Map<number, readonly string[]>>();

/** Each rank's partition as the specs it steps (the rankKey of ZeroRedundancyOptimizer), kept per trace and world. */
function partitionsOf(ir: IR, world: number): readonly string[] {
  let byWorld = PARTITION_KEYS.get(ir);
  if (byWorld === undefined) {
    byWorld = new Map();
    PARTITION_KEYS.set(ir, byWorld);
  }
  let keys = byWorld.get(world);
  if (keys === undefined) {
    keys = zeroRedundancyPartition(ir, world).map((ids) => ids.map((id) => `${ir.tensors[id]!.spec.dtype}[${ir.tensors[id]!.spec.shape.join('x')}]`).join(','));
    byWorld.set(world, keys);
  }
  return keys;
}

/** DDP's settings with torch's defaults (gradient sync: the last micro-batch, as the HF Trainer runs it). */
function ddpSettings(plan: DdpPlan): DdpSettings {
  return { bucketView: plan.bucketView ?? false, bucketCapMb: plan.bucketCapMb ?? 25, gradientSync: plan.gradientSync ?? 'last' };
}

/** DDP's and ZeroRedundancyOptimizer's plan keys (FSDP2 and the others accept and ignore them). */
const BUCKET_KNOBS = { bucketView: boolean, bucketCapMb: number(0), gradientSync: gradientSyncKnob };

/**
 * Neither DDP nor ZeroRedundancyOptimizer offloads to host memory: a plan asking for it is a
 * VramError at `['parallel', 'offload']`.
 */
function refuseOffload(plan: DdpPlan, who: string): void {
  if (plan.offload?.optimizer !== true && plan.offload?.parameters !== true) return;
  fail('not-modelled', `${who} has no offloading to host memory (use engine 'fsdp2' with CPUOffloadPolicy, or 'deepspeed')`, {
    path: ['parallel', 'offload'],
    expected: 'absent',
    received: JSON.stringify(plan.offload),
  });
}

/**
 * torch DistributedDataParallel. Measured to keep the same bytes on every rank (worlds 2-8,
 * first and last ranks); modelled around pipeline stages (one stage per rank).
 */
export const ddpEngine: EngineRecord<'ddp', DdpPlan> = {
  name: 'ddp',
  summary: 'torch DistributedDataParallel: the whole model, gradients and optimizer state on every rank, plus the gradient buckets',
  knobs: {},
  sharedKnobs: BUCKET_KNOBS,
  check: (plan) => refuseOffload(plan, 'DistributedDataParallel'),
  wholeTrace: false,
  sameOnEveryRank: () => true,
  pipeline: true,
  planned: { byDefault: true, order: 2 },
  residency: (plan) => ddp(ddpSettings(plan)),
};

/**
 * torch ZeroRedundancyOptimizer over DDP: the optimizer state partitioned by whole parameters.
 * Its greedy partition is over the whole model's tensors (so the whole trace), and it gives the
 * ranks uneven shares.
 */
export const zeroRedundancyEngine: EngineRecord<'zero-redundancy', DdpPlan> = {
  name: 'zero-redundancy',
  summary: 'torch ZeroRedundancyOptimizer over DDP: the optimizer state partitioned by whole parameters',
  knobs: {},
  sharedKnobs: BUCKET_KNOBS,
  check: (plan) => refuseOffload(plan, 'ZeroRedundancyOptimizer'),
  wholeTrace: true,
  sameOnEveryRank: () => false,
  // The rank enters only through the parameters its optimizer steps, in order: their shapes and dtypes.
  rankKey: (_plan, group, rank, ir) => partitionsOf(ir, group)[rank]!,
  // Only the optimizer's state and step differ by rank.
  family: () => true,
  planned: { byDefault: true, order: 1 },
  residency: (plan, env) => ddp(ddpSettings(plan), { partitions: (ctx) => zeroRedundancyPartition(ctx.ir, env.group), rank: env.rank, family: env.family }),
};
