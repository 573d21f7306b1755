import { fail } from '../../../errors.js';
import type { Ledger } from '../../../memory/ledger.js';
import { bytesOf } from '../../../tensor/dtype.js';
import type { IR } from '../../../trace/ir.js';
import type { Common, Partitions } from './common.js';
import type { HookEvent } from './schedule.js';
import type { DeepSpeedSettings } from './settings.js';

const NOT_AVAILABLE = 0;
const INFLIGHT = 1;
const AVAILABLE = 2;

/** A gather in flight: the coordinator's handle, held by the registry once per member (ppc:613). */
interface Handle {
  readonly parts: { readonly params: readonly number[]; readonly flat: number | null }[];
  refs: number;
  complete: boolean;
}

type Phase = 'forward' | 'backward' | 'step';

/**
 * ZeRO-3's `PartitionedParameterCoordinator` in trace-complete mode (ppc:310-533, ppc:634-664)
 * over one rank's ledger: which parameters are gathered, in flight or released as the schedule's
 * module hooks run, what their gathers allocate, and the prefetch along the recorded trace.
 */
export class Coordinator {
  private readonly status: Map<number, number>;
  /** The gathered copy of each parameter that has one of its own (a block). */
  private readonly data = new Map<number, number>();
  /** The modules (by identity) using each parameter now. */
  private readonly active: Map<number, Set<number>>;
  private readonly registry = new Map<number, Handle>();
  private readonly activeBackward = new Map<number, number>();
  /** Each module's own parameters in ds_id order. */
  private readonly direct: readonly (readonly number[])[];
  /** The parameter trace: each fetch's parameters in ds_id order with the step they are used at (ppc:234-240). */
  private readonly paramTrace: { p: number; step: number }[] = [];
  private step = 0;
  private available = 0;
  private queue = 0;
  private mostRecent = new Map<number, number>();

  constructor(
    private readonly ir: IR,
    private readonly ledger: Ledger,
    private readonly settings: DeepSpeedSettings,
    private readonly c: Common,
    private readonly parts: Partitions,
    /** The fetch order: a module per fetch (the schedule's trace). */
    private readonly trace: readonly number[],
  ) {
    this.status = new Map(c.all.map((p) => [p, NOT_AVAILABLE]));
    this.active = new Map(c.all.map((p) => [p, new Set()]));
    this.direct = ir.modules.map((mod) => [...new Set(mod.params)].sort(parts.byId));
    trace.forEach((m, step) => {
      for (const p of this.paramsOf(m)) this.paramTrace.push({ p, step });
    });
  }

  private paramsOf(m: number): readonly number[] {
    return this.direct[m]!;
  }

  private identity(m: number): number {
    return this.ir.modules[m]!.sharedWith ?? m;
  }

  private label(m: number): string {
    return this.ir.modules[m]!.key || 'root';
  }

  /** The schedule's events: a pre-hook fetches the module's parameters, a post-hook releases them. */
  run(events: readonly HookEvent[], forward: boolean, prefix: string): void {
    for (const e of events) {
      if (e.kind === 'pre') this.fetch(e.module, e.forward ?? forward, prefix);
      else this.releaseModule(e.module, e.forward ?? forward);
    }
  }

  /**
   * offload_param: the partitions' host-to-device copies an all-gather makes first
   * (`ds_tensor.to(device)`: _all_gather_dtype's cat inputs pp:1330-1333, _all_gather_sequential's
   * input pp:1366-1369, _allgather_params_coalesced's local_tensors pp:2012-2014), live while the
   * gather's buffers are made.
   */
  hostCopies(params: readonly number[], phase: Phase, label: string): void {
    if (!this.settings.offloadParam || this.settings.shards === 1 || params.length === 0) return;
    const block = this.ledger.alloc(
      params.reduce((s, p) => s + this.parts.partitionBytes(p), 0),
      'communication',
    );
    this.ledger.record(phase, `${label} (ZeRO-3 partitions copied from the host)`);
    this.ledger.release(block);
  }

  /** all_gather_coalesced of NOT_AVAILABLE parameters: one call, per dtype (ppc:582-613, pp:1514-1580). */
  private gather(params: readonly number[], phase: 'forward' | 'backward', label: string): void {
    const { c, ledger, parts: z } = this;
    const sorted = [...params].sort(z.byId);
    for (const p of sorted) {
      this.status.set(p, INFLIGHT);
      this.available += c.n(p);
    }
    const parts: Handle['parts'][number][] = [];
    const dtypes = [...new Set(sorted.map(z.dtypeOf))];
    for (const dtype of dtypes) {
      const group = sorted.filter((p) => z.dtypeOf(p) === dtype);
      if (this.settings.shards === 1) {
        // No gather: the partition is the parameter (pp:1531-1532), unless it lives on the host: then
        // the no-gather handle's .to(device) is the gathered copy (pp:96-100).
        if (this.settings.offloadParam) for (const p of group) this.data.set(p, ledger.alloc(bytesOf(c.n(p), dtype) as number, 'parameters'));
        parts.push({ params: group, flat: null });
      } else if (group.length === 1) {
        // _all_gather_sequential: the padded buffer is the parameter's storage (pp:1345-1374).
        this.data.set(group[0]!, ledger.alloc(z.paddedBytes(group[0]!), 'parameters'));
        parts.push({ params: group, flat: null });
      } else
        parts.push({
          params: group,
          flat: ledger.alloc(
            group.reduce((s, p) => s + z.paddedBytes(p), 0),
            'communication',
          ),
        }); // _all_gather_dtype (pp:1301-1343)
    }
    // The host partitions' copies exist while the gather's buffers are made; they go when it is launched.
    this.hostCopies(sorted, phase, label);
    const handle: Handle = { parts, refs: sorted.length, complete: false };
    for (const p of sorted) this.registry.set(p, handle);
  }

  /** The first wait on a coalesced handle copies out every member (torch.cat, pp:750-795). */
  private wait(handle: Handle): void {
    if (handle.complete) return;
    handle.complete = true;
    for (const part of handle.parts) {
      for (const p of part.params) {
        if (part.flat !== null) this.data.set(p, this.ledger.alloc(bytesOf(this.c.n(p), this.parts.dtypeOf(p)) as number, 'parameters'));
        this.status.set(p, AVAILABLE);
      }
    }
  }

  private dropHandle(handle: Handle): void {
    for (const part of handle.parts) if (part.flat !== null) this.ledger.release(part.flat);
  }

  /** __release_param: only an available parameter no active module uses (ppc:624-630, pp:308-324). */
  private release(p: number): void {
    if (this.status.get(p) !== AVAILABLE || this.active.get(p)!.size > 0) return;
    const block = this.data.get(p);
    if (block !== undefined) this.ledger.release(block);
    this.data.delete(p);
    this.status.set(p, NOT_AVAILABLE);
    this.available -= this.c.n(p);
  }

  /** __params_to_release in trace-complete mode (ppc:634-664). */
  private toRelease(m: number, at: number): Set<number> {
    const out = new Set(this.paramsOf(m).filter((p) => !this.parts.persistent.has(p)));
    for (const p of this.paramsOf(m)) if ((this.mostRecent.get(p) ?? -1e10) > at) out.delete(p);
    let traversed = 0;
    for (let s = at; s < this.trace.length && out.size > 0; s += 1) {
      if (traversed >= this.settings.maxReuseDistance) break;
      for (const p of this.paramsOf(this.trace[s]!)) {
        out.delete(p);
        traversed += this.c.n(p);
      }
    }
    return out;
  }

  /** fetch_sub_module (ppc:310-490). */
  private fetch(m: number, forward: boolean, prefix: string): void {
    const phase = forward ? 'forward' : 'backward';
    const params = this.paramsOf(m);
    this.waitFor(m, phase, prefix);
    // Trace complete: this module's entries leave the queue, then the prefetch (ppc:427-485).
    const fresh = params.filter((p) => (this.mostRecent.get(p) ?? -1e10) < this.step);
    const popped = new Set<number>();
    while (this.queue < this.paramTrace.length && popped.size < fresh.length) {
      const entry = this.paramTrace[this.queue++]!;
      this.mostRecent.set(entry.p, entry.step);
      popped.add(entry.p);
    }
    // DeepSpeed raises a tracing error here (ppc:444-450); the schedule replays the recorded trace, so it cannot happen.
    if (fresh.some((p) => !popped.has(p))) fail('internal', `ZeRO-3 trace out of step at ${this.label(m)}`, { path: ['parallel'] });
    if (this.settings.prefetchBucketSize > 0) this.prefetch(m, phase, prefix);
    this.step += 1;
  }

  /** The module's parameters gathered (those not available) and waited on (ppc:310-406). */
  private waitFor(m: number, phase: 'forward' | 'backward', prefix: string): void {
    const params = this.paramsOf(m);
    const missing = params.filter((p) => this.status.get(p) === NOT_AVAILABLE);
    if (missing.length > 0) this.gather(missing, phase, `${prefix}${this.label(m)}`);
    if (phase === 'backward' && !this.activeBackward.has(this.identity(m))) this.activeBackward.set(this.identity(m), m);
    const done: Handle[] = [];
    let waited = missing.length > 0;
    for (const p of params) {
      this.active.get(p)!.add(this.identity(m));
      const handle = this.registry.get(p);
      if (handle === undefined) continue;
      this.registry.delete(p);
      if (!handle.complete) waited = true;
      this.wait(handle);
      handle.refs -= 1;
      if (handle.refs === 0) done.push(handle);
    }
    if (waited) this.ledger.record(phase, `${prefix}${this.label(m)} (ZeRO-3 all-gather)`);
    // The coalesced buffer goes once every member left the registry (ppc:406).
    for (const handle of done) this.dropHandle(handle);
  }

  /** The prefetch along the trace: up to prefetch_bucket_size elements, capped by max_live_parameters (ppc:453-485). */
  private prefetch(m: number, phase: 'forward' | 'backward', prefix: string): void {
    const budget = Math.min(this.settings.maxLiveParameters - this.available, this.settings.prefetchBucketSize);
    const batch = new Set<number>();
    let numel = 0;
    while (this.queue < this.paramTrace.length && numel < budget) {
      const entry = this.paramTrace[this.queue++]!;
      const prefetch = this.status.get(entry.p) === NOT_AVAILABLE && !batch.has(entry.p);
      this.mostRecent.set(entry.p, Math.max(this.mostRecent.get(entry.p) ?? -1e10, entry.step));
      if (prefetch) {
        batch.add(entry.p);
        numel += this.c.n(entry.p);
      }
    }
    if (numel > 0) {
      this.gather([...batch], phase, `${prefix}${this.label(m)} prefetch`);
      this.ledger.record(phase, `${prefix}${this.label(m)} (ZeRO-3 prefetch)`);
    }
  }

  /** release_sub_module (ppc:494-533). */
  private releaseModule(m: number, forward: boolean): void {
    const release = this.toRelease(m, this.step);
    if (!forward) this.activeBackward.delete(this.identity(m));
    for (const p of this.paramsOf(m)) {
      this.active.get(p)!.delete(this.identity(m));
      if (release.has(p)) this.release(p);
    }
  }

  /** reset_step at the root's forward pre-hook (po:298-302, ppc:251-290): in-flight gathers waited on and released. */
  resetStep(): void {
    const handles = new Set<Handle>();
    for (const [p, handle] of this.registry) {
      this.wait(handle);
      handles.add(handle);
      this.release(p);
    }
    this.registry.clear();
    for (const handle of handles) this.dropHandle(handle);
    this.step = 0;
    this.available = 0;
    this.queue = 0;
    this.mostRecent = new Map();
  }

  /** release_backward_leftovers (s3:2793-2802, ppc:554-566): modules whose post-backward hook did not fire. */
  releaseBackwardLeftovers(): void {
    for (const m of [...this.activeBackward.values()].reverse()) {
      this.activeBackward.delete(this.identity(m));
      for (const p of this.paramsOf(m)) {
        this.active.get(p)!.delete(this.identity(m));
        if (!this.parts.persistent.has(p)) this.release(p);
      }
    }
  }

  /** _partition_all_parameters: every gathered parameter, the persistent ones too (s3:2609, ppc:537-550). */
  partitionAll(): void {
    const handles = new Set<Handle>();
    for (const [, handle] of this.registry) {
      this.wait(handle);
      handles.add(handle);
    }
    this.registry.clear();
    for (const handle of handles) this.dropHandle(handle);
    for (const p of this.c.all) {
      this.active.get(p)!.clear();
      this.release(p);
    }
  }

  /** The persistent parameters gathered (before the step: last step's _post_step left them so; s3:2566-2572). */
  gatherPersistent(): void {
    for (const p of this.parts.persistentList) {
      const bytes = this.parts.persistentBytes(p);
      if (bytes > 0) this.data.set(p, this.ledger.alloc(bytes, 'parameters'));
      this.status.set(p, AVAILABLE);
    }
  }
}
