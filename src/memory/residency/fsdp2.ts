import { fail } from '../../errors.js';
import type { Dim } from '../../sym/expr.js';
import { mul, sum } from '../../sym/ops.js';
import { bytesOf, type DType } from '../../tensor/dtype.js';
import { tensor, type TensorSpec } from '../../tensor/spec.js';
import type { IR, IROp } from '../../trace/ir.js';
import { gradientBytes, tensorBytes } from '../step-plan.js';
import { optimizerOver } from './single.js';
import type { RankContext, Residency } from './types.js';

/** torch FSDP2 (`fully_shard`) on one rank of a data-parallel mesh. */
export interface Fsdp2Settings {
  /** Shard degree d (the data-parallel mesh size). */
  readonly shards: number;
  readonly rank: number;
  /** Module keys wrapped with `fully_shard` (each its own unit); the root is always one. */
  readonly units: readonly string[];
  /** Whether `units` are the user's (each must name a module: a VramError otherwise) or the defaults. */
  readonly unitsGiven: boolean;
  /** `reshard_after_forward` for the non-root units (the root keeps its parameters: FSDP2's default). */
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

/** A parameter's dim-0 chunking over d ranks, as torch.chunk and FSDP2's padding make it. */
function chunking(spec: TensorSpec, d: number): { readonly rows: number; readonly rest: Dim; readonly dim0: number } {
  const dim0 = spec.shape.length === 0 ? 1 : (spec.shape[0] as number);
  const rows = Math.ceil(dim0 / d);
  return { rows, rest: spec.shape.length === 0 ? 1 : mul(1, spec.shape.slice(1).reduce<Dim>((a, b) => mul(a, b), 1)), dim0 };
}

interface Unit {
  readonly module: number;
  readonly firstOp: number;
  readonly endOp: number;
  readonly root: boolean;
  /** Parameter tensors it manages (those of its modules not in a nested unit). */
  readonly params: readonly number[];
  /** Σ padded unsharded elements × compute bytes: the all-gather output and the unsharded parameters. */
  readonly gathered: Dim;
  /** Σ padded shard elements (one rank's share). */
  readonly shardNumel: Dim;
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
export function fsdp2(settings: Fsdp2Settings): (ctx: RankContext) => Residency {
  return (ctx) => {
    const { ir, ledger } = ctx;
    const d = settings.shards;
    const units = unitsOf(ir, settings);
    const unitOfParam = new Map<number, Unit>();
    for (const unit of units) for (const p of unit.params) unitOfParam.set(p, unit);
    const storeBytes = (param: number) => {
      const { rows, rest } = chunking(ir.tensors[param]!.spec, d);
      return bytesOf(mul(rows, rest), settings.storeDtype(param));
    };
    const localSpec = (param: number): TensorSpec => {
      const spec = ir.tensors[param]!.spec;
      const { rows, dim0 } = chunking(spec, d);
      const mine = Math.max(0, Math.min(rows, dim0 - settings.rank * rows));
      return tensor(spec.shape.length === 0 ? [mine] : [mine, ...spec.shape.slice(1)], settings.storeDtype(param));
    };
    const trainable = (param: number) => ir.storages[ir.tensors[param]!.storage]!.trainable;
    const localNumel = (param: number) => {
      const spec = localSpec(param);
      return spec.shape.reduce<Dim>((a, b) => mul(a, b), 1);
    };
    const ownerOfUnit = (unit: Unit) => (unit.params.length === 0 ? -1 : ctx.owner(ir.tensors[unit.params[0]!]!.storage));
    // The sharded gradients carry their parameters' placements (measured, FSDP2 × TP, torch 2.13).
    const optimizer = optimizerOver(
      ctx,
      ctx.optimizer === null ? [] : ctx.plan.trainable,
      localSpec,
      true,
    );
    // Per unit: sharded gradients (one tensor: the reduce-scatter output), unsharded parameter blocks.
    const shardedGrads = new Map<Unit, number>();
    const unsharded = new Map<Unit, number[]>();
    const unshardedGrads = new Map<number, number>();
    // Unsharded gradients upcast to the reduce dtype, kept across micro-batches that do not reduce.
    const accumulated = new Map<number, number>();
    // AccumulateGrad's incoming gradient while the node still runs, when `.grad` exists.
    const inPlace: number[] = [];
    let microIndex = 0;
    const syncing = () => settings.gradientSync === 'every' || microIndex === ctx.microBatches - 1;
    let heldGather: number | null = null;
    const prefetched = new Map<Unit, number>();
    let heldReduce: number | null = null;
    const backwardStarted = new Set<Unit>();
    const backwardDone = new Set<Unit>();
    const reduceDtype = (unit: Unit) => settings.reduceDtype ?? (unit.params.length === 0 ? 'float32' : ir.tensors[unit.params[0]!]!.spec.dtype);
    const storeDtypeOf = (unit: Unit) => (unit.params.length === 0 ? 'float32' : settings.storeDtype(unit.params[0]!));
    const gatherDtype = (unit: Unit) => (unit.params.length === 0 ? 'float32' : ir.tensors[unit.params[0]!]!.spec.dtype);

    const copyOut = (unit: Unit) => {
      unsharded.set(
        unit,
        unit.params.map((p) => {
          const { rows, rest } = chunking(ir.tensors[p]!.spec, d);
          return ledger.alloc(bytesOf(mul(rows * d, rest), gatherDtype(unit)), 'parameters');
        }),
      );
    };
    const reshard = (unit: Unit) => {
      for (const block of unsharded.get(unit) ?? []) ledger.release(block);
      unsharded.delete(unit);
    };
    const gatherBlock = (unit: Unit) => ledger.alloc(bytesOf(unit.gathered, gatherDtype(unit)), 'communication');
    const offload = settings.offload === true;
    /** CPUOffloadPolicy: the unit's sharded parameters copied to the GPU (compute dtype) before its all-gather output is made. */
    const hostCopies = (unit: Unit) => (offload ? ledger.alloc(bytesOf(unit.shardNumel, gatherDtype(unit)), 'communication') : null);
    /** All-gather with the host copies: output made, copied in, then the copies go (`del param_all_gather_inputs`). */
    const gatherFromHost = (unit: Unit, phase: 'forward' | 'backward', label: string) => {
      const copies = hostCopies(unit)!;
      const gather = gatherBlock(unit);
      ledger.record(phase, `${label} (FSDP sharded parameters copied from the host)`);
      ledger.release(copies);
      return gather;
    };
    const unshardForward = (unit: Unit, label: string) => {
      if (unsharded.has(unit) || unit.params.length === 0) return;
      const gather = offload ? gatherFromHost(unit, 'forward', label) : gatherBlock(unit);
      ledger.record('forward', `${label} (FSDP all-gather)`);
      // wait_for_unshard drops the previous unit's all-gather output before the copy-out, but its
      // local `prev_all_gather_state` keeps it until the function returns, after the copy-out.
      copyOut(unit);
      ledger.record('forward', `${label} (FSDP all-gather copy-out)`);
      if (heldGather !== null) ledger.release(heldGather);
      heldGather = gather;
    };
    const unshardBackward = (unit: Unit, label: string) => {
      if (unsharded.has(unit) || unit.params.length === 0) return;
      const gather = prefetched.get(unit) ?? (offload ? gatherFromHost(unit, 'backward', label) : gatherBlock(unit));
      prefetched.delete(unit);
      // wait_for_unshard frees the all-gather output forward left held.
      if (heldGather !== null) ledger.release(heldGather);
      heldGather = null;
      copyOut(unit);
      ledger.record('backward', `${label} (FSDP all-gather)`);
      ledger.release(gather);
    };
    // Backward runs the units in reverse post-forward order; each prefetches the next.
    const backwardOrder = [...units].sort((a, b) => b.endOp - a.endOp || a.firstOp - b.firstOp);
    const preBackward = (unit: Unit, label: string) => {
      backwardStarted.add(unit);
      unshardBackward(unit, label);
      const next = backwardOrder[backwardOrder.indexOf(unit) + 1];
      if (next !== undefined && !unsharded.has(next) && !prefetched.has(next) && next.params.length > 0) prefetched.set(next, offload ? gatherFromHost(next, 'backward', `${label} prefetch`) : gatherBlock(next));
    };
    // A unit's post-backward counts for its own block, whichever op's hook runs it.
    const inUnit = (unit: Unit, after: number, run: () => void) => {
      if (ctx.unitOfOp === null) return run();
      ledger.setUnit(ctx.unitOfOp(unit.firstOp));
      run();
      ledger.setUnit(after);
    };
    const postBackward = (unit: Unit, label: string) => {
      backwardDone.add(unit);
      // A gradient placed otherwise than its DTensor parameter (the vocab-parallel embedding's
      // Replicate [V, h] under tensor parallelism) is redistributed to the parameter's placement
      // first: the local copy is made while the whole one lives (measured, FSDP2 × TP).
      for (const p of unit.params) {
        const whole = unshardedGrads.get(p);
        if (whole === undefined || ir.tensors[p]!.gradSpec === undefined) continue;
        const local = ledger.alloc(tensorBytes(ir, p), 'gradients');
        ledger.record('backward', `${label} (${ir.tensors[p]!.key ?? p} gradient redistributed)`);
        ledger.release(whole);
        unshardedGrads.set(p, local);
      }
      // post_backward_accumulate: a reduce-dtype gradient kept from a micro-batch that did not
      // reduce takes this one's in place (mixed dtypes: no temporary).
      for (const p of unit.params) {
        if (!accumulated.has(p) || !unshardedGrads.has(p)) continue;
        ledger.release(unshardedGrads.get(p)!);
        unshardedGrads.delete(p);
      }
      reshard(unit);
      if (!syncing()) {
        // No reduce-scatter: the unsharded gradients stay; in another reduce dtype they are kept
        // upcast (to_accumulated_grad_if_needed: the copy is made before the original goes).
        if (reduceDtype(unit) === gatherDtype(unit)) return;
        for (const p of unit.params) {
          const grad = unshardedGrads.get(p);
          if (grad === undefined) continue;
          accumulated.set(p, ledger.alloc(bytesOf(ir.tensors[p]!.spec.shape.reduce<Dim>((a, b) => mul(a, b), 1), reduceDtype(unit)), 'gradients'));
          ledger.record('backward', `${label} (FSDP gradient kept in ${reduceDtype(unit)})`);
          ledger.release(grad);
          unshardedGrads.delete(p);
        }
        return;
      }
      const grads = unit.params.filter((p) => unshardedGrads.has(p) || accumulated.has(p));
      if (grads.length === 0) return;
      if (heldReduce !== null) ledger.release(heldReduce);
      const input = ledger.alloc(bytesOf(mul(unit.shardNumel, d), reduceDtype(unit)), 'communication');
      // chunk_cat's CPU kernel first pads every gradient whose dim 0 does not divide by d into a
      // copy of the padded size (measured, PyTorch 2.13 CPU); CUDA's fused kernel writes in place.
      if (ir.settings.device === 'cpu') {
        const padded = grads.flatMap((p) => {
          const { rows, rest, dim0 } = chunking(ir.tensors[p]!.spec, d);
          return dim0 % d === 0 ? [] : [ledger.alloc(bytesOf(mul(rows * d, rest), accumulated.has(p) ? reduceDtype(unit) : gatherDtype(unit)), 'temporaries')];
        });
        if (padded.length > 0) ledger.record('backward', `${label} (FSDP reduce-scatter copy-in, padded)`);
        for (const block of padded) ledger.release(block);
      }
      for (const p of grads) {
        const block = accumulated.get(p) ?? unshardedGrads.get(p)!;
        ledger.release(block);
        accumulated.delete(p);
        unshardedGrads.delete(p);
      }
      const cast = reduceDtype(unit) !== storeDtypeOf(unit);
      if (offload) {
        // The output (cast to the stored dtype when needed) is copied to the host; nothing of it stays on the GPU.
        const output = ledger.alloc(bytesOf(unit.shardNumel, reduceDtype(unit)), 'communication');
        ledger.record('backward', `${label} (FSDP reduce-scatter)`);
        const stored = cast ? ledger.alloc(bytesOf(unit.shardNumel, storeDtypeOf(unit)), 'communication') : null;
        ledger.release(output);
        if (stored !== null) ledger.release(stored);
        heldReduce = input;
        return;
      }
      let output = ledger.alloc(bytesOf(unit.shardNumel, reduceDtype(unit)), cast ? 'communication' : 'gradients', 1, ownerOfUnit(unit));
      ledger.record('backward', `${label} (FSDP reduce-scatter)`);
      if (cast) {
        const stored = ledger.alloc(bytesOf(unit.shardNumel, storeDtypeOf(unit)), 'gradients', 1, ownerOfUnit(unit));
        ledger.release(output);
        output = stored;
      }
      const existing = shardedGrads.get(unit);
      if (existing === undefined) shardedGrads.set(unit, output);
      else ledger.release(output);
      heldReduce = input;
    };
    const unitsAt = (op: IROp) => units.filter((u) => u.firstOp <= op.index && op.index < u.endOp);
    const noop = () => undefined;
    return {
      param: noop,
      start() {
        // CPUOffloadPolicy: the shards, their gradients and the optimizer state are all on the host.
        if (offload) return { grads: [], state: [] };
        // The sharded parameters, last step's sharded gradients, the optimizer state on the local chunks.
        for (const unit of units) for (const p of unit.params) ledger.alloc(storeBytes(p), 'parameters', 1, ctx.owner(ir.tensors[p]!.storage));
        const grads = units.filter((u) => u.params.some(trainable)).map((unit) => {
          const block = ledger.alloc(bytesOf(unit.shardNumel, storeDtypeOf(unit)), 'gradients', 1, ownerOfUnit(unit));
          shardedGrads.set(unit, block);
          return block;
        });
        return { grads, state: optimizer.allocateState() };
      },
      zeroGrad() {
        microIndex = 0;
        for (const block of shardedGrads.values()) ledger.release(block);
        shardedGrads.clear();
        backwardStarted.clear();
        backwardDone.clear();
      },
      beforeForward(op, micro) {
        // Outer units first: the root's pre-forward runs before a nested unit's.
        for (const unit of unitsAt(op).sort((a, b) => a.firstOp - b.firstOp || b.endOp - a.endOp)) if (unit.firstOp === op.index) unshardForward(unit, `${micro}${labelOf(ir, unit)}`);
      },
      afterForward(op) {
        for (const unit of unitsAt(op)) {
          if (unit.endOp - 1 !== op.index) continue;
          if (!unit.root && settings.reshardAfterForward) reshard(unit);
          // The root's post-forward frees the last all-gather output (_fsdp_state.py _post_forward).
          if (unit.root && heldGather !== null) {
            ledger.release(heldGather);
            heldGather = null;
          }
        }
      },
      beforeBackward(op, micro) {
        // Units the backward has left run their post-backward; the ones it enters their pre-backward.
        const here = ctx.unitOfOp?.(op.index) ?? -1;
        for (const unit of backwardOrder) if (backwardStarted.has(unit) && !backwardDone.has(unit) && !(unit.firstOp <= op.index && op.index < unit.endOp)) inUnit(unit, here, () => postBackward(unit, `${micro}${labelOf(ir, unit)}`));
        for (const unit of unitsAt(op).sort((a, b) => a.firstOp - b.firstOp || b.endOp - a.endOp)) if (!backwardStarted.has(unit)) preBackward(unit, `${micro}${labelOf(ir, unit)}`);
      },
      paramGrads(op, label) {
        // Autograd's unsharded gradients, in the compute dtype; a second one is added in place.
        for (const param of op.params) {
          if (!trainable(param)) continue;
          if (unshardedGrads.has(param)) inPlace.push(ledger.alloc(gradientBytes(ir, param), 'temporaries'));
          else unshardedGrads.set(param, ledger.alloc(gradientBytes(ir, param), 'gradients'));
        }
      },
      afterBackward() {
        for (const block of inPlace) ledger.release(block);
        inPlace.length = 0;
      },
      endBackward(prefix) {
        // The root's final callback: every unit not yet reduced is, then the held buffers go.
        for (const unit of backwardOrder) if (backwardStarted.has(unit) && !backwardDone.has(unit)) inUnit(unit, -1, () => postBackward(unit, `${prefix}${labelOf(ir, unit)}`));
        microIndex += 1;
        backwardStarted.clear();
        backwardDone.clear();
        if (heldReduce !== null) ledger.release(heldReduce);
        heldReduce = null;
        for (const block of prefetched.values()) ledger.release(block);
        prefetched.clear();
        if (heldGather !== null) ledger.release(heldGather);
        heldGather = null;
        for (const unit of [...unsharded.keys()]) reshard(unit);
      },
      // The optimizer steps on the CPU tensors (CPUOffloadPolicy): no GPU temporaries.
      step: offload ? () => ledger.record('step', 'optimizer step on the host (FSDP2 CPUOffloadPolicy)') : optimizer.step,
      optimizerState: offload ? () => 0 : optimizer.optimizerState,
      ...(offload
        ? {
            host: () => {
              const weigh = (bytes: Dim, owner: number) => (owner === 1 && ctx.times !== 1 ? mul(bytes, ctx.times) : bytes);
              const mine = (p: number) => weigh(bytesOf(localNumel(p), settings.storeDtype(p)), ctx.owner(ir.tensors[p]!.storage));
              return {
                parameters: sum(units.flatMap((unit) => unit.params.map((p) => weigh(storeBytes(p), ctx.owner(ir.tensors[p]!.storage))))),
                // One host tensor per parameter of its unpadded local chunk (the reduce-scatter output's view copied out).
                gradients: sum(units.flatMap((unit) => unit.params.filter(trainable).map(mine))),
                optimizer: optimizer.hostState(),
                staging: 0,
              };
            },
          }
        : {}),
      resident: () => {
        if (offload) return { parameters: 0, gradients: 0 };
        const weigh = (bytes: Dim, owner: number) => (owner === 1 && ctx.times !== 1 ? mul(bytes, ctx.times) : bytes);
        return {
          parameters: sum(units.flatMap((unit) => unit.params.map((p) => weigh(storeBytes(p), ctx.owner(ir.tensors[p]!.storage))))),
          gradients: sum(units.filter((u) => u.params.some(trainable)).map((unit) => weigh(bytesOf(unit.shardNumel, storeDtypeOf(unit)), ownerOfUnit(unit)))),
        };
      },
    };
  };
}

function labelOf(ir: IR, unit: Unit): string {
  const key = ir.modules[unit.module]!.key;
  return key === '' ? 'root' : key;
}

/** The FSDP units: each wrapped module and the root, with the parameters each manages. */
function unitsOf(ir: IR, settings: Fsdp2Settings): Unit[] {
  const wrapped = new Set<number>([0]);
  const byKey = new Map(ir.modules.map((m) => [m.key, m.index]));
  settings.units.forEach((key, i) => {
    const module = byKey.get(key);
    if (module !== undefined) wrapped.add(module);
    // Default units of a model traced with reduced repeated blocks name blocks not traced: counted by `times`.
    else if (settings.unitsGiven) fail('bad-option', `no module "${key}" to wrap with fully_shard`, { path: ['parallel', 'units', i], expected: 'a module key of the model (as in the breakdown)', received: JSON.stringify(key) });
  });
  // A module's parameters belong to its innermost wrapped ancestor (itself included).
  const unitOfModule = new Int32Array(ir.modules.length);
  for (const m of ir.modules) unitOfModule[m.index] = wrapped.has(m.index) ? m.index : m.parent === null ? 0 : unitOfModule[m.parent]!;
  const params = new Map<number, number[]>();
  const seen = new Set<number>();
  for (const m of ir.modules) for (const p of m.params) {
    if (seen.has(p)) continue;
    seen.add(p);
    const u = unitOfModule[m.index]!;
    params.set(u, [...(params.get(u) ?? []), p]);
  }
  return [...wrapped].map((index) => {
    const m = ir.modules[index]!;
    const own = params.get(index) ?? [];
    const shardNumel = sum(
      own.map((p) => {
        const { rows, rest } = chunking(ir.tensors[p]!.spec, settings.shards);
        return mul(rows, rest);
      }),
    );
    return { module: index, firstOp: m.firstOp, endOp: m.endOp, root: index === 0, params: own, gathered: mul(shardNumel, settings.shards), shardNumel };
  });
}
