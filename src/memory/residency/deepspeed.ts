import { fail } from '../../errors.js';
import { bytesOf, type DType } from '../../tensor/dtype.js';
import { numel as numelOf, tensor } from '../../tensor/spec.js';
import type { IR, IROp } from '../../trace/ir.js';
import { parameterOrder } from '../../trace/uses.js';
import type { Category, Ledger } from '../ledger.js';
import { updateOf, wholeGradients } from './single.js';
import type { RankContext, Residency } from './types.js';

/*
 * Sources, all at deepspeedai/DeepSpeed edaa7221 (abbreviations used in the comments below):
 *   s12 deepspeed/runtime/zero/stage_1_and_2.py       s3  deepspeed/runtime/zero/stage3.py
 *   pp  deepspeed/runtime/zero/partition_parameters.py ppc deepspeed/runtime/zero/partitioned_param_coordinator.py
 *   po  deepspeed/runtime/zero/parameter_offload.py    cfg deepspeed/runtime/zero/config.py
 *   eng deepspeed/runtime/engine.py                    ru  deepspeed/runtime/utils.py
 *   cc  deepspeed/runtime/comm/coalesced_collectives.py
 * Offloading (ZeRO-Offload, `offload_optimizer` / `offload_param` with device cpu) is read from the
 * same files; notes with every rule: /work/notes/offload.md.
 */

/**
 * DeepSpeed ZeRO's knobs that move a rank's memory, with DeepSpeed's defaults (cfg) and what
 * the Hugging Face Trainer's `"auto"` writes (transformers `integrations/deepspeed.py`,
 * `trainer_config_finalize`: h is the model's hidden size).
 */
export interface DeepSpeedSettings {
  /** `zero_optimization.stage`: 1 (optimizer state), 2 (+ gradients), 3 (+ parameters). Stage 0 is not modelled. */
  readonly stage: 0 | 1 | 2 | 3;
  /** Data-parallel world size N. */
  readonly shards: number;
  /** This rank (stages 1/2: partitions and the gradient partition differ by rank). */
  readonly rank: number;
  /** `reduce_bucket_size`, elements (default 5e8, cfg:113; HF "auto": h²). The IPG bucket and the "extra-large" threshold. */
  readonly reduceBucketSize: number;
  /** `overlap_comm` (default: stage == 3, cfg:138 and cfg:382-386). Stages 1/2: a second IPG buffer; stage 1: reductions in the hooks. */
  readonly overlapComm: boolean;
  /** `stage3_prefetch_bucket_size`, elements (default 5e7, cfg:215; HF "auto": ⌊0.9·h²⌋). */
  readonly prefetchBucketSize: number;
  /** `stage3_max_live_parameters` (default 1e9, cfg:238): caps prefetch only (ppc:453-454). */
  readonly maxLiveParameters: number;
  /** `stage3_max_reuse_distance`, elements (default 1e9, cfg:244). */
  readonly maxReuseDistance: number;
  /** `stage3_param_persistence_threshold`, elements (default 1e5, cfg:221, `≤` at po:319; HF "auto": 10·h). */
  readonly paramPersistenceThreshold: number;
  /** `stage3_model_persistence_threshold`, elements (default sys.maxsize, cfg:228; po:316). */
  readonly modelPersistenceThreshold: number;
  /** `sub_group_size`, elements (default 1e9, cfg:175): stage 3's fp32 gradient and optimizer tile. */
  readonly subGroupSize: number;
  /**
   * `offload_optimizer: {device: cpu}` (default off): the fp32 master, the optimizer state and the
   * fp32 gradient partition live on the host, and DeepSpeedCPUAdam / DeepSpeedCPULion steps there.
   */
  readonly offloadOptimizer: boolean;
  /** `offload_param: {device: cpu}` (ZeRO-3 only, default off): the parameters' partitions live on the host between gathers. */
  readonly offloadParam: boolean;
}

/** DeepSpeed's defaults for the size knobs (cfg); `overlapComm` defaults to `stage === 3`. */
export const DEEPSPEED_DEFAULTS = Object.freeze({
  reduceBucketSize: 500_000_000,
  prefetchBucketSize: 50_000_000,
  maxLiveParameters: 1_000_000_000,
  maxReuseDistance: 1_000_000_000,
  paramPersistenceThreshold: 100_000,
  modelPersistenceThreshold: Number.MAX_SAFE_INTEGER,
  subGroupSize: 1_000_000_000,
});

/** The settings with DeepSpeed's defaults for every knob not given. */
export function deepspeedSettings(stage: 0 | 1 | 2 | 3, shards: number, rank: number, knobs: Partial<Omit<DeepSpeedSettings, 'stage' | 'shards' | 'rank'>> = {}): DeepSpeedSettings {
  const set = Object.fromEntries(Object.entries(knobs).filter(([, v]) => v !== undefined));
  return { stage, shards, rank, ...DEEPSPEED_DEFAULTS, overlapComm: stage === 3, offloadOptimizer: false, offloadParam: false, ...set };
}

const NOT_AVAILABLE = 0;
const INFLIGHT = 1;
const AVAILABLE = 2;

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
 * depend on each parameter's place in the whole model).
 */
export function deepspeed(settings: DeepSpeedSettings): (ctx: RankContext) => Residency {
  checkSettings(settings);
  return (ctx) => {
    // Partitions, buckets and the coordinator's reuse distance follow each tensor's place in the whole model.
    if (ctx.times !== 1) fail('not-modelled', 'DeepSpeed ZeRO needs the whole trace, not reduced repeated blocks', { path: ['parallel', 'engine'] });
    if (ctx.optimizer === null) fail('bad-option', 'DeepSpeed ZeRO partitions an optimizer: give one (engine.backward asserts an optimizer, eng:3219)', { path: ['optimizer'], expected: 'an optimizer', received: 'null' });
    // ZeRO-Offload steps with DeepSpeedCPUAdam (Adam/AdamW, eng:2109-2110) or DeepSpeedCPULion (eng:2174-2175); a
    // client torch optimizer is refused unless zero_force_ds_cpu_optimizer is false (eng:2040-2043).
    if (settings.offloadOptimizer && !CPU_OPTIMIZERS.includes(ctx.optimizer.name)) fail('not-modelled', `ZeRO-Offload steps on the host with DeepSpeedCPUAdam or DeepSpeedCPULion; ${ctx.optimizer.name} there is not modelled`, { path: ['optimizer'], expected: CPU_OPTIMIZERS.join(' | '), received: ctx.optimizer.name });
    const common = commonOf(ctx);
    return settings.stage === 3 ? stage3(ctx, settings, common) : stage12(ctx, settings, common);
  };
}

/** The optimizers DeepSpeed has a CPU implementation of (deepspeed/ops: cpu_adam, cpu_lion). */
const CPU_OPTIMIZERS: readonly string[] = ['adam', 'adamw', 'lion'];

function checkSettings(s: DeepSpeedSettings): void {
  if (s.offloadParam && s.stage !== 3) fail('bad-option', 'DeepSpeed offloads parameters (offload_param) only under ZeRO-3 (eng:2415 gives stages 1/2 no parameter offload config)', { path: ['parallel', 'offload', 'parameters'], expected: 'zero: 3', received: `zero: ${s.stage}` });
  if (s.stage === 0) fail('not-modelled', 'DeepSpeed without ZeRO (stage 0) runs FP16_Optimizer / BF16_Optimizer (eng:2019, eng:2065-2067), which is not modelled', { path: ['parallel', 'zero'], expected: '1 | 2 | 3', received: '0' });
  if (![1, 2, 3].includes(s.stage)) fail('bad-option', 'unknown ZeRO stage', { path: ['parallel', 'zero'], expected: '1 | 2 | 3', received: String(s.stage) });
  if (!Number.isSafeInteger(s.shards) || s.shards < 1) fail('bad-option', 'the number of ranks must be an integer >= 1', { path: ['parallel', 'dp'], expected: 'integer >= 1', received: String(s.shards) });
  if (!Number.isSafeInteger(s.rank) || s.rank < 0 || s.rank >= s.shards) fail('bad-option', 'the rank must be below the number of ranks', { path: ['parallel', 'rank'], expected: `0 .. ${s.shards - 1}`, received: String(s.rank) });
  for (const key of ['reduceBucketSize', 'prefetchBucketSize', 'maxLiveParameters', 'maxReuseDistance', 'paramPersistenceThreshold', 'modelPersistenceThreshold', 'subGroupSize'] as const) {
    const v = s[key];
    if (!Number.isSafeInteger(v) || v < 0) fail('bad-option', `${key} must be an integer >= 0 (elements)`, { path: ['parallel', 'deepspeed', key], expected: 'integer >= 0', received: String(v) });
  }
}

/** What every stage reads off the trace. */
interface Common {
  readonly ir: IR;
  readonly ledger: Ledger;
  /** Trainable parameter tensors in `model.parameters()` order (the param group's order). */
  readonly order: readonly number[];
  /** Every parameter tensor in `model.parameters()` order (ZeRO-3's ds_id order). */
  readonly all: readonly number[];
  readonly n: (param: number) => number;
  /** The trainable parameters' dtype (the model's: DeepSpeed casts them, eng:1537-1550). */
  readonly lp: DType;
  readonly lpBytes: (elements: number) => number;
  /** Ops whose backward node runs (the simulator's rule: recorded, with a backward, reached by a gradient). */
  readonly runs: Uint8Array;
  /** Tensors a gradient reaches. */
  readonly reached: Uint8Array;
  /** Params whose post-accumulate-grad hook fires after this op's node (their last producer in backward). */
  readonly hooksAt: ReadonlyMap<number, readonly number[]>;
  /** The engine's hook dividing each returned tensor's gradient by the accumulation steps (eng:2837-2839, eng:2996-3002): tensors by producer op. */
  readonly outputHooks: ReadonlyMap<number, readonly number[]>;
  readonly trainable: (param: number) => boolean;
}

function commonOf(ctx: RankContext): Common {
  const { ir, ledger } = ctx;
  const trainable = (param: number) => ir.storages[ir.tensors[param]!.storage]!.trainable;
  const all = parameterOrder(ir);
  const order = all.filter(trainable);
  if (order.length === 0) fail('not-modelled', 'DeepSpeed ZeRO needs trainable parameters (its param groups index their first tensor, s12:355)', { path: ['parallel', 'engine'] });
  const sizes = new Map<number, number>();
  for (const id of all) {
    const n = numelOf(ir.tensors[id]!.spec);
    if (typeof n !== 'number') fail('symbolic-parameter', 'a parameter with a symbolic shape cannot be partitioned', { path: ['parallel'], received: ir.tensors[id]!.key ?? String(id) });
    sizes.set(id, n);
  }
  const lp = ir.tensors[order[0]!]!.spec.dtype;
  for (const id of order) if (ir.tensors[id]!.spec.dtype !== lp) fail('not-modelled', 'DeepSpeed ZeRO flattens one dtype per param group (s12:355, s12:437): trainable parameters of mixed dtypes are not modelled', { path: ['parallel', 'engine'], received: `${lp} and ${ir.tensors[id]!.spec.dtype}` });
  // Which backward nodes run, as autograd.ts decides: the loss's gradient flows back through recorded ops.
  const runs = new Uint8Array(ir.ops.length);
  const reached = new Uint8Array(ir.tensors.length);
  if (ir.lossOutput !== null) reached[ir.lossOutput] = 1;
  for (let i = ir.ops.length - 1; i >= 0; i -= 1) {
    const op = ir.ops[i]!;
    if (!op.recorded || op.backward === null || !op.outputs.some((t) => reached[t] === 1)) continue;
    runs[i] = 1;
    op.inputs.forEach((input, k) => {
      if (op.backward!.inputGrads[k] !== 'none' && ir.tensors[input]!.requiresGrad) reached[input] = 1;
    });
  }
  // A leaf's AccumulateGrad runs once, with the summed gradient, after its last producer: the hook then.
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
  const outputHooks = new Map<number, number[]>();
  for (const t of ir.modules[0]?.outputs ?? []) {
    const producer = ir.tensors[t]!.producer;
    if (producer === null || reached[t] !== 1 || runs[producer] !== 1) continue;
    outputHooks.set(producer, [...(outputHooks.get(producer) ?? []), t]);
  }
  return { ir, ledger, order, all, n: (p) => sizes.get(p)!, lp, lpBytes: (e) => bytesOf(e, lp) as number, runs, reached, hooksAt, outputHooks, trainable };
}

/**
 * The optimizer on one flat fp32 partition (stages 1/2: a group's P elements; stage 3: a
 * sub-group's S_k): DeepSpeed hands the torch optimizer that one tensor (s12:513, s3:1185-1212),
 * so its state and temporaries are vram-ts's optimizer rules for a tensor of that shape.
 */
function flatOptimizer(ctx: RankContext, elements: number, label: string) {
  const { ir, ledger, optimizer } = ctx;
  const update = updateOf(optimizer!, tensor([elements], 'float32'), ir.settings.framework ?? 'torch-2');
  // Host-side scalars (Adam's step count) share the memory only on the CPU.
  const state = update.state.filter((s) => s.place === 'device' || ir.settings.device === 'cpu');
  return {
    bytes: state.reduce((total, s) => total + (s.bytes as number), 0),
    /**
     * The state of the CPU optimizer ZeRO-Offload steps with instead: DeepSpeedCPUAdam and
     * DeepSpeedCPULion both make fp32 exp_avg and exp_avg_sq of the partition and keep `step` as a
     * Python int (ops/adam/cpu_adam.py:145-154, ops/lion/cpu_lion.py:110-119).
     */
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

/** Stages 1/2's flat layout of the param group over N ranks, seen from rank r (s12:380-530, s12:1966-2015). */
interface FlatLayout {
  /** Aligned flat elements A = ⌈Ψ/2N⌉·2N (nccl_start_alignment_factor 2, s12:347, s12:392). */
  readonly aligned: number;
  /** Partition elements P = A/N (s12:1966-1984). */
  readonly partition: number;
  /** Start of each parameter (by its place in `order`) in the flat buffer. */
  readonly offsets: readonly number[];
  /** Whether a parameter is in rank r's params_in_partition (starts inside it or straddles its start, s12:1986-2015). */
  readonly inPartition: readonly boolean[];
  /** G_r: Σ of the whole element counts of those parameters (grads_in_partition, s12:1670-1680). */
  readonly gradPartition: number;
  /** The in-partition slice of each of those parameters (what the norm copies to fp64, s12:2089). */
  readonly slices: readonly number[];
  /** The zeros appended to the rank's gradient list: P − Σ slices, P when no parameter touches it (s12:2127-2130, s12:2176-2177). */
  readonly pad: number;
}

export function flatLayout(numels: readonly number[], world: number, rank: number): FlatLayout {
  const total = numels.reduce((a, b) => a + b, 0);
  const alignment = 2 * world;
  const aligned = Math.ceil(total / alignment) * alignment;
  const partition = aligned / world;
  const start = partition * rank;
  const end = start + partition;
  const offsets: number[] = [];
  const inPartition: boolean[] = [];
  const slices: number[] = [];
  let at = 0;
  let gradPartition = 0;
  for (const n of numels) {
    offsets.push(at);
    const inside = (start <= at && at < end) || (at < start && start < at + n);
    inPartition.push(inside);
    if (inside) {
      gradPartition += n;
      slices.push(Math.min(at + n, end) - Math.max(at, start));
    }
    at += n;
  }
  const covered = slices.reduce((a, b) => a + b, 0);
  return { aligned, partition, offsets, inPartition, gradPartition, slices, pad: slices.length === 0 ? partition : partition - covered };
}

/** Stages 1 and 2 (`DeepSpeedZeroOptimizer`, partition_gradients = stage 2, eng:2423). */
function stage12(ctx: RankContext, settings: DeepSpeedSettings, c: Common): Residency {
  const { ir, ledger } = ctx;
  const N = settings.shards;
  const RB = settings.reduceBucketSize;
  const stage2 = settings.stage === 2;
  const place = new Map(c.order.map((id, k) => [id, k]));
  const layout = flatLayout(c.order.map(c.n), N, settings.rank);
  const P = layout.partition;
  const cast = c.lp !== 'float32';
  const optimizer = flatOptimizer(ctx, P, 'fp32 partition');
  // The master: a clone of the rank's partition in fp32 (s12:492-493; master_weights_and_grads_dtype fp32, bo:484-524).
  const masterBytes = 4 * P;
  const gradients = wholeGradients(ctx);
  const frozen = (storage: number) => ir.storages[storage]!.role === 'param' && !ir.storages[storage]!.trainable;
  let micro = 0;
  const boundary = () => micro === ctx.microBatches - 1;
  const ipg: number[] = [];
  let bucket: number[] = [];
  let elements = 0;
  let extraLarge: number | null = null;
  // grads_in_partition of this micro-step, and the one all_grad_tensors keeps (the first micro-step's).
  let gip: number | null = null;
  let held: number | null = null;
  let pad: number | null = null;
  // ZeRO-Offload (cpu_offload, s12:186-191): the master, its fp32 gradient and the optimizer live on
  // self.device = cpu (s12:238); contiguous_gradients is forced on (s12:260).
  const offload = settings.offloadOptimizer;
  // largest_param_numel over the param groups (s12:558-567): temp_grad_buffer_for_gpu_offload, a GPU
  // buffer in the model dtype kept for the whole run (s12:591-593), and its host twin (s12:585-590).
  const largestParam = Math.max(0, ...c.order.map(c.n));
  // Each in-partition parameter's slice of the rank's partition (grad_position's num_elements, s12:1473-1496).
  const sliceOf = new Map<number, number>();
  {
    let k = 0;
    c.order.forEach((p, i) => {
      if (layout.inPartition[i]) sliceOf.set(p, layout.slices[k++]!);
    });
  }

  const freeGrad = (p: number) => {
    const block = gradients.grads.get(p);
    if (block === undefined) return;
    ledger.release(block);
    gradients.grads.delete(p);
  };
  /** The all-reduce's slices of the bucket: each parameter cut at partition boundaries, runs to one rank merged (s12:1372-1433). */
  const slicesOf = (params: readonly number[]) => {
    const out: { rank: number; n: number }[] = [];
    for (const p of params) {
      const o = layout.offsets[place.get(p)!]!;
      const n = c.n(p);
      for (let part = Math.floor(o / P); part * P < o + n; part += 1) {
        const size = Math.min(o + n, (part + 1) * P) - Math.max(o, part * P);
        const last = out[out.length - 1];
        if (last !== undefined && last.rank === part) last.n += size;
        else out.push({ rank: part, n: size });
      }
    }
    return out;
  };
  const copyInPartition = (q: number, label: string) => {
    if (offload) {
      // copy_grads_in_partition with cpu_offload (s12:1650-1666): no grads_in_partition. Between
      // boundaries the gradient goes to a host accumulation buffer through the persistent GPU
      // buffer (async_accumulate_grad_in_cpu_via_gpu, s12:1516-1557: in place, no allocation); at
      // the boundary its slice's norm in fp64 on the GPU (set_norm_for_param_grad_in_gpu,
      // s12:1575-1588), the slice cast to fp32 on the GPU when the model is 16-bit and copied into
      // the host fp32 partition, then .grad = None (async_inplace_copy_grad_to_fp32_buffer_from_gpu, s12:1590-1605).
      if (!boundary()) return;
      const slice = sliceOf.get(q) ?? 0;
      if (slice > 0) {
        const norm = ledger.alloc(8 * slice, 'temporaries');
        ledger.record('backward', `${label} (ZeRO-Offload gradient norm, fp64)`);
        ledger.release(norm);
        if (cast) {
          const up = ledger.alloc(4 * slice, 'temporaries');
          ledger.record('backward', `${label} (ZeRO-Offload fp32 gradient to the host)`);
          ledger.release(up);
        }
      }
      freeGrad(q);
      return;
    }
    if (gip === null) {
      gip = ledger.alloc(c.lpBytes(layout.gradPartition), 'gradients');
      ledger.record('backward', `${label} (ZeRO grads_in_partition)`);
    }
    // An extra-large gradient is copied into its slot and its own storage goes (s12:1683-1686).
    if (q === extraLarge) freeGrad(q);
  };
  /** reduce_ipg_grads (s12:1691-1755). */
  const flush = (label: string) => {
    if (bucket.length === 0) return;
    // allreduce_and_scatter: slices appended until their elements pass the bucket size; a flush
    // of two or more slices flattens them into a new tensor (one is a view) (s12:1314-1348, s12:1841).
    let run: number[] = [];
    let sum = 0;
    const allReduce = () => {
      if (run.length >= 2) {
        const block = ledger.alloc(c.lpBytes(sum), 'communication');
        ledger.record('backward', `${label} (ZeRO all-reduce flatten)`);
        ledger.release(block);
      }
      run = [];
      sum = 0;
    };
    for (const slice of slicesOf(bucket)) {
      run.push(slice.n);
      sum += slice.n;
      if (sum > RB) allReduce();
    }
    if (run.length > 0) allReduce();
    for (const q of bucket) {
      const inside = layout.inPartition[place.get(q)!]!;
      // Stage 2: a gradient outside the partition is dropped (s12:1742-1749); stage 1 keeps it until the epilogue.
      if (inside) copyInPartition(q, label);
      else if (stage2 && q === extraLarge) freeGrad(q);
    }
    bucket = [];
    elements = 0;
    extraLarge = null;
  };
  /** reduce_independent_p_g_buckets_and_remove_grads (s12:1193-1253). */
  const reduce = (p: number, label: string) => {
    const n = c.n(p);
    if (n === 0) return;
    if (elements + n > RB) flush(label);
    // Over the bucket size it stays in its own storage; else it is copied into the bucket and freed (s12:1221-1236).
    if (n > RB) extraLarge = p;
    else freeGrad(p);
    elements += n;
    bucket.push(p);
  };
  return {
    param: (storage) => {
      // Trainable parameters become views of the flat buffer; frozen ones keep their storage (s12:380-385).
      if (frozen(storage)) ledger.alloc(ir.storages[storage]!.bytes, 'parameters');
    },
    start() {
      ledger.alloc(c.lpBytes(layout.aligned), 'parameters');
      if (offload) {
        // The bit16 flat buffer stays on the GPU; the master and the state are on the host (s12:492-507).
        if (largestParam > 0) ledger.alloc(c.lpBytes(largestParam), 'communication');
        return { grads: [], state: [] };
      }
      ledger.alloc(masterBytes, 'optimizer');
      // No gradient outlives a step (the step frees the partition, s12:2372; the epilogue every .grad, s12:2034-2044).
      return { grads: [], state: optimizer.allocate() };
    },
    // zero_grad(set_to_none) after the step finds nothing left (s12:2017-2032).
    zeroGrad: () => {
      micro = 0;
    },
    beforeForward: noop,
    afterForward: noop,
    beforeBackward: (op, prefix) => outputHook(c, op, prefix),
    paramGrads: gradients.paramGrads,
    afterBackward(op, label) {
      gradients.afterBackward(op, label);
      // F.linear's weight gradient goes through a transpose node first, so the bias's hook fires
      // before the weight's (measured: DeepSpeed's trace frees 40 B, then 10 KB, then 1 KB).
      const hooks = c.hooksAt.get(op.index) ?? [];
      for (const p of op.op === 'linear' ? [...hooks].reverse() : hooks) {
        // process_gradients → setup_buckets: the IPG buffer(s) at the first hook after a release (s12:1758-1765, s12:2493-2514).
        if (ipg.length === 0) {
          for (let k = 0; k < (settings.overlapComm ? 2 : 1); k += 1) ipg.push(ledger.alloc(c.lpBytes(RB), 'communication'));
          ledger.record('backward', `${label} (ZeRO IPG bucket)`);
        }
        // Stage 2 reduces in the hook; stage 1 only with overlap_comm at the boundary (s12:1762-1769).
        if (stage2 || (settings.overlapComm && boundary())) reduce(p, label);
      }
    },
    endBackward(prefix, last) {
      const label = `${prefix}ZeRO-${settings.stage} epilogue`;
      if (!stage2 && !last) {
        // Stage 1 communicates only at the boundary (eng:2906-2912): .grad and the IPG buffer stay.
        gradients.endBackward();
        micro += 1;
        return;
      }
      // Stage 1 without overlap: reduce_gradients walks the group in order (s12:861-881).
      if (!stage2 && !settings.overlapComm) for (const p of c.order) if (gradients.grads.has(p)) reduce(p, label);
      flush(label);
      // all_grad_tensors: the first micro-step's partition is kept, a later one is added into it and goes (s12:935-944).
      let later: number | null = null;
      if (held === null) held = gip;
      else later = gip;
      gip = null;
      if (last) {
        // averaged_gradients: views, and zeros where the partition holds alignment padding (s12:2118-2190);
        // with cpu_offload the epilogue builds none (s12:935).
        if (layout.pad > 0 && !offload) pad = ledger.alloc(c.lpBytes(layout.pad), 'gradients');
        ledger.record('backward', label);
      }
      // _release_ipg_buffers, then every .grad set to None (s12:828-835, s12:2034-2044).
      for (const block of ipg) ledger.release(block);
      ipg.length = 0;
      for (const p of [...gradients.grads.keys()]) freeGrad(p);
      if (later !== null) ledger.release(later);
      gradients.endBackward();
      micro += 1;
    },
    step() {
      if (offload) {
        // The norm from the per-parameter norms taken in backward (s12:2240-2241, a one-element
        // tensor), the step on the host (s12:2323-2330), the bit16 partition written in place from
        // the host buffer (s12:2336-2341), the all-gather in place (ru:1005-1013): nothing new on the GPU.
        ledger.record('step', 'ZeRO-Offload optimizer step on the host');
        return;
      }
      // The norm: one fp64 copy of each gradient slice at a time (s12:2054-2104).
      const largest = Math.max(0, ...layout.slices);
      if (largest > 0) {
        const block = ledger.alloc(8 * largest, 'temporaries');
        ledger.record('step', 'ZeRO gradient norm (fp64 copy)');
        ledger.release(block);
      }
      // flatten (a view of a single tensor, §6.3), then .to(fp32) (a copy unless already fp32) (s12:2355-2362).
      const pieces = layout.slices.length + (layout.pad > 0 && layout.slices.length > 0 ? 1 : 0);
      const flat = pieces > 1 ? ledger.alloc(c.lpBytes(P), cast ? 'temporaries' : 'gradients') : null;
      const fp32 = cast ? ledger.alloc(4 * P, 'gradients') : flat;
      ledger.record('step', 'ZeRO fp32 gradient partition');
      if (cast && flat !== null) ledger.release(flat);
      const dropPartition = () => {
        if (held !== null) ledger.release(held);
        if (pad !== null) ledger.release(pad);
        held = null;
        pad = null;
      };
      // averaged_gradients[g] = None frees the partition unless the fp32 gradient is a view of it (s12:2372).
      if (fp32 !== null) dropPartition();
      optimizer.step();
      // The fp32 gradient goes; the bit16 copy and the all-gather are in place (s12:2382-2386, ru:1005-1013).
      if (fp32 !== null) ledger.release(fp32);
      else dropPartition();
    },
    optimizerState: () => (offload ? 0 : masterBytes + optimizer.bytes),
    resident: () => ({
      parameters: c.lpBytes(layout.aligned) + c.all.filter((p) => !c.trainable(p)).reduce((s, p) => s + (ir.storages[ir.tensors[p]!.storage]!.bytes as number), 0),
      gradients: offload ? 0 : c.lpBytes(layout.gradPartition),
    }),
    ...(offload
      ? {
          host: () => ({
            parameters: 0,
            // The fp32 gradient partition (s12:840-846, kept under cpu_offload: s12:852); with
            // accumulation a model-dtype buffer per in-partition parameter, whole (s12:1525-1528, s12:1554-1555).
            gradients: 4 * P + (ctx.microBatches > 1 ? c.lpBytes(layout.gradPartition) : 0),
            optimizer: masterBytes + optimizer.hostBytes,
            // param_buffer_of_bit16_for_cpu_offload_groups (s12:497-507), temp_grad_buffer_for_cpu_offload (s12:585-590).
            staging: c.lpBytes(P) + c.lpBytes(largestParam),
          }),
        }
      : {}),
  };
}

function noop(): void {}

/** The engine's output hook: `grad / gradient_accumulation_steps` makes a new gradient of each returned tensor (eng:2996-3002, ru:1318-1330). */
function outputHook(c: Common, op: IROp, prefix: string): void {
  const tensors = c.outputHooks.get(op.index);
  if (tensors === undefined) return;
  const blocks = tensors.map((t) => c.ledger.alloc(bytesOf(numelOf(c.ir.tensors[t]!.spec), c.ir.tensors[t]!.spec.dtype), 'activationGrads'));
  c.ledger.record('backward', `${prefix}engine output gradient / accumulation steps`);
  for (const block of blocks) c.ledger.release(block);
}

/** A module hook event of the schedule (`forward`: a forward hook run by a checkpoint's recompute in backward). */
interface HookEvent {
  readonly kind: 'pre' | 'post';
  readonly module: number;
  readonly forward?: boolean;
}

/** A gather in flight: the coordinator's handle, held by the registry once per member (ppc:613). */
interface Handle {
  readonly parts: { readonly params: readonly number[]; readonly flat: number | null }[];
  refs: number;
  complete: boolean;
}

/** Stage 3: `DeepSpeedZeroOptimizer_Stage3`, `DeepSpeedZeRoOffload` and the `PartitionedParameterCoordinator`. */
function stage3(ctx: RankContext, settings: DeepSpeedSettings, c: Common): Residency {
  const { ir, ledger } = ctx;
  const N = settings.shards;
  const RB = settings.reduceBucketSize;
  const D = settings.maxReuseDistance;
  const cast = c.lp !== 'float32';
  const q = (p: number) => Math.ceil(c.n(p) / N);
  const dtypeOf = (p: number) => ir.tensors[p]!.spec.dtype;
  const paddedBytes = (p: number) => bytesOf(q(p) * N, dtypeOf(p)) as number;
  const dsId = new Map(c.all.map((p, k) => [p, k]));
  const byId = (a: number, b: number) => dsId.get(a)! - dsId.get(b)!;
  const Q = c.order.reduce((s, p) => s + q(p), 0);
  // Sub-groups: parameters in group order until their partitions reach sub_group_size (s3:1160-1183).
  const subGroups: number[][] = [];
  if (settings.subGroupSize >= Q) subGroups.push([...c.order]);
  else {
    let group: number[] = [];
    let size = 0;
    c.order.forEach((p, k) => {
      group.push(p);
      size += q(p);
      if (size >= settings.subGroupSize || k === c.order.length - 1) {
        subGroups.push(group);
        group = [];
        size = 0;
      }
    });
  }
  const subSizes = subGroups.map((g) => g.reduce((s, p) => s + q(p), 0));
  const optimizers = subSizes.map((S, k) => flatOptimizer(ctx, S, `fp32 sub-group ${k}`));
  // ZeRO-Offload: the fp32 master, its gradients and the optimizer state on self.device = cpu (s3:328);
  // offload_param: the parameters' partitions on the host (s3:926-954, pp:1800-1815).
  const offloadOptimizer = settings.offloadOptimizer;
  const offloadParam = settings.offloadParam;
  // The fp32 master of each sub-group: an fp32 clone (on the host with offload_optimizer,
  // s3:1107-1110). s3:1112-1113 would share an fp32 partition on the same device, but compares a
  // torch.device with self.device, a string ('cuda:N', 'cpu': s3:328), which is never equal:
  // measured (test/fixtures/deepspeed-cpu), the clone is always made.
  const masterBytes = subSizes.reduce((s, S) => s + 4 * S, 0);
  // Persistent parameters: numel ≤ threshold while the total stays under the model threshold, over named_parameters (po:311-329).
  const persistent = new Set<number>();
  let persistentTotal = 0;
  for (const p of c.all) {
    if (c.n(p) + persistentTotal > settings.modelPersistenceThreshold) continue;
    if (c.n(p) <= settings.paramPersistenceThreshold) {
      persistent.add(p);
      persistentTotal += c.n(p);
    }
  }
  const persistentList = c.all.filter((p) => persistent.has(p));
  // _post_step's all-gather (s3:2570): per parameter a q·N buffer (pp:2024, pp:2112); at world 1 the
  // coalesced call is no gather at all (pp:2001-2003) but a lone parameter goes the sequential way (pp:1716-1717).
  // With offload_param the partition is on the host, so at world 1 the no-gather handle's .to(device) is a copy (pp:63-74).
  const persistentBytes = (p: number) => (N > 1 ? paddedBytes(p) : persistentList.length === 1 || offloadParam ? (bytesOf(c.n(p), dtypeOf(p)) as number) : 0);
  const partitionBytes = (p: number) => bytesOf(q(p), dtypeOf(p)) as number;

  const identity = (m: number) => ir.modules[m]!.sharedWith ?? m;
  const direct = ir.modules.map((mod) => [...new Set(mod.params)].sort(byId));
  const paramsOf = (m: number) => direct[m]!;
  const label = (m: number) => ir.modules[m]!.key || 'root';
  const { forward, backward, trace } = schedule(ir, c);
  // The parameter trace: each fetch's parameters in ds_id order with the step they are used at (ppc:234-240).
  const paramTrace: { p: number; step: number }[] = [];
  trace.forEach((m, step) => {
    for (const p of paramsOf(m)) paramTrace.push({ p, step });
  });

  const gradients = wholeGradients(ctx);
  const status = new Map<number, number>(c.all.map((p) => [p, NOT_AVAILABLE]));
  const data = new Map<number, number>();
  const active = new Map<number, Set<number>>(c.all.map((p) => [p, new Set()]));
  const registry = new Map<number, Handle>();
  const activeBackward = new Map<number, number>();
  let step = 0;
  let available = 0;
  let queue = 0;
  let mostRecent = new Map<number, number>();
  let bucket: number[] = [];
  let elements = 0;
  let micro = 0;
  const boundary = () => micro === ctx.microBatches - 1;

  const alloc = (bytes: number, category: Category) => ledger.alloc(bytes, category);
  /**
   * offload_param: the partitions' host-to-device copies an all-gather makes first
   * (`ds_tensor.to(device)`: _all_gather_dtype's cat inputs pp:1330-1333, _all_gather_sequential's
   * input pp:1366-1369, _allgather_params_coalesced's local_tensors pp:2012-2014), live while the
   * gather's buffers are made.
   */
  const hostCopies = (params: readonly number[], phase: 'forward' | 'backward' | 'step', label_: string) => {
    if (!offloadParam || N === 1 || params.length === 0) return;
    const block = alloc(params.reduce((s, p) => s + partitionBytes(p), 0), 'communication');
    ledger.record(phase, `${label_} (ZeRO-3 partitions copied from the host)`);
    ledger.release(block);
  };
  /** all_gather_coalesced of NOT_AVAILABLE parameters: one call, per dtype (ppc:582-613, pp:1514-1580). */
  const gather = (params: readonly number[], phase: 'forward' | 'backward', label_: string) => {
    const sorted = [...params].sort(byId);
    for (const p of sorted) {
      status.set(p, INFLIGHT);
      available += c.n(p);
    }
    const parts: Handle['parts'][number][] = [];
    const dtypes = [...new Set(sorted.map(dtypeOf))];
    for (const dtype of dtypes) {
      const group = sorted.filter((p) => dtypeOf(p) === dtype);
      if (N === 1) {
        // No gather: the partition is the parameter (pp:1531-1532), unless it lives on the host: then
        // the no-gather handle's .to(device) is the gathered copy (pp:96-100).
        if (offloadParam) for (const p of group) data.set(p, alloc(bytesOf(c.n(p), dtype) as number, 'parameters'));
        parts.push({ params: group, flat: null });
      }
      else if (group.length === 1) {
        // _all_gather_sequential: the padded buffer is the parameter's storage (pp:1345-1374).
        data.set(group[0]!, alloc(paddedBytes(group[0]!), 'parameters'));
        parts.push({ params: group, flat: null });
      } else parts.push({ params: group, flat: alloc(group.reduce((s, p) => s + paddedBytes(p), 0), 'communication') }); // _all_gather_dtype (pp:1301-1343)
    }
    // The host partitions' copies exist while the gather's buffers are made; they go when it is launched.
    hostCopies(sorted, phase, label_);
    const handle: Handle = { parts, refs: sorted.length, complete: false };
    for (const p of sorted) registry.set(p, handle);
  };
  /** The first wait on a coalesced handle copies out every member (torch.cat, pp:750-795). */
  const wait = (handle: Handle) => {
    if (handle.complete) return;
    handle.complete = true;
    for (const part of handle.parts) {
      for (const p of part.params) {
        if (part.flat !== null) data.set(p, alloc(bytesOf(c.n(p), dtypeOf(p)) as number, 'parameters'));
        status.set(p, AVAILABLE);
      }
    }
  };
  const dropHandle = (handle: Handle) => {
    for (const part of handle.parts) if (part.flat !== null) ledger.release(part.flat);
  };
  /** __release_param: only an available parameter no active module uses (ppc:624-630, pp:308-324). */
  const release = (p: number) => {
    if (status.get(p) !== AVAILABLE || active.get(p)!.size > 0) return;
    const block = data.get(p);
    if (block !== undefined) ledger.release(block);
    data.delete(p);
    status.set(p, NOT_AVAILABLE);
    available -= c.n(p);
  };
  /** __params_to_release in trace-complete mode (ppc:634-664). */
  const toRelease = (m: number, at: number) => {
    const out = new Set(paramsOf(m).filter((p) => !persistent.has(p)));
    for (const p of paramsOf(m)) if ((mostRecent.get(p) ?? -1e10) > at) out.delete(p);
    let traversed = 0;
    for (let s = at; s < trace.length && out.size > 0; s += 1) {
      if (traversed >= D) break;
      for (const p of paramsOf(trace[s]!)) {
        out.delete(p);
        traversed += c.n(p);
      }
    }
    return out;
  };
  /** fetch_sub_module (ppc:310-490). */
  const fetch = (m: number, forward: boolean, prefix: string) => {
    const phase = forward ? 'forward' : 'backward';
    const params = paramsOf(m);
    const missing = params.filter((p) => status.get(p) === NOT_AVAILABLE);
    if (missing.length > 0) gather(missing, phase, `${prefix}${label(m)}`);
    if (!forward && !activeBackward.has(identity(m))) activeBackward.set(identity(m), m);
    const done: Handle[] = [];
    let waited = missing.length > 0;
    for (const p of params) {
      active.get(p)!.add(identity(m));
      const handle = registry.get(p);
      if (handle === undefined) continue;
      registry.delete(p);
      if (!handle.complete) waited = true;
      wait(handle);
      handle.refs -= 1;
      if (handle.refs === 0) done.push(handle);
    }
    if (waited) ledger.record(phase, `${prefix}${label(m)} (ZeRO-3 all-gather)`);
    // The coalesced buffer goes once every member left the registry (ppc:406).
    for (const handle of done) dropHandle(handle);
    // Trace complete: this module's entries leave the queue, then the prefetch (ppc:427-485).
    const fresh = params.filter((p) => (mostRecent.get(p) ?? -1e10) < step);
    const popped = new Set<number>();
    while (queue < paramTrace.length && popped.size < fresh.length) {
      const entry = paramTrace[queue++]!;
      mostRecent.set(entry.p, entry.step);
      popped.add(entry.p);
    }
    // DeepSpeed raises a tracing error here (ppc:444-450); the schedule replays the recorded trace, so it cannot happen.
    if (fresh.some((p) => !popped.has(p))) fail('internal', `ZeRO-3 trace out of step at ${label(m)}`, { path: ['parallel'] });
    if (settings.prefetchBucketSize > 0) {
      const budget = Math.min(settings.maxLiveParameters - available, settings.prefetchBucketSize);
      const batch = new Set<number>();
      let numel = 0;
      while (queue < paramTrace.length && numel < budget) {
        const entry = paramTrace[queue++]!;
        const prefetch = status.get(entry.p) === NOT_AVAILABLE && !batch.has(entry.p);
        mostRecent.set(entry.p, Math.max(mostRecent.get(entry.p) ?? -1e10, entry.step));
        if (prefetch) {
          batch.add(entry.p);
          numel += c.n(entry.p);
        }
      }
      if (numel > 0) {
        gather([...batch], phase, `${prefix}${label(m)} prefetch`);
        ledger.record(phase, `${prefix}${label(m)} (ZeRO-3 prefetch)`);
      }
    }
    step += 1;
  };
  /** release_sub_module (ppc:494-533). */
  const releaseModule = (m: number, forward: boolean) => {
    const release_ = toRelease(m, step);
    if (!forward) activeBackward.delete(identity(m));
    for (const p of paramsOf(m)) {
      active.get(p)!.delete(identity(m));
      if (release_.has(p)) release(p);
    }
  };
  /** reset_step at the root's forward pre-hook (po:298-302, ppc:251-290): in-flight gathers waited on and released. */
  const resetStep = () => {
    const handles = new Set<Handle>();
    for (const [p, handle] of registry) {
      wait(handle);
      handles.add(handle);
      release(p);
    }
    registry.clear();
    for (const handle of handles) dropHandle(handle);
    step = 0;
    available = 0;
    queue = 0;
    mostRecent = new Map();
  };
  const run = (events: readonly HookEvent[], forward: boolean, prefix: string) => {
    for (const e of events) {
      if (e.kind === 'pre') fetch(e.module, e.forward ?? forward, prefix);
      else releaseModule(e.module, e.forward ?? forward);
    }
  };

  const freeGrad = (p: number) => {
    const block = gradients.grads.get(p);
    if (block === undefined) return;
    ledger.release(block);
    gradients.grads.delete(p);
  };
  /** __reduce_and_partition_ipg_grads (s3:1570-1617) → reduce_scatter_coalesced (cc:158-218), partition_grads (s3:1886-1934). */
  const flush = (label_: string) => {
    if (bucket.length === 0) return;
    const params = [...bucket].sort(byId);
    const temps: number[] = [];
    if (!(params.length === 1 && c.n(params[0]!) % N === 0)) {
      // Each gradient's rank chunk padded to ⌈n/N⌉ with an empty() tensor, then one cat of them all.
      for (let r = 0; r < N; r += 1) for (const p of params) {
        const chunk = Math.max(0, Math.min(q(p), c.n(p) - r * q(p)));
        if (q(p) - chunk > 0) temps.push(alloc(c.lpBytes(q(p) - chunk), 'communication'));
      }
      temps.push(alloc(c.lpBytes(params.reduce((s, p) => s + q(p) * N, 0)), 'communication'));
      ledger.record('backward', `${label_} (ZeRO-3 reduce-scatter)`);
    }
    // The padding list goes when reduce_scatter_coalesced returns; each q.grad = None frees a gradient kept whole.
    for (const block of temps.slice(0, -1)) ledger.release(block);
    if (offloadOptimizer) {
      // partition_grads (s3:1886-1934) with the gradient partitions on the host: per parameter whose
      // partition holds real data, a GPU copy of it (grad_buffer.to(device), s3:1904-1917) until the
      // next parameter's; at the boundary its fp64 norm (_constant_buffered_norm2, s3:1842-1849, in
      // pieces of 2.5e8) and its fp32 cast copied into the host fp32 gradient (s3:1393-1407), then .grad = None.
      for (const p of params) {
        if (q(p) * settings.rank >= c.n(p)) {
          freeGrad(p);
          continue;
        }
        const copy = alloc(c.lpBytes(q(p)), 'communication');
        if (boundary()) {
          const norm = alloc(8 * Math.min(q(p), 250_000_000), 'temporaries');
          ledger.record('backward', `${label_} (ZeRO-Offload gradient partition norm, fp64)`);
          ledger.release(norm);
          if (cast) {
            const up = alloc(4 * q(p), 'temporaries');
            ledger.record('backward', `${label_} (ZeRO-Offload fp32 gradient partition to the host)`);
            ledger.release(up);
          }
        } else ledger.record('backward', `${label_} (ZeRO-Offload gradient partition to the host)`);
        freeGrad(p);
        ledger.release(copy);
      }
    }
    for (const p of params) freeGrad(p);
    if (temps.length > 0) ledger.release(temps[temps.length - 1]!);
    bucket = [];
    elements = 0;
  };
  /** reduce_independent_p_g_buckets_and_remove_grads (s3:1519-1566). */
  const reduce = (p: number, label_: string) => {
    const n = c.n(p);
    if (elements > 0 && elements + n > RB) flush(label_);
    // Into the contiguous bucket when it fits (the gradient freed), else kept whole until the flush.
    if (elements + n <= RB) freeGrad(p);
    elements += n;
    bucket.push(p);
  };

  const gatherPersistent = () => {
    for (const p of persistentList) {
      const bytes = persistentBytes(p);
      if (bytes > 0) data.set(p, alloc(bytes, 'parameters'));
      status.set(p, AVAILABLE);
    }
  };
  const frozenPartitions = () => c.all.filter((p) => !c.trainable(p)).reduce((s, p) => s + (bytesOf(q(p), dtypeOf(p)) as number), 0);
  return {
    param: noop,
    start() {
      // lp_param_buffer (s3:918-924), frozen parameters' own partitions (pp:1808), the fp32 master,
      // the persistent IPG bucket (s3:730-735) and gradient partitions (s3:740-752).
      // With offload_param the partitions (trainable and frozen) are on the host; with
      // offload_optimizer the master and the gradient partitions (s3:740-752: device = self.device).
      if (!offloadParam) {
        alloc(c.lpBytes(Q), 'parameters');
        const frozen = frozenPartitions();
        if (frozen > 0) alloc(frozen, 'parameters');
      }
      if (masterBytes > 0 && !offloadOptimizer) alloc(masterBytes, 'optimizer');
      alloc(c.lpBytes(RB), 'communication');
      if (!offloadOptimizer) alloc(c.lpBytes(Q), 'gradients');
      // Last step's _post_step left the persistent parameters gathered.
      gatherPersistent();
      return { grads: [], state: offloadOptimizer ? [] : optimizers.flatMap((o) => o.allocate()) };
    },
    zeroGrad: () => {
      micro = 0;
    },
    beforeForward(op, prefix) {
      if (op.index === 0) resetStep();
      run(forward[op.index]!, true, prefix);
    },
    afterForward(op, prefix) {
      if (op.index === ir.ops.length - 1) run(forward[ir.ops.length]!, true, prefix);
    },
    beforeBackward(op, prefix) {
      const events = backward.get(op.index);
      if (events !== undefined) run(events, false, prefix);
      outputHook(c, op, prefix);
    },
    paramGrads: gradients.paramGrads,
    afterBackward(op, label_) {
      gradients.afterBackward(op, label_);
      for (const p of c.hooksAt.get(op.index) ?? []) reduce(p, label_);
    },
    endBackward(prefix) {
      // Post-backward hooks still due run inside autograd; then the epilogue's flush (s3:1357-1361)
      // and release_backward_leftovers (s3:2793-2802, ppc:554-566).
      run(backward.get(-1) ?? [], false, prefix);
      flush(`${prefix}ZeRO-3 epilogue`);
      for (const m of [...activeBackward.values()].reverse()) {
        activeBackward.delete(identity(m));
        for (const p of paramsOf(m)) {
          active.get(p)!.delete(identity(m));
          if (!persistent.has(p)) release(p);
        }
      }
      for (const p of [...gradients.grads.keys()]) freeGrad(p);
      gradients.endBackward();
      micro += 1;
    },
    step() {
      // _partition_all_parameters: every gathered parameter, the persistent ones too (s3:2609, ppc:537-550).
      const handles = new Set<Handle>();
      for (const [p, handle] of registry) {
        wait(handle);
        handles.add(handle);
      }
      registry.clear();
      for (const handle of handles) dropHandle(handle);
      for (const p of c.all) {
        active.get(p)!.clear();
        release(p);
      }
      if (offloadOptimizer) {
        // The norm from the per-partition norms taken in backward (s3:2391-2392); no fp32 gradient on
        // the GPU (_prepare_sub_group, s3:2424-2425); the step on the host; the bit16 partitions
        // written in place from the fp32 ones (s3:2585-2590).
        ledger.record('step', 'ZeRO-Offload optimizer step on the host');
        gatherPersistent();
        if (persistentList.length > 0) {
          ledger.record('step', 'ZeRO-3 persistent parameters gathered');
          hostCopies(persistentList, 'step', 'ZeRO-3 persistent parameters');
        }
        return;
      }
      // The norm: one fp64 copy of a gradient partition at a time (s3:2285).
      const largest = Math.max(0, ...c.order.map(q));
      if (largest > 0) {
        const block = alloc(8 * largest, 'temporaries');
        ledger.record('step', 'ZeRO-3 gradient norm (fp64 copy)');
        ledger.release(block);
      }
      subGroups.forEach((group, k) => {
        const S = subSizes[k]!;
        // flatten (a view of one tensor) then .to(fp32) (s3:2398-2417).
        const flat = group.length > 1 ? alloc(c.lpBytes(S), cast ? 'temporaries' : 'gradients') : null;
        const fp32 = cast ? alloc(4 * S, 'gradients') : null;
        ledger.record('step', `ZeRO-3 sub-group ${k} fp32 gradient`);
        if (cast && flat !== null) ledger.release(flat);
        optimizers[k]!.step();
        // _release_sub_group (s3:2448-2456).
        if (fp32 !== null) ledger.release(fp32);
        if (!cast && flat !== null) ledger.release(flat);
      });
      // _post_step gathers the persistent parameters again (s3:2566-2572).
      gatherPersistent();
      if (persistentList.length > 0) {
        ledger.record('step', 'ZeRO-3 persistent parameters gathered');
        hostCopies(persistentList, 'step', 'ZeRO-3 persistent parameters');
      }
    },
    optimizerState: () => (offloadOptimizer ? 0 : masterBytes + optimizers.reduce((s, o) => s + o.bytes, 0)),
    resident: () => ({
      parameters: (offloadParam ? 0 : c.lpBytes(Q) + frozenPartitions()) + persistentList.reduce((s, p) => s + persistentBytes(p), 0),
      gradients: offloadOptimizer ? 0 : c.lpBytes(Q),
    }),
    ...(offloadOptimizer || offloadParam
      ? {
          host: () => ({
            // fp16_partitioned_groups_flat in host memory (s3:926-951) and the frozen parameters' own partitions (pp:1800-1815).
            parameters: offloadParam ? c.lpBytes(Q) + frozenPartitions() : 0,
            // grad_partitions_flat_buffer (s3:740-752) and each sub-group's fp32 gradient (s3:1286-1291).
            gradients: offloadOptimizer ? c.lpBytes(Q) + 4 * Q : 0,
            // The fp32 master clone (s3:1107-1110) and the CPU optimizer's state.
            optimizer: offloadOptimizer ? masterBytes + optimizers.reduce((s, o) => s + o.hostBytes, 0) : 0,
            staging: 0,
          }),
        }
      : {}),
  };
}

/**
 * ZeRO-3's hook schedule over the trace: forward pre/post hooks around each op (in call order), the
 * backward's module entries and exits, checkpoint recomputes, and the fetch order (the trace the
 * coordinator records, ppc:222-240). A module is entered in backward at its first backward op (the
 * pre-backward Function on its outputs, po:436-470, outer modules first) and left after its last
 * (the post-backward Function on its inputs, po:477-506, inner first), which fires only when every
 * input needing a gradient got one through the module. A checkpointed block reruns its forward
 * (forward hooks included) after the modules around it entered and before those inside it do.
 */
function schedule(ir: IR, c: Common): { forward: HookEvent[][]; backward: Map<number, HookEvent[]>; trace: number[] } {
  const forward: HookEvent[][] = Array.from({ length: ir.ops.length + 1 }, () => []);
  const visit = (m: number) => {
    const mod = ir.modules[m]!;
    forward[mod.firstOp]!.push({ kind: 'pre', module: m });
    for (const child of [...mod.children].sort((a, b) => a - b)) visit(child);
    forward[mod.endOp]!.push({ kind: 'post', module: m });
  };
  if (ir.modules.length > 0) visit(0);
  const flatForward = forward.flat();
  const fires = ir.modules.map((mod) => {
    const needing = mod.inputs.filter((t) => ir.tensors[t]!.requiresGrad);
    return (
      needing.length > 0 &&
      needing.every((t) => {
        for (let i = mod.firstOp; i < mod.endOp; i += 1) {
          const op = ir.ops[i]!;
          if (c.runs[i] === 1 && op.inputs.some((input, k) => input === t && op.backward!.inputGrads[k] !== 'none')) return true;
        }
        return false;
      })
    );
  });
  const chain = (m: number) => {
    const out: number[] = [];
    for (let at: number | null = m; at !== null; at = ir.modules[at]!.parent) out.push(at);
    return out.reverse();
  };
  const backward = new Map<number, HookEvent[]>();
  const trace: number[] = flatForward.filter((e) => e.kind === 'pre').map((e) => e.module);
  const entered = new Set<number>();
  let open: number[] = [];
  const recomputed = new Set<number>();
  const leave = (events: HookEvent[], keep: ReadonlySet<number>) => {
    const leaving = open.filter((m) => !keep.has(m)).sort((a, b) => ir.modules[a]!.finishOrder - ir.modules[b]!.finishOrder);
    open = open.filter((m) => keep.has(m));
    for (const m of leaving) if (fires[m]) events.push({ kind: 'post', module: m });
  };
  for (let i = ir.ops.length - 1; i >= 0; i -= 1) {
    if (c.runs[i] !== 1) continue;
    const op = ir.ops[i]!;
    const around = chain(op.module);
    const events: HookEvent[] = [];
    leave(events, new Set(around));
    const entering = around.filter((m) => !entered.has(m));
    const enter = (m: number) => {
      entered.add(m);
      open.push(m);
      events.push({ kind: 'pre', module: m });
      trace.push(m);
    };
    const region = op.region === null || recomputed.has(op.region) ? null : ir.regions[op.region]!;
    if (region === null) entering.forEach(enter);
    else {
      recomputed.add(op.region!);
      const within = (m: number) => region.firstOp <= ir.modules[m]!.firstOp && ir.modules[m]!.endOp <= region.endOp;
      const holds = (m: number) => ir.modules[m]!.firstOp <= region.firstOp && region.endOp <= ir.modules[m]!.endOp;
      entering.filter(holds).forEach(enter);
      for (const e of flatForward) {
        if (!within(e.module)) continue;
        events.push({ ...e, forward: true });
        if (e.kind === 'pre') trace.push(e.module);
      }
      entering.filter((m) => !holds(m)).forEach(enter);
    }
    if (events.length > 0) backward.set(i, events);
  }
  const end: HookEvent[] = [];
  leave(end, new Set());
  if (end.length > 0) backward.set(-1, end);
  return { forward, backward, trace };
}

export type { FlatLayout };
