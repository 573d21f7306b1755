import { dimKey } from '../sym/expr.js';
import type { IR, IRModule } from './ir.js';

/**
 * A model traced with its identical blocks reduced to three — the first, one interior block
 * standing for all of them, the last — and what each op and storage is to them: block 0, 1 or 2,
 * or -1 outside the blocks. The interior block happens `times` times in the full model.
 */
export interface ReducedBlocks {
  readonly opUnit: Int8Array;
  readonly storageUnit: Int8Array;
  readonly times: number;
  /** An event label of block `unit` as the full model spells it (`copy`: which interior block, from 0). */
  readonly relabel: (label: string, unit: number, copy: number) => string;
}

/** Whether two ops of the blocks do the same thing: the op, its tensors' sizes and what it saves. */
function sameOp(ir: IR, a: number, b: number): boolean {
  const x = ir.ops[a]!;
  const y = ir.ops[b]!;
  if (x.op !== y.op || x.recorded !== y.recorded || x.stage !== y.stage || x.alias !== y.alias) return false;
  const sizes = (ids: readonly number[]) => ids.map((id) => `${dimKey(ir.storages[ir.tensors[id]!.storage]!.bytes)}${ir.storages[ir.tensors[id]!.storage]!.trainable ? 't' : ''}`).join(',');
  return sizes(x.inputs) === sizes(y.inputs) && sizes(x.outputs) === sizes(y.outputs) && sizes(x.params) === sizes(y.params) && sizes(x.saved) === sizes(y.saved) && sizes(x.extras) === sizes(y.extras);
}

/**
 * The three blocks of a model traced with `prefix0`, `prefix1`, `prefix2` (say `model.layers.0`
 * … `.2`) standing for `count` identical ones, or null when the trace does not have that shape:
 * the blocks are siblings run back to back with nothing between them, share no weights, and
 * run the same ops on tensors of the same sizes, checkpoint regions included. Then every
 * interior block of the full model does what block 1 does, and the full step's log is the
 * reduced one with block 1's entries `count - 2` times over.
 */
export function reducedBlocks(ir: IR, prefix: string, count: number): ReducedBlocks | null {
  const keys = [0, 1, 2].map((i) => `${prefix}${i}`);
  const found = keys.map((key) => ir.modules.find((m) => m.key === key));
  if (found.some((m) => m === undefined)) return null;
  const blocks = found as IRModule[];
  const [first, middle, last] = blocks as [IRModule, IRModule, IRModule];
  if (first.parent !== middle.parent || middle.parent !== last.parent) return null;
  if (blocks.some((m) => m.sharedWith !== null)) return null;
  if (first.endOp !== middle.firstOp || middle.endOp !== last.firstOp) return null;
  const length = middle.endOp - middle.firstOp;
  if (first.endOp - first.firstOp !== length || last.endOp - last.firstOp !== length) return null;
  for (let k = 0; k < length; k += 1) {
    if (!sameOp(ir, middle.firstOp + k, first.firstOp + k) || !sameOp(ir, middle.firstOp + k, last.firstOp + k)) return null;
    // Checkpoint regions at the same places of each block (a group of two blocks is not one block).
    const at = (m: IRModule) => {
      const op = ir.ops[m.firstOp + k]!;
      return op.region === null ? 'none' : `${ir.regions[op.region]!.firstOp - m.firstOp}:${ir.regions[op.region]!.endOp - m.firstOp}`;
    };
    if (at(first) !== at(middle) || at(middle) !== at(last)) return null;
  }
  const moduleUnit = new Int8Array(ir.modules.length).fill(-1);
  const blockIndex = new Map(blocks.map((m, i) => [m.index, i]));
  for (const m of ir.modules) moduleUnit[m.index] = blockIndex.get(m.index) ?? (m.parent === null ? -1 : moduleUnit[m.parent]!);
  const opUnit = Int8Array.from(ir.ops, (op) => moduleUnit[op.module]!);
  const storageUnit = new Int8Array(ir.storages.length).fill(-1);
  // Weights and buffers belong to the block whose module owns them; activations to the block that made them.
  for (const m of ir.modules) for (const id of [...m.params, ...m.buffers]) storageUnit[ir.tensors[id]!.storage] = moduleUnit[m.index]!;
  for (const t of ir.tensors) if (t.producer !== null && t.role !== 'param' && t.role !== 'buffer' && storageUnit[t.storage] === -1) storageUnit[t.storage] = opUnit[t.producer]!;
  const pattern = keys.map((key) => new RegExp(`${key.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?=[. ]|$)`, 'g'));
  return {
    opUnit,
    storageUnit,
    times: count - 2,
    relabel: (label, unit, copy) => label.replace(pattern[unit]!, `${prefix}${unit === 0 ? 0 : unit === 1 ? 1 + copy : count - 1}`),
  };
}
