import type { IR, IRModule } from './ir.js';

/**
 * A model traced with its identical blocks reduced to three — the first, one standing for every
 * interior block, the last — and what each op and storage is to them: block 0, 1 or 2, or -1
 * outside the blocks. Block 1 happens `times` times in the full model.
 */
export interface ReducedBlocks {
  readonly opUnit: Int8Array;
  readonly storageUnit: Int8Array;
  readonly times: number;
  /**
   * An event label of block `unit` as the full model spells it: `copy` counts the copies of
   * block 1 in the order they run (blocks 1, 2, … forward; from the last interior one in backward).
   */
  readonly relabel: (label: string, unit: number, copy: number, phase: string) => string;
}

/** Whether two lists of tensors have storages of the same sizes (and trainability). */
function sameTensors(ir: IR, a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) {
    const x = ir.storages[ir.tensors[a[i]!]!.storage]!;
    const y = ir.storages[ir.tensors[b[i]!]!.storage]!;
    if (x.trainable !== y.trainable) return false;
    if (x.bytes !== y.bytes && (typeof x.bytes === 'number' || typeof y.bytes === 'number' || x.bytes.key !== y.bytes.key)) return false;
  }
  return true;
}

/** Whether two ops of the blocks do the same thing: the op, its tensors' sizes and what it saves. */
function sameOp(ir: IR, a: number, b: number): boolean {
  const x = ir.ops[a]!;
  const y = ir.ops[b]!;
  if (x.op !== y.op || x.recorded !== y.recorded || x.stage !== y.stage || x.alias !== y.alias) return false;
  return (
    sameTensors(ir, x.inputs, y.inputs) &&
    sameTensors(ir, x.outputs, y.outputs) &&
    sameTensors(ir, x.params, y.params) &&
    sameTensors(ir, x.saved, y.saved) &&
    sameTensors(ir, x.extras, y.extras)
  );
}

/** Whether op k of two blocks is in a checkpoint region at the same place of each, or in none. */
function sameRegion(ir: IR, a: IRModule, b: IRModule, k: number): boolean {
  const x = ir.ops[a.firstOp + k]!.region;
  const y = ir.ops[b.firstOp + k]!.region;
  if (x === null || y === null) return x === y;
  const rx = ir.regions[x]!;
  const ry = ir.regions[y]!;
  return rx.firstOp - a.firstOp === ry.firstOp - b.firstOp && rx.endOp - a.firstOp === ry.endOp - b.firstOp;
}

/**
 * The three blocks of a model traced with `prefix0`, `prefix1`, `prefix2` (say `model.layers.0`
 * … `.2`) standing for `count` identical ones, or null when the trace does not have that shape:
 * siblings run back to back with nothing between them, sharing no weights, blocks 1 and 2
 * running the same ops on tensors of the same sizes, saving the same, checkpoint regions at the
 * same places. Block 0 may differ (with frozen embeddings nothing flows back into the first
 * block's input); every block after it then does what block 1 does, and the full step's log is
 * the reduced one with block 1's entries `count - 2` times over (the last block, block 2, is
 * traced as itself: what only the last one keeps, the final norm frees).
 */
export function reducedBlocks(ir: IR, prefix: string, count: number): ReducedBlocks | null {
  const keys = [`${prefix}0`, `${prefix}1`, `${prefix}2`];
  const fourth = `${prefix}3`;
  const found: (IRModule | undefined)[] = [undefined, undefined, undefined];
  for (const m of ir.modules) {
    const at = keys.indexOf(m.key);
    if (at >= 0) found[at] = m;
    else if (m.key === fourth) return null;
  }
  const [first, middle, last] = found;
  if (first === undefined || middle === undefined || last === undefined) return null;
  if (first.parent !== middle.parent || middle.parent !== last.parent) return null;
  if (first.sharedWith !== null || middle.sharedWith !== null || last.sharedWith !== null) return null;
  if (first.endOp !== middle.firstOp || middle.endOp !== last.firstOp) return null;
  const length = middle.endOp - middle.firstOp;
  if (last.endOp - last.firstOp !== length) return null;
  for (let k = 0; k < length; k += 1) {
    if (!sameOp(ir, middle.firstOp + k, last.firstOp + k)) return null;
    // Checkpoint regions at the same places of each block (a group of two blocks is not one block).
    if (!sameRegion(ir, middle, last, k)) return null;
  }
  const moduleUnit = new Int8Array(ir.modules.length).fill(-1);
  for (const m of ir.modules) moduleUnit[m.index] = m === first ? 0 : m === middle ? 1 : m === last ? 2 : m.parent === null ? -1 : moduleUnit[m.parent]!;
  const opUnit = new Int8Array(ir.ops.length);
  for (let i = 0; i < ir.ops.length; i += 1) opUnit[i] = moduleUnit[ir.ops[i]!.module]!;
  const storageUnit = new Int8Array(ir.storages.length).fill(-1);
  // Weights and buffers belong to the block whose module owns them; activations to the block that made them.
  for (const m of ir.modules) {
    for (const id of m.params) storageUnit[ir.tensors[id]!.storage] = moduleUnit[m.index]!;
    for (const id of m.buffers) storageUnit[ir.tensors[id]!.storage] = moduleUnit[m.index]!;
  }
  for (const t of ir.tensors)
    if (t.producer !== null && t.role !== 'param' && t.role !== 'buffer' && storageUnit[t.storage] === -1) storageUnit[t.storage] = opUnit[t.producer]!;
  // Labels are renamed only for the events reported (the peak, the candidates): patterns made then.
  let patterns: RegExp[] | null = null;
  const blockOf = (unit: number, copy: number, phase: string) => (unit === 0 ? 0 : unit === 2 ? count - 1 : phase === 'backward' ? count - 2 - copy : 1 + copy);
  return {
    opUnit,
    storageUnit,
    times: count - 2,
    relabel: (label, unit, copy, phase) => {
      patterns ??= keys.map((key) => new RegExp(`${key.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?=[. ]|$)`, 'g'));
      return label.replace(patterns[unit]!, `${prefix}${blockOf(unit, copy, phase)}`);
    },
  };
}
