import type { Category, Phase } from '../../../memory/ledger.js';
import type { EngineHooks, HostBytes, RankContext } from '../../../memory/residency/types.js';
import type { IROp } from '../../../trace/ir.js';
import type { Common, FlatOptimizer } from './common.js';
import type { DeepSpeedSettings } from './settings.js';

/** Stages 1/2's flat layout of the param group over N ranks, seen from rank r (s12:380-530, s12:1966-2015). */
export interface FlatLayout {
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

/** The flat layout of parameters of `numels` elements (in group order) over `world` ranks, seen from `rank`. */
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

/**
 * Whether one run can stand for every rank of the group ({@link RankFamily}): the ranks' steps
 * differ only in blocks of their own (grads_in_partition, the padding, the step's norm copy and
 * flatten, stage 1's extra-large gradients outside the partition) when nothing is offloaded and
 * the fp32 gradient is a cast (so the partition goes at the same moment on every rank).
 */
export function zero12Family(settings: DeepSpeedSettings, c: Common): boolean {
  return !settings.offloadOptimizer && c.lp !== 'float32';
}

/**
 * Stages 1 and 2 (`DeepSpeedZeroOptimizer`, partition_gradients = stage 2, eng:2423). With
 * `family`, when {@link zero12Family} allows it, the run stands for every rank of the group.
 */
export function zero12(ctx: RankContext, settings: DeepSpeedSettings, c: Common, family = false): EngineHooks {
  const ranks = family && zero12Family(settings, c) ? Array.from({ length: settings.shards }, (_, r) => r) : [settings.rank];
  if (ranks.length > 1) c.ledger.forRanks(ranks.length);
  const z = new Zero12(ctx, settings, c, ranks);
  // No zeroGrad: zero_grad(set_to_none) after the step finds nothing left (s12:2017-2032).
  return {
    param: (storage) => z.param(storage),
    start: () => z.start(),
    beforeBackward: (op, prefix) => c.outputHook(op, prefix),
    paramGrads: c.gradients.paramGrads,
    afterBackward: (op, label) => z.afterBackward(op, label),
    endBackward: (prefix, last) => z.endBackward(prefix, last),
    step: () => z.step(),
    optimizerState: () => (z.offload ? 0 : z.masterBytes + z.optimizer.bytes),
    resident: () => z.resident(),
    ...(z.offload ? { host: () => z.host() } : {}),
  };
}

/**
 * One rank of stages 1/2 (or every rank of the group at once: `ranks`, each with its own view of
 * the layout and its own partition blocks): the layout fixed before the step, the IPG buckets and
 * gradient partitions over it. What every rank does alike is done once.
 */
class Zero12 {
  private readonly stage2: boolean;
  private readonly place: ReadonlyMap<number, number>;
  /** Each simulated rank's view of the flat layout (offsets and partition size are every rank's). */
  private readonly layouts: readonly FlatLayout[];
  private readonly layout: FlatLayout;
  /** The simulated ranks' indices into `layouts`. */
  private readonly all: readonly number[];
  private readonly cast: boolean;
  readonly optimizer: FlatOptimizer;
  /** The master: a clone of the rank's partition in fp32 (s12:492-493; master_weights_and_grads_dtype fp32, bo:484-524). */
  readonly masterBytes: number;
  /**
   * ZeRO-Offload (cpu_offload, s12:186-191): the master, its fp32 gradient and the optimizer live on
   * self.device = cpu (s12:238); contiguous_gradients is forced on (s12:260).
   */
  readonly offload: boolean;
  /**
   * largest_param_numel over the param groups (s12:558-567): temp_grad_buffer_for_gpu_offload, a GPU
   * buffer in the model dtype kept for the whole run (s12:591-593), and its host twin (s12:585-590).
   */
  private readonly largestParam: number;
  /** Each in-partition parameter's slice of the rank's partition (grad_position's num_elements, s12:1473-1496; offload, one rank). */
  private readonly sliceOf = new Map<number, number>();
  private readonly ipg: number[] = [];
  private bucket: number[] = [];
  private elements = 0;
  private extraLarge: number | null = null;
  /** Per simulated rank: grads_in_partition of this micro-step, and the one all_grad_tensors keeps (the first micro-step's). */
  private readonly gip: (number | null)[];
  private readonly held: (number | null)[];
  private readonly pad: (number | null)[];
  /** A family's stage-1 extra-large gradients kept by the ranks outside them (keepOutside). */
  private readonly kept: number[] = [];

  constructor(
    private readonly ctx: RankContext,
    private readonly settings: DeepSpeedSettings,
    private readonly c: Common,
    ranks: readonly number[],
  ) {
    this.stage2 = settings.stage === 2;
    this.place = new Map(c.order.map((id, k) => [id, k]));
    const numels = c.order.map(c.n);
    this.layouts = ranks.map((rank) => flatLayout(numels, settings.shards, rank));
    this.layout = this.layouts[0]!;
    this.all = ranks.map((_, i) => i);
    this.gip = ranks.map(() => null);
    this.held = ranks.map(() => null);
    this.pad = ranks.map(() => null);
    this.cast = c.lp !== 'float32';
    this.optimizer = c.flatOptimizer(this.layout.partition, 'fp32 partition');
    this.masterBytes = 4 * this.layout.partition;
    this.offload = settings.offloadOptimizer;
    this.largestParam = Math.max(0, ...numels);
    let k = 0;
    c.order.forEach((p, i) => {
      if (this.layout.inPartition[i]) this.sliceOf.set(p, this.layout.slices[k++]!);
    });
  }

  /** A block the listed ranks hold, each of its own size: one rank's plain block, or the family's (0 for the others). */
  private allocFor(ranks: readonly number[], bytes: (layout: FlatLayout) => number, category: Category): number {
    if (this.layouts.length === 1) return this.c.ledger.alloc(bytes(this.layout), category);
    return this.c.ledger.allocEach(
      this.layouts.map((layout, i) => (ranks.includes(i) ? bytes(layout) : 0)),
      category,
    );
  }

  /** An event of the listed ranks. */
  private recordFor(ranks: readonly number[], phase: Phase, label: string): void {
    if (ranks.length === this.layouts.length) this.c.ledger.record(phase, label);
    else this.c.ledger.recordFor(ranks, phase, label);
  }

  /** Releases each of the blocks once (ranks of a family share theirs). */
  private releaseAll(blocks: readonly (number | null)[]): void {
    for (const block of new Set(blocks)) if (block !== null) this.c.ledger.release(block);
  }

  private boundary(): boolean {
    return this.ctx.microDone() === this.ctx.microBatches - 1;
  }

  param(storage: number): void {
    const s = this.ctx.ir.storages[storage]!;
    // Trainable parameters become views of the flat buffer; frozen ones keep their storage (s12:380-385).
    if (s.role === 'param' && !s.trainable) this.c.ledger.alloc(s.bytes, 'parameters');
  }

  start(): { grads: number[]; state: number[] } {
    const { ledger, lpBytes } = this.c;
    ledger.alloc(lpBytes(this.layout.aligned), 'parameters');
    if (this.offload) {
      // The bit16 flat buffer stays on the GPU; the master and the state are on the host (s12:492-507).
      if (this.largestParam > 0) ledger.alloc(lpBytes(this.largestParam), 'communication');
      return { grads: [], state: [] };
    }
    ledger.alloc(this.masterBytes, 'optimizer');
    // No gradient outlives a step (the step frees the partition, s12:2372; the epilogue every .grad, s12:2034-2044).
    return { grads: [], state: this.optimizer.allocate() };
  }

  afterBackward(op: IROp, label: string): void {
    this.c.gradients.afterBackward(op, label);
    // F.linear's weight gradient goes through a transpose node first, so the bias's hook fires
    // before the weight's (measured: DeepSpeed's trace frees 40 B, then 10 KB, then 1 KB).
    const hooks = this.c.hooksAt.get(op.index) ?? [];
    for (const p of op.op === 'linear' ? [...hooks].reverse() : hooks) {
      // process_gradients → setup_buckets: the IPG buffer(s) at the first hook after a release (s12:1758-1765, s12:2493-2514).
      if (this.ipg.length === 0) {
        for (let k = 0; k < (this.settings.overlapComm ? 2 : 1); k += 1)
          this.ipg.push(this.c.ledger.alloc(this.c.lpBytes(this.settings.reduceBucketSize), 'communication'));
        this.c.ledger.record('backward', `${label} (ZeRO IPG bucket)`);
      }
      // Stage 2 reduces in the hook; stage 1 only with overlap_comm at the boundary (s12:1762-1769).
      if (this.stage2 || (this.settings.overlapComm && this.boundary())) this.reduce(p, label);
    }
  }

  /** reduce_independent_p_g_buckets_and_remove_grads (s12:1193-1253). */
  private reduce(p: number, label: string): void {
    const n = this.c.n(p);
    const RB = this.settings.reduceBucketSize;
    if (n === 0) return;
    if (this.elements + n > RB) this.flush(label);
    // Over the bucket size it stays in its own storage; else it is copied into the bucket and freed (s12:1221-1236).
    if (n > RB) this.extraLarge = p;
    else this.c.freeGrad(p);
    this.elements += n;
    this.bucket.push(p);
  }

  /** reduce_ipg_grads (s12:1691-1755). */
  private flush(label: string): void {
    if (this.bucket.length === 0) return;
    this.allReduce(label);
    for (const q of this.bucket) {
      const k = this.place.get(q)!;
      const inside = this.all.filter((i) => this.layouts[i]!.inPartition[k]);
      // Stage 2: a gradient outside the partition is dropped (s12:1742-1749); stage 1 keeps it until the epilogue.
      if (inside.length > 0 && inside.length < this.layouts.length && !this.stage2 && q === this.extraLarge) this.keepOutside(q, inside);
      if (inside.length > 0) this.copyInPartition(q, inside, label);
      else if (this.stage2 && q === this.extraLarge) this.c.freeGrad(q);
    }
    this.bucket = [];
    this.elements = 0;
    this.extraLarge = null;
  }

  /**
   * allreduce_and_scatter: slices appended until their elements pass the bucket size; a flush
   * of two or more slices flattens them into a new tensor (one is a view) (s12:1314-1348, s12:1841).
   */
  private allReduce(label: string): void {
    const { ledger, lpBytes } = this.c;
    let run: number[] = [];
    let sum = 0;
    const allReduce = () => {
      if (run.length >= 2) {
        const block = ledger.alloc(lpBytes(sum), 'communication');
        ledger.record('backward', `${label} (ZeRO all-reduce flatten)`);
        ledger.release(block);
      }
      run = [];
      sum = 0;
    };
    for (const slice of this.slicesOf(this.bucket)) {
      run.push(slice.n);
      sum += slice.n;
      if (sum > this.settings.reduceBucketSize) allReduce();
    }
    if (run.length > 0) allReduce();
  }

  /** The all-reduce's slices of the bucket: each parameter cut at partition boundaries, runs to one rank merged (s12:1372-1433). */
  private slicesOf(params: readonly number[]): { rank: number; n: number }[] {
    const P = this.layout.partition;
    const out: { rank: number; n: number }[] = [];
    for (const p of params) {
      const o = this.layout.offsets[this.place.get(p)!]!;
      const n = this.c.n(p);
      for (let part = Math.floor(o / P); part * P < o + n; part += 1) {
        const size = Math.min(o + n, (part + 1) * P) - Math.max(o, part * P);
        const last = out[out.length - 1];
        if (last !== undefined && last.rank === part) last.n += size;
        else out.push({ rank: part, n: size });
      }
    }
    return out;
  }

  /**
   * A family's stage-1 extra-large gradient that some ranks' partitions touch: they free it at the
   * flush, the others keep it to the epilogue, so those get a block of its size until then. A
   * gradient block with other references (freed later for everyone) breaks the family.
   */
  private keepOutside(q: number, inside: readonly number[]): void {
    const { ledger, gradients } = this.c;
    const block = gradients.grads.get(q);
    if (block === undefined) return;
    if (ledger.refs(block) !== 1) {
      ledger.breakRanks('a stage-1 gradient over the bucket size has other references');
      return;
    }
    const bytes = ledger.program().sizes[block] as number;
    const outside = this.all.filter((i) => !inside.includes(i));
    this.kept.push(this.allocFor(outside, () => bytes, 'gradients'));
  }

  /** copy_grads_in_partition (s12:1650-1686) on the ranks whose partition `q` touches: into grads_in_partition, or with cpu_offload to the host. */
  private copyInPartition(q: number, inside: readonly number[], label: string): void {
    if (this.offload) {
      this.copyToHost(q, label);
      return;
    }
    const fresh = inside.filter((i) => this.gip[i] === null);
    if (fresh.length > 0) {
      const block = this.allocFor(fresh, (layout) => this.c.lpBytes(layout.gradPartition), 'gradients');
      for (const i of fresh) this.gip[i] = block;
      this.recordFor(fresh, 'backward', `${label} (ZeRO grads_in_partition)`);
    }
    // An extra-large gradient is copied into its slot and its own storage goes (s12:1683-1686).
    if (q === this.extraLarge) this.c.freeGrad(q);
  }

  /**
   * copy_grads_in_partition with cpu_offload (s12:1650-1666): no grads_in_partition. Between
   * boundaries the gradient goes to a host accumulation buffer through the persistent GPU
   * buffer (async_accumulate_grad_in_cpu_via_gpu, s12:1516-1557: in place, no allocation); at
   * the boundary its slice's norm in fp64 on the GPU (set_norm_for_param_grad_in_gpu,
   * s12:1575-1588), the slice cast to fp32 on the GPU when the model is 16-bit and copied into
   * the host fp32 partition, then .grad = None (async_inplace_copy_grad_to_fp32_buffer_from_gpu, s12:1590-1605).
   */
  private copyToHost(q: number, label: string): void {
    if (!this.boundary()) return;
    const { ledger } = this.c;
    const slice = this.sliceOf.get(q) ?? 0;
    if (slice > 0) {
      const norm = ledger.alloc(8 * slice, 'temporaries');
      ledger.record('backward', `${label} (ZeRO-Offload gradient norm, fp64)`);
      ledger.release(norm);
      if (this.cast) {
        const up = ledger.alloc(4 * slice, 'temporaries');
        ledger.record('backward', `${label} (ZeRO-Offload fp32 gradient to the host)`);
        ledger.release(up);
      }
    }
    this.c.freeGrad(q);
  }

  endBackward(prefix: string, last: boolean): void {
    const { ledger, gradients } = this.c;
    const label = `${prefix}ZeRO-${this.settings.stage} epilogue`;
    if (!this.stage2 && !last) {
      // Stage 1 communicates only at the boundary (eng:2906-2912): .grad and the IPG buffer stay.
      gradients.endBackward();
      return;
    }
    // Stage 1 without overlap: reduce_gradients walks the group in order (s12:861-881).
    if (!this.stage2 && !this.settings.overlapComm) for (const p of this.c.order) if (gradients.grads.has(p)) this.reduce(p, label);
    this.flush(label);
    // all_grad_tensors: the first micro-step's partition is kept, a later one is added into it and goes (s12:935-944).
    const later: (number | null)[] = [];
    for (const i of this.all) {
      if (this.held[i] === null) this.held[i] = this.gip[i]!;
      else later.push(this.gip[i]!);
      this.gip[i] = null;
    }
    if (last) {
      // averaged_gradients: views, and zeros where the partition holds alignment padding (s12:2118-2190);
      // with cpu_offload the epilogue builds none (s12:935).
      const padded = this.offload ? [] : this.all.filter((i) => this.layouts[i]!.pad > 0);
      if (padded.length > 0) {
        const block = this.allocFor(padded, (layout) => this.c.lpBytes(layout.pad), 'gradients');
        for (const i of padded) this.pad[i] = block;
      }
      ledger.record('backward', label);
    }
    // _release_ipg_buffers, then every .grad set to None (s12:828-835, s12:2034-2044).
    for (const block of this.ipg) ledger.release(block);
    this.ipg.length = 0;
    for (const p of [...gradients.grads.keys()]) this.c.freeGrad(p);
    this.releaseAll(this.kept.splice(0));
    this.releaseAll(later);
    gradients.endBackward();
  }

  step(): void {
    const { ledger, lpBytes } = this.c;
    const P = this.layout.partition;
    if (this.offload) {
      // The norm from the per-parameter norms taken in backward (s12:2240-2241, a one-element
      // tensor), the step on the host (s12:2323-2330), the bit16 partition written in place from
      // the host buffer (s12:2336-2341), the all-gather in place (ru:1005-1013): nothing new on the GPU.
      ledger.record('step', 'ZeRO-Offload optimizer step on the host');
      return;
    }
    // The norm: one fp64 copy of each gradient slice at a time (s12:2054-2104).
    const largest = (layout: FlatLayout) => Math.max(0, ...layout.slices);
    const normed = this.all.filter((i) => largest(this.layouts[i]!) > 0);
    if (normed.length > 0) {
      const block = this.allocFor(normed, (layout) => 8 * largest(layout), 'temporaries');
      this.recordFor(normed, 'step', 'ZeRO gradient norm (fp64 copy)');
      ledger.release(block);
    }
    // flatten (a view of a single tensor, §6.3), then .to(fp32) (a copy unless already fp32) (s12:2355-2362).
    const pieces = (layout: FlatLayout) => layout.slices.length + (layout.pad > 0 && layout.slices.length > 0 ? 1 : 0);
    const flattened = this.all.filter((i) => pieces(this.layouts[i]!) > 1);
    const flat = flattened.length > 0 ? this.allocFor(flattened, () => lpBytes(P), this.cast ? 'temporaries' : 'gradients') : null;
    const fp32 = this.cast ? ledger.alloc(4 * P, 'gradients') : flat;
    ledger.record('step', 'ZeRO fp32 gradient partition');
    if (this.cast && flat !== null) ledger.release(flat);
    // averaged_gradients[g] = None frees the partition unless the fp32 gradient is a view of it (s12:2372).
    if (fp32 !== null) this.dropPartition();
    this.optimizer.step();
    // The fp32 gradient goes; the bit16 copy and the all-gather are in place (s12:2382-2386, ru:1005-1013).
    if (fp32 !== null) ledger.release(fp32);
    else this.dropPartition();
  }

  private dropPartition(): void {
    this.releaseAll([...this.held, ...this.pad]);
    this.held.fill(null);
    this.pad.fill(null);
  }

  resident(): { parameters: number; gradients: number } {
    const { ir } = this.c;
    return {
      parameters:
        this.c.lpBytes(this.layout.aligned) +
        this.c.all.filter((p) => !this.c.trainable(p)).reduce((s, p) => s + (ir.storages[ir.tensors[p]!.storage]!.bytes as number), 0),
      gradients: this.offload ? 0 : this.c.lpBytes(this.layout.gradPartition),
    };
  }

  host(): HostBytes<number> {
    const P = this.layout.partition;
    return {
      parameters: 0,
      // The fp32 gradient partition (s12:840-846, kept under cpu_offload: s12:852); with
      // accumulation a model-dtype buffer per in-partition parameter, whole (s12:1525-1528, s12:1554-1555).
      gradients: 4 * P + (this.ctx.microBatches > 1 ? this.c.lpBytes(this.layout.gradPartition) : 0),
      optimizer: this.masterBytes + this.optimizer.hostBytes,
      // param_buffer_of_bit16_for_cpu_offload_groups (s12:497-507), temp_grad_buffer_for_cpu_offload (s12:585-590).
      staging: this.c.lpBytes(P) + this.c.lpBytes(this.largestParam),
    };
  }
}
