import { fail } from '../../errors.js';
import { deepFreeze } from '../../freeze.js';
import type { Framework } from '../../ops/types.js';
import { dimKey, type Dim } from '../../sym/expr.js';
import { mul, sum } from '../../sym/ops.js';
import type { DType } from '../../tensor/dtype.js';
import { numel, type TensorSpec } from '../../tensor/spec.js';
import { parameterOrder } from '../../trace/uses.js';
import type { Ledger } from '../ledger.js';
import { paramUpdate, type OptimizerSpec, type ParamUpdate } from '../optimizers.js';
import { gradientBytes, tensorBytes } from '../step-plan.js';
import type { RankContext, Residency } from './types.js';

/*
 * The residency kit: the bookkeeping every engine shares (one GPU's gradients and optimizer, the
 * full model's parameter list, repeated-block weighing). Engines import this, never each other.
 */

/**
 * paramUpdate, kept per optimizer spec object and parameter shape: a model has many tensors of
 * the same shape, and a spec named by a string is one object (optimizerSpec), so a second
 * estimate with the same optimizer reuses its updates. Frozen: shared between estimates.
 */
const updates = new WeakMap<OptimizerSpec, Map<string, ParamUpdate>>();

/** The update (state, temporaries) of one parameter under an optimizer spec, shared between estimates. */
export function updateOf(spec: OptimizerSpec, param: TensorSpec, framework: Framework): ParamUpdate {
  let bySpec = updates.get(spec);
  if (bySpec === undefined) {
    bySpec = new Map();
    updates.set(spec, bySpec);
  }
  let key = `${framework}|${param.dtype}`;
  for (let i = 0; i < param.shape.length; i += 1) key += `|${dimKey(param.shape[i]!)}`;
  let update = bySpec.get(key);
  if (update === undefined) {
    update = deepFreeze(paramUpdate(spec, param, framework));
    if (bySpec.size >= 10_000) bySpec.clear();
    bySpec.set(key, update);
  }
  return update;
}

/**
 * Parameter gradients as autograd makes them on one device: a new `.grad` the first time; for a
 * second gradient of the same parameter in the same backward (tied or shared weights)
 * `.grad + new` out of place after the node let go of its inputs, a third tensor before the two
 * are freed (measured on PyTorch 1.13 CPU with real transformers 4.40.2 traces, and on 2.11
 * CUDA traces of tied embeddings) — but in place when the first was autocast's float32 cast of
 * a 16-bit weight gradient (a fresh tensor InputBuffer can add into: torch 2.13 CPU, a tied
 * lm_head under bf16 autocast); for the gradient of a later micro-batch, AccumulateGrad's
 * `.grad += new` in place, the new one freed with the node (measured on 1.13 CPU, DDP no_sync).
 * Shared by every engine that keeps whole `.grad` tensors; `endBackward` marks a micro-batch done.
 */
export function wholeGradients(
  ctx: RankContext,
): Pick<Residency, 'paramGrads' | 'afterBackward'> & { readonly grads: Map<number, number>; readonly endBackward: () => void } {
  const { ir, ledger } = ctx;
  const grads = new Map<number, number>();
  // Gradients left by an earlier backward of this step (micro-batches before this one).
  const earlier = new Set<number>();
  const accumulations: [number, number, number][] = [];
  const inPlace: number[] = [];
  // Gradients this backward made as ToCopyBackward's float32 cast (an autocast weight copy's).
  const cast = new Set<number>();
  return {
    grads,
    paramGrads(op, label) {
      // Autocast: the 16-bit weight gradients exist (autograd.ts made them); ToCopyBackward makes the fp32 one here.
      for (const param of op.params) {
        const storage = ir.tensors[param]!.storage;
        if (!ir.storages[storage]!.trainable) continue;
        const existing = grads.get(param);
        if (existing === undefined) {
          grads.set(param, ledger.alloc(gradientBytes(ir, param), 'gradients'));
          earlier.delete(param);
          if (op.paramCopies.length > 0) cast.add(param);
        } else if (earlier.has(param) || cast.has(param)) {
          inPlace.push(ledger.alloc(gradientBytes(ir, param), 'temporaries'));
        } else accumulations.push([param, existing, ledger.alloc(gradientBytes(ir, param), 'temporaries')]);
      }
      if (op.paramCopies.length > 0) ledger.record('backward', `${label} (weight gradient cast)`);
    },
    afterBackward(_op, label) {
      for (const block of inPlace) ledger.release(block);
      inPlace.length = 0;
      for (const [param, existing, fresh] of accumulations) {
        const summed = ledger.alloc(gradientBytes(ir, param), 'gradients');
        ledger.record('backward', `${label} (accumulate grad)`);
        ledger.release(existing);
        ledger.release(fresh);
        grads.set(param, summed);
      }
      accumulations.length = 0;
    },
    endBackward() {
      for (const param of grads.keys()) earlier.add(param);
      cast.clear();
    },
  };
}

/**
 * The optimizer over the trainable parameters `params` (tensor ids, in model.parameters()
 * order): its state, its step's temporaries (a for-loop's per tensor, a loop variable such as
 * Adam's `denom` living into the next tensor's update; foreach's list-wide intermediates), and
 * the bytes of state on the device.
 */
export function optimizerOver(
  ctx: RankContext,
  params: readonly number[],
  specOf: (param: number) => TensorSpec = (param) => ctx.ir.tensors[param]!.spec,
  gradientsPlaced = false,
): Pick<Residency, 'step' | 'optimizerState'> & { readonly allocateState: () => number[]; readonly hostState: () => Dim } {
  const { ir, ledger, optimizer } = ctx;
  const framework = ir.settings.framework ?? 'torch-2';
  const list: readonly ParamUpdate[] = optimizer === null ? [] : params.map((id) => updateOf(optimizer, specOf(id), framework));
  const owners = params.map((id) => ctx.owner(ir.tensors[id]!.storage));
  const count = (bytes: Dim, owner: number) => weigh(bytes, owner, ctx.times);
  // Optimizer state on the device (on the CPU, host-side scalars such as Adam's step share the memory).
  const onDevice = (place: 'device' | 'host') => place === 'device' || ir.settings.device === 'cpu';
  // Σ of the state entries kept: one list, summed once (a model's every parameter, every estimate).
  const stateBytes = (kept: (place: 'device' | 'host') => boolean): Dim => {
    const dims: Dim[] = [];
    for (let u = 0; u < list.length; u += 1) for (const state of list[u]!.state) if (kept(state.place)) dims.push(count(state.bytes, owners[u]!));
    return sum(dims);
  };
  return {
    allocateState() {
      const blocks: number[] = [];
      list.forEach((update, u) => {
        for (const state of update.state) if (onDevice(state.place)) blocks.push(ledger.alloc(state.bytes, 'optimizer', 1, owners[u]));
      });
      return blocks;
    },
    optimizerState: () => stateBytes((place) => onDevice(place)),
    // The whole state in host memory (an optimizer stepping on the CPU: offloading engines).
    hostState: () => stateBytes(() => true),
    step() {
      if (optimizer === null) return;
      // The list-wide intermediates of the whole model: the interior block's share as many times as it repeats.
      const listTemps = sum(list.map((update, u) => count(update.listTemps, owners[u]!)));
      if (listTemps !== 0) {
        const block = ledger.alloc(listTemps, 'temporaries');
        ledger.record('step', `${optimizer.name} (foreach intermediates)`);
        ledger.release(block);
      }
      let carried: number | null = null;
      // With reduced repeated blocks, each tensor's update counts for its block.
      const repeated = ctx.times !== 1;
      for (let u = 0; u < list.length; u += 1) {
        const update = list[u]!;
        // A gradient with another placement than its DTensor parameter (gradSpec) is
        // redistributed to the parameter's by each op of the update that reads it: a clone of
        // the parameter's size, freed with the op; Adam's addcmul_(grad, grad) makes two at once
        // (measured, torch 2.13 CPU, for-loop).
        // An engine that hands the optimizer gradients placed as their parameters (FSDP2's
        // reduce-scatter outputs: `gradientsPlaced`) leaves nothing to redistribute.
        const redistributed = !gradientsPlaced && ir.tensors[params[u]!]!.gradSpec !== undefined;
        if (update.temps.length === 0 && !redistributed) continue;
        if (repeated) ledger.setUnit(owners[u]!);
        if (redistributed) {
          const copies = Array.from({ length: optimizer.name === 'adam' || optimizer.name === 'adamw' ? 2 : 1 }, () =>
            ledger.alloc(tensorBytes(ir, params[u]!), 'temporaries'),
          );
          ledger.record('step', `${optimizer.name} ${ir.tensors[params[u]!]!.key ?? params[u]} (gradient redistributed)`);
          for (const block of copies) ledger.release(block);
        }
        if (update.temps.length === 0) continue;
        const temps = update.temps.map((bytes) => ledger.alloc(bytes, 'temporaries'));
        ledger.record('step', `${optimizer.name} ${ir.tensors[params[u]!]!.key ?? params[u]}`);
        const kept = update.carriesLast ? temps.pop()! : null;
        for (const block of temps) ledger.release(block);
        if (carried !== null) ledger.release(carried);
        carried = kept;
      }
      if (repeated) ledger.setUnit(-1);
      if (carried !== null) ledger.release(carried);
    },
  };
}

/**
 * Bytes that the interior block of a model traced with reduced repeated blocks stands for: its
 * own `times` over (owner 1), everything else once.
 */
export function weigh(bytes: Dim, owner: number, times: number): Dim {
  return owner === 1 && times !== 1 ? mul(bytes, times) : bytes;
}

/** `zero_grad(set_to_none=True)` on whole `.grad` tensors: each trainable parameter's block goes. */
export function releaseGradients(ledger: Ledger, trainable: readonly number[], grads: Map<number, number>): void {
  for (const id of trainable) {
    const block = grads.get(id);
    if (block !== undefined) ledger.release(block);
    grads.delete(id);
  }
}

/** A trainable parameter of the full model: its tensor in the IR and its element count. */
export interface ParamEntry {
  readonly id: number;
  readonly numel: number;
  readonly dtype: DType;
}

/**
 * The trainable parameters of the full model in registration order (model.parameters()): with
 * reduced repeated blocks, block 1's parameters written out as many times as it repeats.
 */
export function fullParameters(ctx: RankContext): ParamEntry[] {
  const { ir } = ctx;
  const out: ParamEntry[] = [];
  let run: ParamEntry[] = [];
  const flush = () => {
    for (let copy = 0; copy < ctx.times; copy += 1) out.push(...run);
    run = [];
  };
  for (const id of parameterOrder(ir)) {
    const t = ir.tensors[id]!;
    if (!ir.storages[t.storage]!.trainable) continue;
    const n = numel(t.spec);
    if (typeof n !== 'number')
      fail('symbolic-parameter', 'a parameter with a symbolic shape cannot be bucketed', { path: ['parallel'], received: t.key ?? String(id) });
    const entry = { id, numel: n, dtype: t.spec.dtype };
    if (ctx.owner(t.storage) === 1 && ctx.times !== 1) run.push(entry);
    else {
      flush();
      out.push(entry);
    }
  }
  flush();
  return out;
}
