import { fail } from '../../../errors.js';
import { backwardRuns } from '../../../memory/backward-runs.js';
import type { Ledger } from '../../../memory/ledger.js';
import { updateOf, wholeGradients } from '../../../memory/residency/kit.js';
import type { EngineHooks, RankContext } from '../../../memory/residency/types.js';
import { bytesOf } from '../../../tensor/dtype.js';
import { numel as numelOf, tensor } from '../../../tensor/spec.js';
import type { IR, IROp } from '../../../trace/ir.js';
import { parameterOrder } from '../../../trace/uses.js';
import type { Common, FlatOptimizer } from './common.js';
import type { DeepSpeedSettings } from './settings.js';
import { flatLayout, zero12 } from './zero12.js';
import { zero3 } from './zero3.js';

/*
 * Sources, all at deepspeedai/DeepSpeed edaa7221 (abbreviations used in the comments of this folder):
 *   s12 deepspeed/runtime/zero/stage_1_and_2.py       s3  deepspeed/runtime/zero/stage3.py
 *   pp  deepspeed/runtime/zero/partition_parameters.py ppc deepspeed/runtime/zero/partitioned_param_coordinator.py
 *   po  deepspeed/runtime/zero/parameter_offload.py    cfg deepspeed/runtime/zero/config.py
 *   eng deepspeed/runtime/engine.py                    ru  deepspeed/runtime/utils.py
 *   cc  deepspeed/runtime/comm/coalesced_collectives.py
 * Offloading (ZeRO-Offload, `offload_optimizer` / `offload_param` with device cpu) is read from the
 * same files.
 */

/**
 * One rank of DeepSpeed ZeRO (`DeepSpeedZeroOptimizer` for stages 1/2,
 * `DeepSpeedZeroOptimizer_Stage3` with its parameter coordinator for stage 3), bf16/fp16 or fp32
 * parameters in the traced model's dtype, an fp32 master partition and the optimizer on it.
 * Read from DeepSpeed's sources at edaa7221 and measured against DeepSpeed itself on CPU (gloo,
 * test/fixtures/deepspeed-cpu: every rank's peak within 0.003%, optimizer state exact); not on a GPU.
 *
 * What one rank holds (N ranks, Ψ trainable elements in `model.parameters()` order, one param group):
 * - stages 1/2: the parameters as one flat buffer of A = ⌈Ψ/2N⌉·2N elements (model dtype; s12:392,
 *   s12:437-442), an fp32 master partition of P = A/N (s12:492-493) and the optimizer state on it
 *   (one flat fp32 tensor, so its temporaries are those of one tensor of P elements). Backward:
 *   autograd's gradients, an IPG bucket of `reduceBucketSize` elements (two with `overlapComm`,
 *   s12:2493-2514) into which each gradient is copied and freed (gradients over the bucket size
 *   stay and are reduced alone), the all-reduce's flatten copy when a bucket spans several ranks'
 *   partitions (s12:1314-1348, s12:1841), and `grads_in_partition`: G_r elements, every
 *   parameter touching the rank's partition whole (s12:1670-1680). Stage 1 keeps autograd's
 *   gradients until the boundary's reduction (s12:861-881); stage 2 reduces in the hooks every
 *   micro-step and keeps the first micro-step's partition beside each later one's (s12:935-944).
 *   The step: an fp64 copy per gradient slice for the norm (s12:2089), a flatten (P, model dtype)
 *   and its fp32 cast (P·4), the partition freed, the optimizer, the fp32 gradient freed
 *   (s12:2355-2382); the all-gather is in place (ru:1005-1013).
 * - stage 3: each parameter partitioned to q = ⌈n/N⌉ (pp:1788-1789): the trainable ones in one
 *   flat buffer Q = Σq (s3:918-924), a persistent IPG bucket (s3:730-735), a gradient partition
 *   buffer of Q (s3:740-752), fp32 master and optimizer state per sub-group (s3:1160-1183).
 *   Parameters are gathered at each module's pre-forward/pre-backward and released at its
 *   post-forward/post-backward by the coordinator's rules in trace-complete mode (ppc:310-533,
 *   ppc:634-664): prefetch up to `prefetchBucketSize` capped by `maxLiveParameters`, kept while
 *   their next use lies within `maxReuseDistance` elements of the trace, parameters of at most
 *   `paramPersistenceThreshold` elements kept gathered (po:311-329); a coalesced gather is a flat
 *   buffer plus a copy of each parameter until all its members were waited on (pp:1301-1343,
 *   pp:750-795). Gradients go through the IPG bucket to a padded reduce-scatter copy
 *   (cc:158-218). The step releases every gathered parameter (s3:2609), makes an fp64 copy per
 *   gradient partition (s3:2285), a flatten and fp32 cast per sub-group (s3:2398-2417), and
 *   gathers the persistent parameters again (s3:2566-2572).
 *
 * - ZeRO-Offload (`offloadOptimizer`, cpu; read, not measured): the fp32 master, the optimizer
 *   state (DeepSpeedCPUAdam / DeepSpeedCPULion: fp32 exp_avg and exp_avg_sq) and the fp32
 *   gradient partition live on the host, reported in `host`. Stages 1/2 keep the bit16 flat buffer
 *   and the IPG buckets on the GPU, add one GPU buffer of the largest parameter (s12:591-593),
 *   build no grads_in_partition: at the boundary each in-partition slice is normed in fp64 and
 *   cast to fp32 on the GPU, then copied to the host (s12:1650-1666); the step allocates nothing on
 *   the GPU. Stage 3 moves the gradient partitions to the host too (s3:740-752): each parameter's
 *   reduce-scatter partition is copied back to the GPU for the norm and the fp32 cast, one at a
 *   time (s3:1886-1934). `offloadParam` (stage 3) keeps the parameter partitions on the host
 *   (s3:926-954, pp:1800-1815): a gather first copies them to the GPU (pp:1330-1333), at world 1
 *   the copy is the gathered parameter (pp:96-100); persistent parameters stay gathered on the GPU.
 *   Pinned or not, host buffers never count on the GPU.
 *
 * Modelled as the steady step (trace complete, the optimizer state existing), the one vram-ts
 * reports; the first step is the generic one (no optimizer state until the step), not ZeRO-3's
 * recording pass. Needs the whole trace (the partitions, buckets and the coordinator's decisions
 * depend on each parameter's place in the whole model): the plan never reduces repeated blocks
 * under DeepSpeed. The settings are checked by the plan (stage, ranks, knobs, offload); the
 * factory checks only what needs the traced model and the optimizer.
 */
export function deepspeed(settings: DeepSpeedSettings, family = false): (ctx: RankContext) => EngineHooks {
  return (ctx) => {
    if (ctx.optimizer === null)
      fail('bad-option', 'DeepSpeed ZeRO partitions an optimizer: give one (engine.backward asserts an optimizer, eng:3219)', {
        path: ['optimizer'],
        expected: 'an optimizer',
        received: 'null',
      });
    // ZeRO-Offload steps with DeepSpeedCPUAdam (Adam/AdamW, eng:2109-2110) or DeepSpeedCPULion (eng:2174-2175); a
    // client torch optimizer is refused unless zero_force_ds_cpu_optimizer is false (eng:2040-2043).
    if (settings.offloadOptimizer && !CPU_OPTIMIZERS.includes(ctx.optimizer.name))
      fail('not-modelled', `ZeRO-Offload steps on the host with DeepSpeedCPUAdam or DeepSpeedCPULion; ${ctx.optimizer.name} there is not modelled`, {
        path: ['optimizer'],
        expected: CPU_OPTIMIZERS.join(' | '),
        received: ctx.optimizer.name,
      });
    const common = commonOf(ctx);
    return settings.stage === 3 ? zero3(ctx, settings, common) : zero12(ctx, settings, common, family);
  };
}

/** The optimizers DeepSpeed has a CPU implementation of (deepspeed/ops: cpu_adam, cpu_lion). */
const CPU_OPTIMIZERS: readonly string[] = ['adam', 'adamw', 'lion'];

function commonOf(ctx: RankContext): Common {
  const { ir, ledger, trainable } = ctx;
  const all = parameterOrder(ir);
  const order = all.filter(trainable);
  if (order.length === 0)
    fail('not-modelled', 'DeepSpeed ZeRO needs trainable parameters (its param groups index their first tensor, s12:355)', { path: ['parallel', 'engine'] });
  const sizes = new Map<number, number>();
  for (const id of all) {
    const n = numelOf(ir.tensors[id]!.spec);
    if (typeof n !== 'number')
      fail('symbolic-parameter', 'a parameter with a symbolic shape cannot be partitioned', {
        path: ['parallel'],
        received: ir.tensors[id]!.key ?? String(id),
      });
    sizes.set(id, n);
  }
  const lp = ir.tensors[order[0]!]!.spec.dtype;
  for (const id of order)
    if (ir.tensors[id]!.spec.dtype !== lp)
      fail('not-modelled', 'DeepSpeed ZeRO flattens one dtype per param group (s12:355, s12:437): trainable parameters of mixed dtypes are not modelled', {
        path: ['parallel', 'engine'],
        received: `${lp} and ${ir.tensors[id]!.spec.dtype}`,
      });
  // Which backward nodes run, as autograd.ts decides: the loss's gradient flows back through recorded ops.
  const { runs, reached } = backwardRuns(ir);
  const outputHooks = outputHooksOf(ir, runs, reached);
  const gradients = wholeGradients(ctx);
  const freeGrad = (p: number) => {
    const block = gradients.grads.get(p);
    if (block === undefined) return;
    ledger.release(block);
    gradients.grads.delete(p);
  };
  const outputHook = (op: IROp, prefix: string) => engineOutputHook(ir, ledger, outputHooks, op, prefix);
  const flatOptimizer = (elements: number, label: string) => flatOptimizerOf(ctx, elements, label);
  return {
    ir,
    ledger,
    order,
    all,
    n: (p) => sizes.get(p)!,
    lp,
    lpBytes: (e) => bytesOf(e, lp) as number,
    runs,
    reached,
    hooksAt: hooksAtOf(ir, runs, trainable),
    outputHooks,
    trainable,
    gradients,
    freeGrad,
    outputHook,
    flatOptimizer,
  };
}

/** A leaf's AccumulateGrad runs once, with the summed gradient, after its last producer: the hook then. */
function hooksAtOf(ir: IR, runs: Uint8Array, trainable: (param: number) => boolean): Map<number, number[]> {
  const hooksAt = new Map<number, number[]>();
  const hooked = new Set<number>();
  for (let i = 0; i < ir.ops.length; i += 1) {
    if (runs[i] !== 1) continue;
    for (const p of ir.ops[i]!.params) {
      if (!trainable(p) || hooked.has(p)) continue;
      hooked.add(p);
      hooksAt.set(i, [...(hooksAt.get(i) ?? []), p]);
    }
  }
  return hooksAt;
}

/** The model's returned tensors a gradient reaches, by the op producing them (where the engine's output hook runs). */
function outputHooksOf(ir: IR, runs: Uint8Array, reached: Uint8Array): Map<number, number[]> {
  const outputHooks = new Map<number, number[]>();
  for (const t of ir.modules[0]?.outputs ?? []) {
    const producer = ir.tensors[t]!.producer;
    if (producer === null || reached[t] !== 1 || runs[producer] !== 1) continue;
    outputHooks.set(producer, [...(outputHooks.get(producer) ?? []), t]);
  }
  return outputHooks;
}

/** The engine's output hook: `grad / gradient_accumulation_steps` makes a new gradient of each returned tensor (eng:2996-3002, ru:1318-1330). */
function engineOutputHook(ir: IR, ledger: Ledger, outputHooks: ReadonlyMap<number, readonly number[]>, op: IROp, prefix: string): void {
  const tensors = outputHooks.get(op.index);
  if (tensors === undefined) return;
  const blocks = tensors.map((t) => ledger.alloc(bytesOf(numelOf(ir.tensors[t]!.spec), ir.tensors[t]!.spec.dtype), 'activationGrads'));
  ledger.record('backward', `${prefix}engine output gradient / accumulation steps`);
  for (const block of blocks) ledger.release(block);
}

/**
 * The optimizer on one flat fp32 partition (stages 1/2: a group's P elements; stage 3: a
 * sub-group's S_k): DeepSpeed hands the torch optimizer that one tensor (s12:513, s3:1185-1212),
 * so its state and temporaries are vram-ts's optimizer rules for a tensor of that shape.
 */
function flatOptimizerOf(ctx: RankContext, elements: number, label: string): FlatOptimizer {
  const { ir, ledger, optimizer } = ctx;
  const update = updateOf(optimizer!, tensor([elements], 'float32'), ir.settings.framework ?? 'torch-2');
  // Host-side scalars (Adam's step count) share the memory only on the CPU.
  const state = update.state.filter((s) => s.place === 'device' || ir.settings.device === 'cpu');
  return {
    bytes: state.reduce((total, s) => total + (s.bytes as number), 0),
    hostBytes: 8 * elements,
    allocate: () => state.map((s) => ledger.alloc(s.bytes, 'optimizer')),
    step() {
      if (update.listTemps !== 0) {
        const block = ledger.alloc(update.listTemps, 'temporaries');
        ledger.record('step', `${optimizer!.name} ${label} (foreach intermediates)`);
        ledger.release(block);
      }
      if (update.temps.length === 0) return;
      // One tensor: a for-loop's temporaries (and its loop variable) go when its step() returns.
      const temps = update.temps.map((bytes) => ledger.alloc(bytes, 'temporaries'));
      ledger.record('step', `${optimizer!.name} ${label}`);
      for (const block of temps) ledger.release(block);
    },
  };
}

const LAYOUT_NUMELS = new WeakMap<IR, readonly number[]>();

/**
 * What a ZeRO-1/2 rank's figures depend on: its view of the flat layout (which parameters touch
 * its partition, their slices, its gradient partition and padding; zero12 reads the rank nowhere
 * else), so ranks inside one large parameter share a key. Other stages: the rank itself.
 */
export function deepspeedRankKey(stage: number, ir: IR, world: number, rank: number): string {
  if (stage !== 1 && stage !== 2) return String(rank);
  let numels = LAYOUT_NUMELS.get(ir);
  if (numels === undefined) {
    numels = parameterOrder(ir)
      .filter((id) => ir.storages[ir.tensors[id]!.storage]!.trainable)
      .map((id) => numelOf(ir.tensors[id]!.spec) as number);
    LAYOUT_NUMELS.set(ir, numels);
  }
  const { inPartition, slices, gradPartition, pad } = flatLayout(numels, world, rank);
  const inside = inPartition.flatMap((yes, i) => (yes ? [i] : []));
  return `${inside.join(',')}|${slices.join(',')}|${gradPartition}|${pad}`;
}
