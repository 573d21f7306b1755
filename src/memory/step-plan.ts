import type { Dim } from '../sym/expr.js';
import { mul, sub } from '../sym/ops.js';
import { specBytes } from '../tensor/spec.js';
import type { IR, IROp } from '../trace/ir.js';
import { parameterOrder } from '../trace/uses.js';
import type { Category, Ledger } from './ledger.js';

/** What the step simulation reads of an IR, worked out once: lifetimes, savers, labels. */
export interface Plan {
  /** storage → index of the last forward op that reads it (or makes it, when nothing reads it). */
  readonly lastUse: Int32Array;
  /** storage → number of recorded ops that save it. */
  readonly savers: Int32Array;
  /** Storages held for the whole step (inputs, targets, parameters, buffers). */
  readonly pinned: Uint8Array;
  /** Trainable parameter tensor ids in registration order. */
  readonly trainable: readonly number[];
  /** Storages whose last forward use op i is: `dying[dieStart[i] .. dieStart[i + 1] - 1]`, ascending. */
  readonly dieStart: Int32Array;
  readonly dying: Int32Array;
  /** op index → its event label (module key and op). */
  readonly labels: readonly string[];
}

export function planOf(ir: IR): Plan {
  const n = ir.storages.length;
  const lastUse = new Int32Array(n).fill(-1);
  const savers = new Int32Array(n);
  const pinned = new Uint8Array(n);
  for (const s of ir.storages) if (s.role === 'param' || s.role === 'buffer' || s.role === 'input') pinned[s.id] = 1;
  // Module.__call__ keeps its arguments referenced until forward returns, so a module's
  // inputs live at least until its last op (nn.Sequential included).
  for (const module of ir.modules) {
    if (module.endOp <= module.firstOp) continue;
    for (const id of module.inputs) {
      const s = ir.tensors[id]!.storage;
      if (lastUse[s]! < module.endOp - 1) lastUse[s] = module.endOp - 1;
    }
  }
  for (const op of ir.ops) {
    for (const id of op.inputs) if (lastUse[ir.tensors[id]!.storage]! < op.index) lastUse[ir.tensors[id]!.storage] = op.index;
    for (const id of op.outputs) {
      const s = ir.tensors[id]!.storage;
      if (lastUse[s]! < op.index) lastUse[s] = op.index;
    }
    for (const id of op.extras) {
      const s = ir.tensors[id]!.storage;
      if (lastUse[s]! < op.index) lastUse[s] = op.index;
    }
    // Ops in a checkpoint region save nothing in forward: they save when the region reruns.
    if (op.recorded && op.region === null) for (const id of op.saved) savers[ir.tensors[id]!.storage]! += 1;
  }
  for (const region of ir.regions) for (const id of region.inputs) savers[ir.tensors[id]!.storage]! += 1;
  for (const hold of ir.holds) if (lastUse[hold.storage]! < hold.until) lastUse[hold.storage] = hold.until;
  // The optimizer walks model.parameters(): registration order.
  const trainable = parameterOrder(ir).filter((id) => ir.storages[ir.tensors[id]!.storage]!.trainable);
  // Storages by the op of their last use, as one sorted list with an offset per op.
  const dieStart = new Int32Array(ir.ops.length + 1);
  for (let storage = 0; storage < n; storage += 1) if (lastUse[storage]! >= 0) dieStart[lastUse[storage]! + 1]! += 1;
  for (let op = 0; op < ir.ops.length; op += 1) dieStart[op + 1]! += dieStart[op]!;
  const dying = new Int32Array(dieStart[ir.ops.length]!);
  const fill = dieStart.slice(0, ir.ops.length);
  for (let storage = 0; storage < n; storage += 1) if (lastUse[storage]! >= 0) dying[fill[lastUse[storage]!]!++] = storage;
  return { lastUse, savers, pinned, trainable, dieStart, dying, labels: ir.ops.map((op) => opLabel(ir, op)) };
}

/**
 * Conditional copies (IRStorage.conditional): where the copy is a view, the storage it views
 * lives until the copy goes. When that storage is dropped while a copy of it is still live, a
 * block of its bytes times (1 − copyWhen) stands in for it until the last such copy is dropped.
 * Returns the hook to call on every drop, before the storage's own block is released.
 */
export function viewKeeper(ir: IR, ledger: Ledger, live: (storage: number) => boolean): (storage: number) => void {
  const viewers = new Map<number, number[]>();
  for (const storage of ir.storages) {
    const c = storage.conditional;
    if (c !== undefined) viewers.set(c.viewOf, [...(viewers.get(c.viewOf) ?? []), storage.id]);
  }
  if (viewers.size === 0) return () => undefined;
  const standIn = new Map<number, number>();
  return (storage) => {
    const copies = viewers.get(storage);
    if (copies !== undefined) {
      const alive = copies.filter(live);
      if (alive.length > 0) {
        const when = ir.storages[alive[0]!]!.conditional!.copyWhen;
        standIn.set(storage, ledger.alloc(mul(ir.storages[storage]!.bytes, sub(1, when)), categoryOf(ir.storages[storage]!.role), alive.length));
      }
    }
    const c = ir.storages[storage]!.conditional;
    const block = c === undefined ? undefined : standIn.get(c.viewOf);
    if (block !== undefined) {
      ledger.release(block);
      if (ledger.refs(block) === 0) standIn.delete(c!.viewOf);
    }
  };
}

export function categoryOf(role: IR['storages'][number]['role']): Category {
  return role === 'param' ? 'parameters' : role === 'buffer' ? 'buffers' : role === 'input' ? 'input' : 'activations';
}

/**
 * Ledger blocks by dense id (storage or tensor): a typed array where a Map hashed every number,
 * keys listed in the order they were first set (what a Map's iteration gives, but for a key set
 * again after a delete, which only moves a free among frees with no event between them).
 */
export interface IdBlocks {
  readonly has: (id: number) => boolean;
  readonly get: (id: number) => number | undefined;
  readonly set: (id: number, block: number) => void;
  readonly delete: (id: number) => void;
  readonly keys: () => number[];
  readonly values: () => number[];
}

export function idBlocks(size: number): IdBlocks {
  const block = new Int32Array(size).fill(-1);
  const order: number[] = [];
  const keys = () => {
    const seen = new Uint8Array(size);
    const out: number[] = [];
    for (const id of order) {
      if (block[id] === -1 || seen[id]) continue;
      seen[id] = 1;
      out.push(id);
    }
    return out;
  };
  return {
    has: (id) => block[id] !== -1,
    get: (id) => (block[id] === -1 ? undefined : block[id]),
    set: (id, value) => {
      if (block[id] === -1) order.push(id);
      block[id] = value;
    },
    delete: (id) => {
      block[id] = -1;
    },
    keys,
    values: () => keys().map((id) => block[id]!),
  };
}

export function tensorBytes(ir: IR, id: number): Dim {
  const cache = bytesCache(ir).tensors;
  cache[id] ??= specBytes(ir.tensors[id]!.spec);
  return cache[id];
}

/** Bytes of a parameter's gradient: its own size unless the op declared another gradient spec (a DTensor's placement). */
export function gradientBytes(ir: IR, id: number): Dim {
  const cache = bytesCache(ir).gradients;
  cache[id] ??= specBytes(ir.tensors[id]!.gradSpec ?? ir.tensors[id]!.spec);
  return cache[id];
}

/** Each trace's tensor and gradient bytes, worked out once (a trace is immutable; the step reads them per micro-batch). */
const byteCaches = new WeakMap<IR, { readonly tensors: (Dim | undefined)[]; readonly gradients: (Dim | undefined)[] }>();

function bytesCache(ir: IR): { readonly tensors: (Dim | undefined)[]; readonly gradients: (Dim | undefined)[] } {
  let cache = byteCaches.get(ir);
  if (cache === undefined) {
    cache = { tensors: [], gradients: [] };
    byteCaches.set(ir, cache);
  }
  return cache;
}

export function opLabel(ir: IR, op: IROp): string {
  const key = ir.modules[op.module]!.key;
  return key === '' ? op.op : `${key} ${op.op}`;
}
