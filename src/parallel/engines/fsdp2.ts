import { optimizerOver, weigh } from '../../memory/residency/kit.js';
import type { EngineHooks, HostBytes, RankContext } from '../../memory/residency/types.js';
import { gradientBytes, tensorBytes } from '../../memory/step-plan.js';
import { fail } from '../../errors.js';
import type { Dim } from '../../sym/expr.js';
import { mul, sum } from '../../sym/ops.js';
import { bytesOf, DTYPE_BITS, type DType } from '../../tensor/dtype.js';
import { tensor, type TensorSpec } from '../../tensor/spec.js';
import type { IR, IROp } from '../../trace/ir.js';
import { anyOf, arrayOf, boolean, object, oneOf, string } from '../../validate.js';
import { chunking, labelOf, unitsOf, type Fsdp2UnitSpec, type Unit } from './fsdp2-units.js';
import { gradientSyncKnob, type CommonPlan, type EngineEnv, type EngineRecord, type GradientSyncKnob } from './engine.js';

/** The plan keys FSDP2 reads. */
export interface Fsdp2Knobs extends GradientSyncKnob {
  /**
   * FSDP2: what is wrapped with `fully_shard` besides the root, in order: module keys, or groups of
   * modules wrapped by one call (default: the model's repeated blocks).
   */
  readonly units?: readonly Fsdp2UnitSpec[];
  /** FSDP2 `reshard_after_forward` of the non-root units that do not give their own (default true). */
  readonly reshardAfterForward?: boolean;
  /** FSDP2 `MixedPrecisionPolicy`: compute (all-gather) and reduce dtypes; parameters stay stored in the model's dtype. */
  readonly mixedPrecision?: { readonly param?: DType; readonly reduce?: DType };
}

/** The plan FSDP2 reads: the common fields and its knobs. */
export type Fsdp2Plan = CommonPlan & Fsdp2Knobs;

/** torch FSDP2 (`fully_shard`) on one rank of a data-parallel mesh. */
export interface Fsdp2Settings {
  /** Shard degree d (the data-parallel mesh size). */
  readonly shards: number;
  readonly rank: number;
  /** Units wrapped with `fully_shard` (each its own parameter group); the root is always one. */
  readonly units: readonly Fsdp2UnitSpec[];
  /** Whether `units` are the user's (each must name a module: a VramError otherwise) or the defaults. */
  readonly unitsGiven: boolean;
  /** `reshard_after_forward` of the non-root units that give none (the root keeps its parameters: FSDP2's default). */
  readonly reshardAfterForward: boolean;
  /** dtype the parameters are stored (sharded) in; the trace's parameters are the compute dtype (`param_dtype`). */
  readonly storeDtype: (param: number) => DType;
  /** `MixedPrecisionPolicy.reduce_dtype` (default: the compute dtype). */
  readonly reduceDtype: DType | null;
  /** Micro-batches that reduce-scatter: every one, or the last (`set_requires_gradient_sync(False)` before). */
  readonly gradientSync: 'every' | 'last';
  /**
   * `offload_policy=CPUOffloadPolicy()`: sharded parameters, their sharded gradients and the
   * optimizer state (and step) on the host (default false).
   */
  readonly offload?: boolean;
}

/** One rank's FSDP2 over a step: its units and every block it holds between hooks. */
interface Fsdp2State {
  readonly ctx: RankContext;
  readonly settings: Fsdp2Settings;
  /** The shard degree. */
  readonly d: number;
  readonly offload: boolean;
  readonly units: readonly Unit[];
  /** Backward runs the units in reverse post-forward order; each prefetches the next. */
  readonly backwardOrder: readonly Unit[];
  readonly optimizer: ReturnType<typeof optimizerOver>;
  /** Per unit: sharded gradients (one tensor: the reduce-scatter output). */
  readonly shardedGrads: Map<Unit, number>;
  /** Per unit: its unsharded parameter blocks. */
  readonly unsharded: Map<Unit, number[]>;
  readonly unshardedGrads: Map<number, number>;
  /** Unsharded gradients upcast to the reduce dtype, kept across micro-batches that do not reduce. */
  readonly accumulated: Map<number, number>;
  /** AccumulateGrad's incoming gradient while the node still runs, when `.grad` exists. */
  readonly inPlace: number[];
  readonly prefetched: Map<Unit, number>;
  readonly backwardStarted: Set<Unit>;
  readonly backwardDone: Set<Unit>;
  heldGather: number | null;
  heldReduce: number | null;
}

const storeBytes = (s: Fsdp2State, param: number): Dim => {
  const { rows, rest } = chunking(s.ctx.ir.tensors[param]!.spec, s.d);
  return bytesOf(mul(rows, rest), s.settings.storeDtype(param));
};

/** The rank's unpadded chunk of a parameter, in the stored dtype (what its optimizer state covers). */
const localSpec = (ir: IR, settings: Fsdp2Settings, param: number): TensorSpec => {
  const spec = ir.tensors[param]!.spec;
  const { rows, dim0 } = chunking(spec, settings.shards);
  const mine = Math.max(0, Math.min(rows, dim0 - settings.rank * rows));
  return tensor(spec.shape.length === 0 ? [mine] : [mine, ...spec.shape.slice(1)], settings.storeDtype(param));
};

const ownerOfUnit = (s: Fsdp2State, unit: Unit) => (unit.params.length === 0 ? -1 : s.ctx.owner(s.ctx.ir.tensors[unit.params[0]!]!.storage));
const gatherDtype = (s: Fsdp2State, unit: Unit): DType => (unit.params.length === 0 ? 'float32' : s.ctx.ir.tensors[unit.params[0]!]!.spec.dtype);
const reduceDtype = (s: Fsdp2State, unit: Unit): DType => s.settings.reduceDtype ?? gatherDtype(s, unit);
const storeDtypeOf = (s: Fsdp2State, unit: Unit): DType => (unit.params.length === 0 ? 'float32' : s.settings.storeDtype(unit.params[0]!));
const syncing = (s: Fsdp2State) => s.settings.gradientSync === 'every' || s.ctx.microDone() === s.ctx.microBatches - 1;

function copyOut(s: Fsdp2State, unit: Unit): void {
  const { ir, ledger } = s.ctx;
  s.unsharded.set(
    unit,
    unit.params.map((p) => {
      const { rows, rest } = chunking(ir.tensors[p]!.spec, s.d);
      return ledger.alloc(bytesOf(mul(rows * s.d, rest), gatherDtype(s, unit)), 'parameters');
    }),
  );
}

function reshard(s: Fsdp2State, unit: Unit): void {
  for (const block of s.unsharded.get(unit) ?? []) s.ctx.ledger.release(block);
  s.unsharded.delete(unit);
}

/**
 * The unit's all-gather output; with CPUOffloadPolicy the sharded parameters are first copied to
 * the GPU (compute dtype), the output made, copied in, then the copies go (`del param_all_gather_inputs`).
 */
function gather(s: Fsdp2State, unit: Unit, phase: 'forward' | 'backward', label: string): number {
  const { ledger } = s.ctx;
  const gatherBlock = () => ledger.alloc(bytesOf(unit.gathered, gatherDtype(s, unit)), 'communication');
  if (!s.offload) return gatherBlock();
  const copies = ledger.alloc(bytesOf(unit.shardNumel, gatherDtype(s, unit)), 'communication');
  const output = gatherBlock();
  ledger.record(phase, `${label} (FSDP sharded parameters copied from the host)`);
  ledger.release(copies);
  return output;
}

function unshardForward(s: Fsdp2State, unit: Unit, label: string): void {
  if (s.unsharded.has(unit) || unit.params.length === 0) return;
  const { ledger } = s.ctx;
  const block = gather(s, unit, 'forward', label);
  ledger.record('forward', `${label} (FSDP all-gather)`);
  // wait_for_unshard drops the previous unit's all-gather output before the copy-out, but its
  // local `prev_all_gather_state` keeps it until the function returns, after the copy-out.
  copyOut(s, unit);
  ledger.record('forward', `${label} (FSDP all-gather copy-out)`);
  if (s.heldGather !== null) ledger.release(s.heldGather);
  s.heldGather = block;
}

function unshardBackward(s: Fsdp2State, unit: Unit, label: string): void {
  if (s.unsharded.has(unit) || unit.params.length === 0) return;
  const { ledger } = s.ctx;
  const block = s.prefetched.get(unit) ?? gather(s, unit, 'backward', label);
  s.prefetched.delete(unit);
  // wait_for_unshard frees the all-gather output forward left held.
  if (s.heldGather !== null) ledger.release(s.heldGather);
  s.heldGather = null;
  copyOut(s, unit);
  ledger.record('backward', `${label} (FSDP all-gather)`);
  ledger.release(block);
}

function preBackward(s: Fsdp2State, unit: Unit, label: string): void {
  s.backwardStarted.add(unit);
  unshardBackward(s, unit, label);
  const next = s.backwardOrder[s.backwardOrder.indexOf(unit) + 1];
  if (next !== undefined && !s.unsharded.has(next) && !s.prefetched.has(next) && next.params.length > 0)
    s.prefetched.set(next, gather(s, next, 'backward', `${label} prefetch`));
}

/** A unit's post-backward counts for its own block, whichever op's hook runs it. */
function inUnit(s: Fsdp2State, unit: Unit, after: number, run: () => void): void {
  const { ctx } = s;
  if (ctx.unitOfOp === null) {
    run();
    return;
  }
  ctx.ledger.setUnit(ctx.unitOfOp(unit.firstOp));
  run();
  ctx.ledger.setUnit(after);
}

function postBackward(s: Fsdp2State, unit: Unit, label: string): void {
  const { ir, ledger } = s.ctx;
  s.backwardDone.add(unit);
  // A gradient placed otherwise than its DTensor parameter (the vocab-parallel embedding's
  // Replicate [V, h] under tensor parallelism) is redistributed to the parameter's placement
  // first: the local copy is made while the whole one lives (measured, FSDP2 × TP).
  for (const p of unit.params) {
    const whole = s.unshardedGrads.get(p);
    if (whole === undefined || ir.tensors[p]!.gradSpec === undefined) continue;
    const local = ledger.alloc(tensorBytes(ir, p), 'gradients');
    ledger.record('backward', `${label} (${ir.tensors[p]!.key ?? p} gradient redistributed)`);
    ledger.release(whole);
    s.unshardedGrads.set(p, local);
  }
  // post_backward_accumulate: a reduce-dtype gradient kept from a micro-batch that did not
  // reduce takes this one's in place (mixed dtypes: no temporary).
  for (const p of unit.params) {
    if (!s.accumulated.has(p) || !s.unshardedGrads.has(p)) continue;
    ledger.release(s.unshardedGrads.get(p)!);
    s.unshardedGrads.delete(p);
  }
  reshard(s, unit);
  if (syncing(s)) reduceScatter(s, unit, label);
  else keepUnreduced(s, unit, label);
}

/**
 * No reduce-scatter: the unsharded gradients stay; in another reduce dtype they are kept upcast
 * (to_accumulated_grad_if_needed: the copy is made before the original goes).
 */
function keepUnreduced(s: Fsdp2State, unit: Unit, label: string): void {
  const { ir, ledger } = s.ctx;
  if (reduceDtype(s, unit) === gatherDtype(s, unit)) return;
  for (const p of unit.params) {
    const grad = s.unshardedGrads.get(p);
    if (grad === undefined) continue;
    s.accumulated.set(
      p,
      ledger.alloc(
        bytesOf(
          ir.tensors[p]!.spec.shape.reduce<Dim>((a, b) => mul(a, b), 1),
          reduceDtype(s, unit),
        ),
        'gradients',
      ),
    );
    ledger.record('backward', `${label} (FSDP gradient kept in ${reduceDtype(s, unit)})`);
    ledger.release(grad);
    s.unshardedGrads.delete(p);
  }
}

/** The unit's reduce-scatter: its padded input made, the unsharded gradients gone, the shard made. */
function reduceScatter(s: Fsdp2State, unit: Unit, label: string): void {
  const { ir, ledger } = s.ctx;
  const d = s.d;
  const grads = unit.params.filter((p) => s.unshardedGrads.has(p) || s.accumulated.has(p));
  if (grads.length === 0) return;
  if (s.heldReduce !== null) ledger.release(s.heldReduce);
  const input = ledger.alloc(bytesOf(mul(unit.shardNumel, d), reduceDtype(s, unit)), 'communication');
  // chunk_cat's CPU kernel first pads every gradient whose dim 0 does not divide by d into a
  // copy of the padded size (measured, PyTorch 2.13 CPU); CUDA's fused kernel writes in place.
  if (ir.settings.device === 'cpu') {
    const padded = grads.flatMap((p) => {
      const { rows, rest, dim0 } = chunking(ir.tensors[p]!.spec, d);
      return dim0 % d === 0
        ? []
        : [ledger.alloc(bytesOf(mul(rows * d, rest), s.accumulated.has(p) ? reduceDtype(s, unit) : gatherDtype(s, unit)), 'temporaries')];
    });
    if (padded.length > 0) ledger.record('backward', `${label} (FSDP reduce-scatter copy-in, padded)`);
    for (const block of padded) ledger.release(block);
  }
  for (const p of grads) {
    const block = s.accumulated.get(p) ?? s.unshardedGrads.get(p)!;
    ledger.release(block);
    s.accumulated.delete(p);
    s.unshardedGrads.delete(p);
  }
  reduceScatterOutput(s, unit, label);
  s.heldReduce = input;
}

/** The reduce-scatter output (cast to the stored dtype when the reduce dtype differs): the shard's gradient, or copied to the host. */
function reduceScatterOutput(s: Fsdp2State, unit: Unit, label: string): void {
  const { ledger } = s.ctx;
  const cast = reduceDtype(s, unit) !== storeDtypeOf(s, unit);
  if (s.offload) {
    // The output (cast to the stored dtype when needed) is copied to the host; nothing of it stays on the GPU.
    const output = ledger.alloc(bytesOf(unit.shardNumel, reduceDtype(s, unit)), 'communication');
    ledger.record('backward', `${label} (FSDP reduce-scatter)`);
    const stored = cast ? ledger.alloc(bytesOf(unit.shardNumel, storeDtypeOf(s, unit)), 'communication') : null;
    ledger.release(output);
    if (stored !== null) ledger.release(stored);
    return;
  }
  let output = ledger.alloc(bytesOf(unit.shardNumel, reduceDtype(s, unit)), cast ? 'communication' : 'gradients', 1, ownerOfUnit(s, unit));
  ledger.record('backward', `${label} (FSDP reduce-scatter)`);
  if (cast) {
    const stored = ledger.alloc(bytesOf(unit.shardNumel, storeDtypeOf(s, unit)), 'gradients', 1, ownerOfUnit(s, unit));
    ledger.release(output);
    output = stored;
  }
  const existing = s.shardedGrads.get(unit);
  if (existing === undefined) s.shardedGrads.set(unit, output);
  else ledger.release(output);
}

const unitsAt = (s: Fsdp2State, op: IROp) => s.units.filter((u) => u.firstOp <= op.index && op.index < u.endOp);
/** Outer units first: the root's pre-hooks run before a nested unit's. */
const outerFirst = (a: Unit, b: Unit) => a.firstOp - b.firstOp || b.endOp - a.endOp;

function start(s: Fsdp2State): { readonly grads: readonly number[]; readonly state: readonly number[] } {
  const { ir, ledger } = s.ctx;
  // CPUOffloadPolicy: the shards, their gradients and the optimizer state are all on the host.
  if (s.offload) return { grads: [], state: [] };
  // The sharded parameters, last step's sharded gradients, the optimizer state on the local chunks.
  for (const unit of s.units) for (const p of unit.params) ledger.alloc(storeBytes(s, p), 'parameters', 1, s.ctx.owner(ir.tensors[p]!.storage));
  const grads = s.units
    .filter((u) => u.params.some(s.ctx.trainable))
    .map((unit) => {
      const block = ledger.alloc(bytesOf(unit.shardNumel, storeDtypeOf(s, unit)), 'gradients', 1, ownerOfUnit(s, unit));
      s.shardedGrads.set(unit, block);
      return block;
    });
  return { grads, state: s.optimizer.allocateState() };
}

/** The module hooks: unshard before a unit's forward and backward, reshard and reduce after. */
function moduleHooks(s: Fsdp2State): Pick<EngineHooks, 'beforeForward' | 'afterForward' | 'beforeBackward' | 'endBackward'> {
  const { ir, ledger } = s.ctx;
  return {
    beforeForward(op, micro) {
      for (const unit of unitsAt(s, op).sort(outerFirst)) if (unit.firstOp === op.index) unshardForward(s, unit, `${micro}${labelOf(ir, unit)}`);
    },
    afterForward(op) {
      for (const unit of unitsAt(s, op)) {
        if (unit.endOp - 1 !== op.index) continue;
        if (unit.reshard) reshard(s, unit);
        // The root's post-forward frees the last all-gather output (_fsdp_state.py _post_forward).
        if (unit.root && s.heldGather !== null) {
          ledger.release(s.heldGather);
          s.heldGather = null;
        }
      }
    },
    beforeBackward(op, micro) {
      // Units the backward has left run their post-backward; the ones it enters their pre-backward.
      const here = s.ctx.unitOfOp?.(op.index) ?? -1;
      for (const unit of s.backwardOrder)
        if (s.backwardStarted.has(unit) && !s.backwardDone.has(unit) && !(unit.firstOp <= op.index && op.index < unit.endOp))
          inUnit(s, unit, here, () => postBackward(s, unit, `${micro}${labelOf(ir, unit)}`));
      for (const unit of unitsAt(s, op).sort(outerFirst)) if (!s.backwardStarted.has(unit)) preBackward(s, unit, `${micro}${labelOf(ir, unit)}`);
    },
    endBackward(prefix) {
      // The root's final callback: every unit not yet reduced is, then the held buffers go.
      for (const unit of s.backwardOrder)
        if (s.backwardStarted.has(unit) && !s.backwardDone.has(unit)) inUnit(s, unit, -1, () => postBackward(s, unit, `${prefix}${labelOf(ir, unit)}`));
      s.backwardStarted.clear();
      s.backwardDone.clear();
      if (s.heldReduce !== null) ledger.release(s.heldReduce);
      s.heldReduce = null;
      for (const block of s.prefetched.values()) ledger.release(block);
      s.prefetched.clear();
      if (s.heldGather !== null) ledger.release(s.heldGather);
      s.heldGather = null;
      for (const unit of [...s.unsharded.keys()]) reshard(s, unit);
    },
  };
}

/** What the rank keeps between steps: on the GPU (`resident`), or on the host with CPUOffloadPolicy. */
function reports(s: Fsdp2State): Pick<EngineHooks, 'resident' | 'host'> {
  const { ir } = s.ctx;
  const counted = (bytes: Dim, owner: number) => weigh(bytes, owner, s.ctx.times);
  const ownerOf = (p: number) => s.ctx.owner(ir.tensors[p]!.storage);
  const parameters = () => sum(s.units.flatMap((unit) => unit.params.map((p) => counted(storeBytes(s, p), ownerOf(p)))));
  const localNumel = (param: number) => localSpec(ir, s.settings, param).shape.reduce<Dim>((a, b) => mul(a, b), 1);
  const host = (): HostBytes => ({
    parameters: parameters(),
    // One host tensor per parameter of its unpadded local chunk (the reduce-scatter output's view copied out).
    gradients: sum(
      s.units.flatMap((unit) => unit.params.filter(s.ctx.trainable).map((p) => counted(bytesOf(localNumel(p), s.settings.storeDtype(p)), ownerOf(p)))),
    ),
    optimizer: s.optimizer.hostState(),
    staging: 0,
  });
  return {
    ...(s.offload ? { host } : {}),
    resident: () => {
      if (s.offload) return { parameters: 0, gradients: 0 };
      return {
        parameters: parameters(),
        gradients: sum(
          s.units.filter((u) => u.params.some(s.ctx.trainable)).map((unit) => counted(bytesOf(unit.shardNumel, storeDtypeOf(s, unit)), ownerOfUnit(s, unit))),
        ),
      };
    },
  };
}

/**
 * One rank of FSDP2, read from torch/distributed/fsdp/_fully_shard (`_fsdp_param.py`,
 * `_fsdp_param_group.py`, `_fsdp_collectives.py`, `_fully_shard.py`):
 * - every parameter is a dim-0 chunk padded to ⌈dim0/d⌉ rows, stored in its own tensor (the same
 *   size on every rank); the optimizer state covers the unpadded chunk (rank-dependent);
 * - forward, unit k: all-gather output of the unit's padded unsharded size in the compute dtype,
 *   then copy-out into the unsharded parameters (the same size again); the previous unit's
 *   all-gather output is freed just before the copy-out; after the unit's forward its unsharded
 *   parameters go (reshard_after_forward; the root keeps its own);
 * - backward, unit k: unshard again (its all-gather output freed right after copy-out), prefetch
 *   of the next unit's all-gather; after the unit's backward its unsharded parameters go, the
 *   previous reduce-scatter input is freed, its own (padded, reduce dtype) is made, the unsharded
 *   gradients go, the reduce-scatter output (a shard) is made — cast to the stored dtype when the
 *   reduce dtype differs — and holds the sharded gradients (added to existing ones under
 *   gradient accumulation); the reduce-scatter input is held until the next reduce.
 * With `CPUOffloadPolicy` (`_fsdp_api.py:183-196`, read at PyTorch 2.13): the padded
 * sharded parameters live on the host (`_fsdp_param.py:312-315`, `.cpu()`); each all-gather first
 * copies every sharded parameter to the GPU in the compute dtype (`all_gather_inputs`,
 * `_fsdp_param.py:896-900`; no foreach copy-in with offload, `_fsdp_collectives.py:385-393`),
 * these copies live beside the all-gather output until the copy-in (`foreach_all_gather`,
 * `_fsdp_collectives.py:337-361`); the reduce-scatter output is copied to the host per parameter
 * (`.to(cpu)`, `_fsdp_collectives.py:711-743`, unpadded `sharded_size` views) and freed on the GPU
 * when `foreach_reduce` returns; the sharded gradients, so the optimizer and its state, are on the
 * host, and the step allocates nothing on the GPU.
 * Read from the sources; not measured (no FSDP2 on PyTorch 1.13).
 */
export function fsdp2(settings: Fsdp2Settings): (ctx: RankContext) => EngineHooks {
  return (ctx) => {
    const units = unitsOf(ctx.ir, settings);
    const s: Fsdp2State = {
      ctx,
      settings,
      d: settings.shards,
      offload: settings.offload === true,
      units,
      backwardOrder: [...units].sort((a, b) => b.endOp - a.endOp || a.firstOp - b.firstOp),
      // The sharded gradients carry their parameters' placements (measured, FSDP2 × TP, torch 2.13).
      optimizer: optimizerOver(ctx, ctx.optimizer === null ? [] : ctx.plan.trainable, (param) => localSpec(ctx.ir, settings, param), true),
      shardedGrads: new Map(),
      unsharded: new Map(),
      unshardedGrads: new Map(),
      accumulated: new Map(),
      inPlace: [],
      prefetched: new Map(),
      backwardStarted: new Set(),
      backwardDone: new Set(),
      heldGather: null,
      heldReduce: null,
    };
    const { ir, ledger } = ctx;
    return {
      start: () => start(s),
      zeroGrad() {
        for (const block of s.shardedGrads.values()) ledger.release(block);
        s.shardedGrads.clear();
        s.backwardStarted.clear();
        s.backwardDone.clear();
      },
      ...moduleHooks(s),
      paramGrads(op) {
        // Autograd's unsharded gradients, in the compute dtype; a second one is added in place.
        for (const param of op.params) {
          if (!ctx.trainable(param)) continue;
          if (s.unshardedGrads.has(param)) s.inPlace.push(ledger.alloc(gradientBytes(ir, param), 'temporaries'));
          else s.unshardedGrads.set(param, ledger.alloc(gradientBytes(ir, param), 'gradients'));
        }
      },
      afterBackward() {
        for (const block of s.inPlace) ledger.release(block);
        s.inPlace.length = 0;
      },
      // The optimizer steps on the CPU tensors (CPUOffloadPolicy): no GPU temporaries.
      step: s.offload ? () => ledger.record('step', 'optimizer step on the host (FSDP2 CPUOffloadPolicy)') : s.optimizer.step,
      optimizerState: s.offload ? () => 0 : s.optimizer.optimizerState,
      ...reports(s),
    };
  };
}

/** FSDP2 with torch's defaults: the model's repeated blocks as units, `reshard_after_forward`, every micro-batch reducing. */
function fsdp2Settings(plan: Fsdp2Plan, env: EngineEnv): Fsdp2Settings {
  return {
    shards: env.group,
    rank: env.rank,
    units: plan.units ?? env.defaultUnits,
    unitsGiven: plan.units !== undefined,
    gradientSync: plan.gradientSync ?? 'every',
    reshardAfterForward: plan.reshardAfterForward ?? true,
    storeDtype: () => env.storeDtype,
    reduceDtype: plan.mixedPrecision?.reduce ?? null,
    offload: env.offloads,
  };
}

/** CPUOffloadPolicy (_fsdp_api.py): parameters, gradients and optimizer state together, so both flags. */
function checkFsdp2(plan: Fsdp2Plan): void {
  if (plan.offload?.optimizer !== true && plan.offload?.parameters !== true) return;
  for (const key of ['optimizer', 'parameters'] as const) {
    if (plan.offload?.[key] !== true)
      fail(
        'bad-option',
        "FSDP2's CPUOffloadPolicy offloads parameters, gradients and the optimizer state together: give both offload.optimizer and offload.parameters",
        { path: ['parallel', 'offload', key], expected: 'true', received: String(plan.offload?.[key]) },
      );
  }
}

const DTYPE = oneOf(Object.keys(DTYPE_BITS), 'dtype');

/**
 * torch FSDP2 (`fully_shard`). Padded last chunks make ranks differ; the only engine measured
 * around tensor-parallel ranks (torchtitan's 2-D layout).
 */
export const fsdp2Engine: EngineRecord<'fsdp2', Fsdp2Plan> = {
  name: 'fsdp2',
  summary: 'torch FSDP2 (fully_shard): parameters, gradients and optimizer state sharded, each unit gathered around its forward and backward',
  knobs: {},
  sharedKnobs: {
    gradientSync: gradientSyncKnob,
    units: arrayOf(
      anyOf(
        [string, object({ fields: { modules: arrayOf(string, { min: 1 }), reshardAfterForward: boolean }, required: ['modules'] })],
        'a module key, or { modules: [keys], reshardAfterForward? }',
      ),
    ),
    reshardAfterForward: boolean,
    mixedPrecision: object({ fields: { param: DTYPE, reduce: DTYPE } }),
  },
  check: checkFsdp2,
  wholeTrace: false,
  sameOnEveryRank: () => false,
  // The rank enters only through its unpadded chunk of each parameter (localSpec): its rows of each dim 0.
  rankKey: (_plan, group, rank, ir) => {
    const dims = new Set<number>();
    for (const m of ir.modules) for (const id of m.params) dims.add(chunking(ir.tensors[id]!.spec, group).dim0);
    return [...dims]
      .sort((a, b) => a - b)
      .map((dim0) => {
        const rows = Math.ceil(dim0 / group);
        return `${dim0}:${Math.max(0, Math.min(rows, dim0 - rank * rows))}`;
      })
      .join(',');
  },
  tensorParallel: true,
  planned: { byDefault: true, order: 0 },
  residency: (plan, env) => fsdp2(fsdp2Settings(plan, env)),
};
