import type { EngineHooks, HostBytes, RankContext } from '../../../memory/residency/types.js';
import { bytesOf } from '../../../tensor/dtype.js';
import type { IR, IROp } from '../../../trace/ir.js';
import { Coordinator } from './coordinator.js';
import type { Common, FlatOptimizer, Partitions } from './common.js';
import { schedule, type HookSchedule } from './schedule.js';
import type { DeepSpeedSettings } from './settings.js';

/** The partitions and persistent parameters of one rank. */
function partitionsOf(ir: IR, settings: DeepSpeedSettings, c: Common): Partitions {
  const N = settings.shards;
  const q = (p: number) => Math.ceil(c.n(p) / N);
  const dtypeOf = (p: number) => ir.tensors[p]!.spec.dtype;
  const paddedBytes = (p: number) => bytesOf(q(p) * N, dtypeOf(p)) as number;
  const dsId = new Map(c.all.map((p, k) => [p, k]));
  const byId = (a: number, b: number) => dsId.get(a)! - dsId.get(b)!;
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
  const persistentBytes = (p: number) =>
    N > 1 ? paddedBytes(p) : persistentList.length === 1 || settings.offloadParam ? (bytesOf(c.n(p), dtypeOf(p)) as number) : 0;
  const partitionBytes = (p: number) => bytesOf(q(p), dtypeOf(p)) as number;
  return { q, dtypeOf, paddedBytes, partitionBytes, byId, Q: c.order.reduce((s, p) => s + q(p), 0), persistent, persistentList, persistentBytes };
}

/** Sub-groups: parameters in group order until their partitions reach sub_group_size (s3:1160-1183). */
function subGroupsOf(c: Common, q: (p: number) => number, Q: number, subGroupSize: number): number[][] {
  const subGroups: number[][] = [];
  if (subGroupSize >= Q) subGroups.push([...c.order]);
  else {
    let group: number[] = [];
    let size = 0;
    c.order.forEach((p, k) => {
      group.push(p);
      size += q(p);
      if (size >= subGroupSize || k === c.order.length - 1) {
        subGroups.push(group);
        group = [];
        size = 0;
      }
    });
  }
  return subGroups;
}

/** Stage 3: `DeepSpeedZeroOptimizer_Stage3`, `DeepSpeedZeRoOffload` and the `PartitionedParameterCoordinator`. */
export function zero3(ctx: RankContext, settings: DeepSpeedSettings, c: Common): EngineHooks {
  const z = new Zero3(ctx, settings, c);
  const { ir } = ctx;
  const { forward, backward } = z.hooks;
  // No param hook (every parameter is partitioned at start) and no zeroGrad (nothing outlives the step).
  return {
    start: () => z.start(),
    beforeForward(op, prefix) {
      if (op.index === 0) z.coordinator.resetStep();
      z.coordinator.run(forward[op.index]!, true, prefix);
    },
    afterForward(op, prefix) {
      if (op.index === ir.ops.length - 1) z.coordinator.run(forward[ir.ops.length]!, true, prefix);
    },
    beforeBackward(op, prefix) {
      const events = backward.get(op.index);
      if (events !== undefined) z.coordinator.run(events, false, prefix);
      c.outputHook(op, prefix);
    },
    paramGrads: c.gradients.paramGrads,
    afterBackward: (op, label) => z.afterBackward(op, label),
    endBackward: (prefix) => z.endBackward(prefix),
    step: () => z.step(),
    optimizerState: () => (settings.offloadOptimizer ? 0 : z.masterBytes + z.optimizers.reduce((s, o) => s + o.bytes, 0)),
    resident: () => z.resident(),
    ...(settings.offloadOptimizer || settings.offloadParam ? { host: () => z.host() } : {}),
  };
}

/** One rank of ZeRO-3: partitions, the IPG reduce-scatter bucket, the per-sub-group step; the coordinator gathers. */
class Zero3 {
  private readonly parts: Partitions;
  private readonly cast: boolean;
  private readonly subGroups: number[][];
  private readonly subSizes: number[];
  readonly optimizers: FlatOptimizer[];
  /**
   * The fp32 master of each sub-group: an fp32 clone (on the host with offload_optimizer,
   * s3:1107-1110). s3:1112-1113 would share an fp32 partition on the same device, but compares a
   * torch.device with self.device, a string ('cuda:N', 'cpu': s3:328), which is never equal:
   * measured (test/fixtures/deepspeed-cpu), the clone is always made.
   */
  readonly masterBytes: number;
  readonly hooks: HookSchedule;
  readonly coordinator: Coordinator;
  // ZeRO-Offload: the fp32 master, its gradients and the optimizer state on self.device = cpu (s3:328);
  // offload_param: the parameters' partitions on the host (s3:926-954, pp:1800-1815).
  private readonly offloadOptimizer: boolean;
  private readonly offloadParam: boolean;
  private bucket: number[] = [];
  private elements = 0;

  constructor(
    private readonly ctx: RankContext,
    private readonly settings: DeepSpeedSettings,
    private readonly c: Common,
  ) {
    this.parts = partitionsOf(ctx.ir, settings, c);
    this.cast = c.lp !== 'float32';
    this.subGroups = subGroupsOf(c, this.parts.q, this.parts.Q, settings.subGroupSize);
    this.subSizes = this.subGroups.map((g) => g.reduce((s, p) => s + this.parts.q(p), 0));
    this.optimizers = this.subSizes.map((S, k) => c.flatOptimizer(S, `fp32 sub-group ${k}`));
    this.offloadOptimizer = settings.offloadOptimizer;
    this.offloadParam = settings.offloadParam;
    this.masterBytes = this.subSizes.reduce((s, S) => s + 4 * S, 0);
    this.hooks = schedule(ctx.ir, c.runs);
    this.coordinator = new Coordinator(ctx.ir, c.ledger, settings, c, this.parts, this.hooks.trace);
  }

  private boundary(): boolean {
    return this.ctx.microDone() === this.ctx.microBatches - 1;
  }

  private frozenPartitions(): number {
    return this.c.all.filter((p) => !this.c.trainable(p)).reduce((s, p) => s + (bytesOf(this.parts.q(p), this.parts.dtypeOf(p)) as number), 0);
  }

  start(): { grads: number[]; state: number[] } {
    const { ledger, lpBytes } = this.c;
    const Q = this.parts.Q;
    // lp_param_buffer (s3:918-924), frozen parameters' own partitions (pp:1808), the fp32 master,
    // the persistent IPG bucket (s3:730-735) and gradient partitions (s3:740-752).
    // With offload_param the partitions (trainable and frozen) are on the host; with
    // offload_optimizer the master and the gradient partitions (s3:740-752: device = self.device).
    if (!this.offloadParam) {
      ledger.alloc(lpBytes(Q), 'parameters');
      const frozen = this.frozenPartitions();
      if (frozen > 0) ledger.alloc(frozen, 'parameters');
    }
    if (this.masterBytes > 0 && !this.offloadOptimizer) ledger.alloc(this.masterBytes, 'optimizer');
    ledger.alloc(lpBytes(this.settings.reduceBucketSize), 'communication');
    if (!this.offloadOptimizer) ledger.alloc(lpBytes(Q), 'gradients');
    // Last step's _post_step left the persistent parameters gathered.
    this.coordinator.gatherPersistent();
    return { grads: [], state: this.offloadOptimizer ? [] : this.optimizers.flatMap((o) => o.allocate()) };
  }

  afterBackward(op: IROp, label: string): void {
    this.c.gradients.afterBackward(op, label);
    for (const p of this.c.hooksAt.get(op.index) ?? []) this.reduce(p, label);
  }

  /** reduce_independent_p_g_buckets_and_remove_grads (s3:1519-1566). */
  private reduce(p: number, label: string): void {
    const n = this.c.n(p);
    const RB = this.settings.reduceBucketSize;
    if (this.elements > 0 && this.elements + n > RB) this.flush(label);
    // Into the contiguous bucket when it fits (the gradient freed), else kept whole until the flush.
    if (this.elements + n <= RB) this.c.freeGrad(p);
    this.elements += n;
    this.bucket.push(p);
  }

  /** __reduce_and_partition_ipg_grads (s3:1570-1617) → reduce_scatter_coalesced (cc:158-218), partition_grads (s3:1886-1934). */
  private flush(label: string): void {
    if (this.bucket.length === 0) return;
    const params = [...this.bucket].sort(this.parts.byId);
    const temps = this.reduceScatter(params, label);
    // The padding list goes when reduce_scatter_coalesced returns; each q.grad = None frees a gradient kept whole.
    for (const block of temps.slice(0, -1)) this.c.ledger.release(block);
    if (this.offloadOptimizer) this.partitionsToHost(params, label);
    for (const p of params) this.c.freeGrad(p);
    if (temps.length > 0) this.c.ledger.release(temps[temps.length - 1]!);
    this.bucket = [];
    this.elements = 0;
  }

  /** reduce_scatter_coalesced's copies (cc:158-218): the padding of each rank chunk, then the flat input (last). */
  private reduceScatter(params: readonly number[], label: string): number[] {
    const { ledger, lpBytes } = this.c;
    const { q } = this.parts;
    const N = this.settings.shards;
    const temps: number[] = [];
    if (!(params.length === 1 && this.c.n(params[0]!) % N === 0)) {
      // Each gradient's rank chunk padded to ⌈n/N⌉ with an empty() tensor, then one cat of them all.
      for (let r = 0; r < N; r += 1)
        for (const p of params) {
          const chunk = Math.max(0, Math.min(q(p), this.c.n(p) - r * q(p)));
          if (q(p) - chunk > 0) temps.push(ledger.alloc(lpBytes(q(p) - chunk), 'communication'));
        }
      temps.push(ledger.alloc(lpBytes(params.reduce((s, p) => s + q(p) * N, 0)), 'communication'));
      ledger.record('backward', `${label} (ZeRO-3 reduce-scatter)`);
    }
    return temps;
  }

  /**
   * partition_grads (s3:1886-1934) with the gradient partitions on the host: per parameter whose
   * partition holds real data, a GPU copy of it (grad_buffer.to(device), s3:1904-1917) until the
   * next parameter's; at the boundary its fp64 norm (_constant_buffered_norm2, s3:1842-1849, in
   * pieces of 2.5e8) and its fp32 cast copied into the host fp32 gradient (s3:1393-1407), then .grad = None.
   */
  private partitionsToHost(params: readonly number[], label: string): void {
    const { ledger, lpBytes } = this.c;
    const { q } = this.parts;
    for (const p of params) {
      if (q(p) * this.settings.rank >= this.c.n(p)) {
        this.c.freeGrad(p);
        continue;
      }
      const copy = ledger.alloc(lpBytes(q(p)), 'communication');
      if (this.boundary()) {
        const norm = ledger.alloc(8 * Math.min(q(p), 250_000_000), 'temporaries');
        ledger.record('backward', `${label} (ZeRO-Offload gradient partition norm, fp64)`);
        ledger.release(norm);
        if (this.cast) {
          const up = ledger.alloc(4 * q(p), 'temporaries');
          ledger.record('backward', `${label} (ZeRO-Offload fp32 gradient partition to the host)`);
          ledger.release(up);
        }
      } else ledger.record('backward', `${label} (ZeRO-Offload gradient partition to the host)`);
      this.c.freeGrad(p);
      ledger.release(copy);
    }
  }

  endBackward(prefix: string): void {
    // Post-backward hooks still due run inside autograd; then the epilogue's flush (s3:1357-1361)
    // and release_backward_leftovers (s3:2793-2802, ppc:554-566).
    this.coordinator.run(this.hooks.backward.get(-1) ?? [], false, prefix);
    this.flush(`${prefix}ZeRO-3 epilogue`);
    this.coordinator.releaseBackwardLeftovers();
    for (const p of [...this.c.gradients.grads.keys()]) this.c.freeGrad(p);
    this.c.gradients.endBackward();
  }

  step(): void {
    const { ledger } = this.c;
    // _partition_all_parameters: every gathered parameter, the persistent ones too (s3:2609, ppc:537-550).
    this.coordinator.partitionAll();
    if (this.offloadOptimizer) {
      // The norm from the per-partition norms taken in backward (s3:2391-2392); no fp32 gradient on
      // the GPU (_prepare_sub_group, s3:2424-2425); the step on the host; the bit16 partitions
      // written in place from the fp32 ones (s3:2585-2590).
      ledger.record('step', 'ZeRO-Offload optimizer step on the host');
      this.postStep();
      return;
    }
    // The norm: one fp64 copy of a gradient partition at a time (s3:2285).
    const largest = Math.max(0, ...this.c.order.map(this.parts.q));
    if (largest > 0) {
      const block = ledger.alloc(8 * largest, 'temporaries');
      ledger.record('step', 'ZeRO-3 gradient norm (fp64 copy)');
      ledger.release(block);
    }
    this.subGroups.forEach((group, k) => {
      this.subGroupStep(group, k);
    });
    this.postStep();
  }

  /** One sub-group's fp32 gradient and optimizer step. */
  private subGroupStep(group: readonly number[], k: number): void {
    const { ledger, lpBytes } = this.c;
    const S = this.subSizes[k]!;
    // flatten (a view of one tensor) then .to(fp32) (s3:2398-2417).
    const flat = group.length > 1 ? ledger.alloc(lpBytes(S), this.cast ? 'temporaries' : 'gradients') : null;
    const fp32 = this.cast ? ledger.alloc(4 * S, 'gradients') : null;
    ledger.record('step', `ZeRO-3 sub-group ${k} fp32 gradient`);
    if (this.cast && flat !== null) ledger.release(flat);
    this.optimizers[k]!.step();
    // _release_sub_group (s3:2448-2456).
    if (fp32 !== null) ledger.release(fp32);
    if (!this.cast && flat !== null) ledger.release(flat);
  }

  /** _post_step gathers the persistent parameters again (s3:2566-2572). */
  private postStep(): void {
    this.coordinator.gatherPersistent();
    if (this.parts.persistentList.length > 0) {
      this.c.ledger.record('step', 'ZeRO-3 persistent parameters gathered');
      this.coordinator.hostCopies(this.parts.persistentList, 'step', 'ZeRO-3 persistent parameters');
    }
  }

  resident(): { parameters: number; gradients: number } {
    const { lpBytes } = this.c;
    const { Q, persistentList, persistentBytes } = this.parts;
    return {
      parameters: (this.offloadParam ? 0 : lpBytes(Q) + this.frozenPartitions()) + persistentList.reduce((s, p) => s + persistentBytes(p), 0),
      gradients: this.offloadOptimizer ? 0 : lpBytes(Q),
    };
  }

  host(): HostBytes<number> {
    const { lpBytes } = this.c;
    const Q = this.parts.Q;
    return {
      // fp16_partitioned_groups_flat in host memory (s3:926-951) and the frozen parameters' own partitions (pp:1800-1815).
      parameters: this.offloadParam ? lpBytes(Q) + this.frozenPartitions() : 0,
      // grad_partitions_flat_buffer (s3:740-752) and each sub-group's fp32 gradient (s3:1286-1291).
      gradients: this.offloadOptimizer ? lpBytes(Q) + 4 * Q : 0,
      // The fp32 master clone (s3:1107-1110) and the CPU optimizer's state.
      optimizer: this.offloadOptimizer ? this.masterBytes + this.optimizers.reduce((s, o) => s + o.hostBytes, 0) : 0,
      staging: 0,
    };
  }
}
