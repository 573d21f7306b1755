import { fullParameters, optimizerOver } from '../../memory/residency/kit.js';
import type { EngineHooks, RankContext } from '../../memory/residency/types.js';
import { tensorBytes } from '../../memory/step-plan.js';
import { fail } from '../../errors.js';
import { bytesOf, type DType } from '../../tensor/dtype.js';
import { add } from '../../sym/ops.js';
import { numel, tensor } from '../../tensor/spec.js';
import { parameterOrder } from '../../trace/uses.js';
import { boolean, integer, object } from '../../validate.js';
import type { CommonPlan, EngineEnv, EngineRecord } from './engine.js';

/** The plan keys Megatron reads. */
export interface MegatronKnobs {
  /**
   * Megatron-core's knobs that move memory (engine `megatron`; defaults are Megatron's):
   * `distributedOptimizer` (`use_distributed_optimizer`, default false: fp32 master parameters
   * and Adam state sharded over the data-parallel ranks, the parameters in a padded buffer),
   * `gradReduceInFp32` (`grad_reduce_in_fp32`, default false), `overlapGradReduce` (default
   * false; with it buckets of `bucketSize` elements, default max(4e7, 1e6 · dp), which move the
   * distributed optimizer's padding and shards).
   */
  readonly megatron?: {
    readonly distributedOptimizer?: boolean;
    readonly gradReduceInFp32?: boolean;
    readonly overlapGradReduce?: boolean;
    readonly bucketSize?: number;
  };
}

/** The plan Megatron reads: the common fields and its knobs. */
export type MegatronPlan = CommonPlan & MegatronKnobs;

/**
 * Megatron-core's data parallelism (`megatron.core.distributed.DistributedDataParallel` and the
 * optimizers `get_megatron_optimizer` builds), read at NVIDIA/Megatron-LM d98e8a64 (core 0.20.0)
 * and measured against it on CPU (tools/oracle/megatron_cpu.py).
 */
export interface MegatronSettings {
  /** `use_distributed_optimizer`: fp32 master parameters and optimizer state sharded over the data-parallel ranks (ZeRO-1). */
  readonly distributedOptimizer: boolean;
  /** `grad_reduce_in_fp32`: the gradient buffer in float32 (else the parameters' dtype). */
  readonly gradReduceInFp32: boolean;
  /** Bucket size in elements (`bucket_size`; null: one bucket, the default without `overlap_grad_reduce`). */
  readonly bucketSize: number | null;
  readonly dp: number;
  readonly rank: number;
}

/** Where a parameter sits in its buffer: [start, end) in elements. */
export interface MegatronPlacement {
  readonly id: number;
  readonly start: number;
  readonly end: number;
}

/** One gradient (and, with the distributed optimizer, parameter) buffer: its padded size, its buckets. */
export interface MegatronBuffer {
  readonly paramDtype: DType;
  readonly gradDtype: DType;
  /** Elements, with the distributed optimizer's padding. */
  readonly numel: number;
  readonly buckets: readonly { readonly start: number; readonly numel: number }[];
  readonly params: readonly MegatronPlacement[];
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
const roundUp = (n: number, k: number): number => Math.ceil(n / k) * k;

/**
 * The buffers Megatron's DDP builds: one per (parameter dtype, gradient dtype), parameters in
 * reverse registration order. Without the distributed optimizer they are packed
 * (`_compute_default_per_buffer_param_layout`, param_and_grad_buffer.py:954-1002); with it each
 * parameter starts on a multiple of 64 elements and each bucket ends on a multiple of
 * lcm(dp, 128) (distrib_optimizer.py:506-589, param_layout.py:24-42). A bucket closes after the
 * parameter that brings it to `bucketSize` elements.
 *
 * @example
 * ```ts
 * import { megatronBuffers } from 'vram-ts/internals';
 * const params = [{ id: 0, numel: 65536, dtype: 'bfloat16' as const }, { id: 1, numel: 256, dtype: 'bfloat16' as const }];
 * const [b] = megatronBuffers(params, { distributedOptimizer: true, gradReduceInFp32: false, bucketSize: null, dp: 2, rank: 0 });
 * console.log(b!.numel, b!.params.map((p) => [p.id, p.start])); // 65792 [ [ 1, 0 ], [ 0, 256 ] ]
 * ```
 */
export function megatronBuffers(
  params: readonly { readonly id: number; readonly numel: number; readonly dtype: DType }[],
  settings: MegatronSettings,
): MegatronBuffer[] {
  const groups = new Map<string, { paramDtype: DType; gradDtype: DType; params: { id: number; numel: number }[] }>();
  for (const p of [...params].reverse()) {
    const gradDtype: DType = settings.gradReduceInFp32 ? 'float32' : p.dtype;
    const key = `${p.dtype}|${gradDtype}`;
    const group = groups.get(key) ?? { paramDtype: p.dtype, gradDtype, params: [] };
    groups.set(key, group);
    group.params.push(p);
  }
  const padded = settings.distributedOptimizer;
  const bucketEnd = (settings.dp * 128) / gcd(settings.dp, 128);
  return [...groups.values()].map((group) => {
    const placed: MegatronPlacement[] = [];
    const buckets: { start: number; numel: number }[] = [];
    let bucketStart = 0;
    let cursor = 0;
    const close = () => {
      const end = padded ? roundUp(cursor, bucketEnd) : cursor;
      buckets.push({ start: bucketStart, numel: end - bucketStart });
      bucketStart = end;
      cursor = end;
    };
    group.params.forEach((p, i) => {
      const start = padded ? roundUp(cursor, 64) : cursor;
      placed.push({ id: p.id, start, end: start + p.numel });
      cursor = start + p.numel;
      if (settings.bucketSize !== null && cursor - bucketStart >= settings.bucketSize && i < group.params.length - 1) close();
    });
    close();
    return { paramDtype: group.paramDtype, gradDtype: group.gradDtype, numel: cursor, buckets, params: placed };
  });
}

/**
 * The pieces of each parameter a rank's distributed optimizer owns: each bucket cut into dp equal
 * ranges, the rank's range intersected with the parameters (padding owned by nobody;
 * `_build_model_gbuf_param_range_map`, distrib_optimizer.py:226-244). Element counts by parameter.
 *
 * @example
 * ```ts
 * import { megatronBuffers, megatronShard } from 'vram-ts/internals';
 * const params = [{ id: 0, numel: 65536, dtype: 'bfloat16' as const }, { id: 1, numel: 256, dtype: 'bfloat16' as const }];
 * const [b] = megatronBuffers(params, { distributedOptimizer: true, gradReduceInFp32: false, bucketSize: null, dp: 2, rank: 0 });
 * console.log([...megatronShard(b!, 2, 0)], [...megatronShard(b!, 2, 1)]); // [ [ 1, 256 ], [ 0, 32640 ] ] [ [ 0, 32896 ] ]
 * ```
 */
export function megatronShard(buffer: MegatronBuffer, dp: number, rank: number): Map<number, number> {
  const pieces = new Map<number, number>();
  for (const bucket of buffer.buckets) {
    const size = bucket.numel / dp;
    const lo = bucket.start + rank * size;
    const hi = lo + size;
    for (const p of buffer.params) {
      const n = Math.min(hi, p.end) - Math.max(lo, p.start);
      if (n > 0) pieces.set(p.id, (pieces.get(p.id) ?? 0) + n);
    }
  }
  return pieces;
}

/**
 * One rank of Megatron-core's data parallelism:
 * - at DDP construction, a gradient buffer the model's size (padded with the distributed
 *   optimizer) in float32 or the parameters' dtype, every `main_grad` a view of it, kept for
 *   the run; with the distributed optimizer a parameter buffer replaces the module's parameters;
 * - the optimizer: FP32Optimizer keeps nothing more, Float16Optimizer an fp32 copy of every
 *   parameter, the distributed optimizer an fp32 copy of the rank's shard (none for fp32
 *   parameters: views) and the optimizer state over the shard;
 * - in backward autograd's `.grad` of each parameter lives until the hook adds it to
 *   `main_grad` (on CPU a bf16 gradient added to an fp32 buffer makes an fp32 copy for the add);
 * - the reduction runs in place (NCCL: nothing more; gloo's staging copies are not modelled);
 * - at the step, a bf16 gradient buffer is copied to fp32 main gradients (the whole model's, or
 *   the shard's), kept until the next `zero_grad`.
 */
export function megatron(settings: MegatronSettings): (ctx: RankContext) => EngineHooks {
  return (ctx) => {
    const { ir, ledger } = ctx;
    const { distributed, dtypeOf, optimizer, masterBytes, mainGradBytes, gradBufferBytes, paramBufferBytes } = megatronLayout(ctx, settings);
    const { trainable } = ctx;
    const pending: number[] = [];
    let mainGrads: number | null = null;
    return {
      param: (storage) => {
        // The distributed optimizer's parameter buffer replaces the trainable parameters' storages.
        if (distributed && ir.storages[storage]!.trainable) return;
        ledger.alloc(ir.storages[storage]!.bytes, 'parameters', 1, ctx.owner(storage));
      },
      start() {
        if (distributed) ledger.alloc(paramBufferBytes, 'parameters');
        ledger.alloc(gradBufferBytes, 'gradients');
        if (masterBytes > 0) ledger.alloc(masterBytes, 'optimizer');
        const grads: number[] = [];
        if (mainGradBytes > 0) {
          mainGrads = ledger.alloc(mainGradBytes, 'gradients');
          grads.push(mainGrads);
        }
        return { grads, state: optimizer.allocateState() };
      },
      zeroGrad() {
        // The fp32 main gradients go with `zero_grad()`; the buffer is zeroed in place.
        if (mainGrads !== null) ledger.release(mainGrads);
        mainGrads = null;
      },
      paramGrads(op) {
        for (const param of op.params) if (trainable(param)) pending.push(ledger.alloc(tensorBytes(ir, param), 'activationGrads'));
      },
      afterBackward(op, label) {
        // The hook: `main_grad.add_(param.grad)`; `param.grad = None`.
        if (pending.length === 0) return;
        if (ir.settings.device === 'cpu' && settings.gradReduceInFp32) {
          const copies = op.params
            .filter((p) => trainable(p) && dtypeOf(p) !== 'float32')
            .map((p) => ledger.alloc(bytesOf(numel(ir.tensors[p]!.spec), 'float32'), 'temporaries'));
          if (copies.length > 0) ledger.record('backward', `${label} (main_grad.add_: fp32 copy)`);
          for (const block of copies) ledger.release(block);
        }
        for (const block of pending) ledger.release(block);
        pending.length = 0;
      },
      step() {
        if (ctx.optimizer === null) return;
        if (mainGradBytes > 0) {
          mainGrads = ledger.alloc(mainGradBytes, 'gradients');
          ledger.record('step', 'prepare_grads (fp32 main gradients)');
        }
        optimizer.step();
      },
      optimizerState: () => add(optimizer.optimizerState(), masterBytes),
      resident: () => ({
        parameters: distributed
          ? paramBufferBytes + sumFrozen(ctx)
          : ctx.plan.trainable.reduce((s, id) => s + (tensorBytes(ir, id) as number), 0) + sumFrozen(ctx),
        gradients: gradBufferBytes,
      }),
    };
  };
}

/** What one rank's Megatron buffers and optimizer hold: the buffers, the stepped parameters, the fp32 copies' bytes. */
function megatronLayout(ctx: RankContext, settings: MegatronSettings) {
  const { ir, plan } = ctx;
  const entries = fullParameters(ctx);
  const buffers = megatronBuffers(entries, settings);
  const distributed = settings.distributedOptimizer;
  const pieces = new Map<number, number>();
  if (distributed) for (const b of buffers) for (const [id, n] of megatronShard(b, settings.dp, settings.rank)) pieces.set(id, n);
  const dtypeOf = (id: number) => ir.tensors[id]!.spec.dtype;
  // The parameters the inner optimizer steps, in float32: whole, or the rank's pieces.
  const whole = new Map(entries.map((e) => [e.id, e.numel]));
  const mainNumel = (id: number) => (distributed ? (pieces.get(id) ?? 0) : (whole.get(id) ?? 0));
  // `_get_param_groups`: the default group first, then biases and 1-D parameters (no weight
  // decay), each in registration order; the inner optimizer steps them group by group.
  const noDecay = (id: number) => ir.tensors[id]!.spec.shape.length <= 1 || (ir.tensors[id]!.key ?? '').endsWith('.bias');
  const trainableIds = new Set(plan.trainable);
  const owned = parameterOrder(ir).filter((id) => trainableIds.has(id) && mainNumel(id) > 0);
  const stepped = [...owned.filter((id) => !noDecay(id)), ...owned.filter(noDecay)];
  const optimizer = optimizerOver(ctx, ctx.optimizer === null ? [] : stepped, (id) => tensor([mainNumel(id)], 'float32'), true);
  const mainBytes = (id: number) => bytesOf(mainNumel(id), 'float32') as number;
  // fp32 master copies: of 16-bit parameters only (fp32 ones are stepped in place, or viewed).
  const masterBytes = ctx.optimizer === null ? 0 : stepped.filter((id) => dtypeOf(id) !== 'float32').reduce((s, id) => s + mainBytes(id), 0);
  // fp32 main gradients copied from a 16-bit gradient buffer at each step.
  const mainGradBytes =
    ctx.optimizer === null
      ? 0
      : stepped.filter((id) => (settings.gradReduceInFp32 ? 'float32' : dtypeOf(id)) !== 'float32').reduce((s, id) => s + mainBytes(id), 0);
  const gradBufferBytes = buffers.reduce((s, b) => s + (bytesOf(b.numel, b.gradDtype) as number), 0);
  const paramBufferBytes = buffers.reduce((s, b) => s + (bytesOf(b.numel, b.paramDtype) as number), 0);
  return { distributed, dtypeOf, optimizer, masterBytes, mainGradBytes, gradBufferBytes, paramBufferBytes };
}

/** Bytes of the parameters that take no gradient (not in Megatron's buffers). */
function sumFrozen(ctx: RankContext): number {
  const { ir } = ctx;
  const seen = new Set<number>();
  let total = 0;
  for (const t of ir.tensors) {
    if (t.role !== 'param' || ir.storages[t.storage]!.trainable || seen.has(t.storage)) continue;
    seen.add(t.storage);
    total += ir.storages[t.storage]!.bytes as number;
  }
  return total;
}

/** Megatron's settings with its defaults (one bucket without overlapGradReduce, else max(4e7, 1e6 · dp) elements). */
function megatronSettings(plan: MegatronPlan, env: EngineEnv): MegatronSettings {
  const m = plan.megatron ?? {};
  const overlap = m.overlapGradReduce ?? false;
  return {
    distributedOptimizer: m.distributedOptimizer ?? false,
    gradReduceInFp32: m.gradReduceInFp32 ?? false,
    bucketSize: overlap ? (m.bucketSize ?? Math.max(40_000_000, 1_000_000 * env.group)) : null,
    dp: env.group,
    rank: env.rank,
  };
}

function checkMegatron(plan: MegatronPlan): void {
  if (plan.offload?.optimizer === true || plan.offload?.parameters === true)
    fail('not-modelled', "Megatron's optimizer offloading is not modelled (use engine 'fsdp2' with CPUOffloadPolicy, or 'deepspeed')", {
      path: ['parallel', 'offload'],
      expected: 'absent',
      received: JSON.stringify(plan.offload),
    });
  if (plan.megatron?.bucketSize !== undefined && plan.megatron.overlapGradReduce !== true)
    fail('bad-option', 'Megatron buckets only with overlapGradReduce (without it one bucket)', {
      path: ['parallel', 'megatron', 'bucketSize'],
      expected: 'overlapGradReduce: true',
      received: String(plan.megatron.bucketSize),
    });
}

/**
 * Megatron-core's DistributedDataParallel and its optimizers. Its buffer layout and shards
 * follow every parameter of the model, so it needs the whole trace.
 */
export const megatronEngine: EngineRecord<'megatron', MegatronPlan> = {
  name: 'megatron',
  summary: "Megatron-core's DistributedDataParallel: the padded parameter and gradient buffers, and optionally the distributed optimizer",
  knobs: { megatron: object({ fields: { distributedOptimizer: boolean, gradReduceInFp32: boolean, overlapGradReduce: boolean, bucketSize: integer(1) } }) },
  check: checkMegatron,
  wholeTrace: true,
  sameOnEveryRank: () => false,
  planned: { byDefault: false, order: 4 },
  residency: (plan, env) => megatron(megatronSettings(plan, env)),
};
