import { add, mul, sub, sum } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import type { IR } from '../trace/ir.js';

/** Which op first saved each storage that autograd keeps (parameters excluded). */
export interface SavedStorages {
  /** storage id → index of the first op that saved it. */
  readonly firstSaver: ReadonlyMap<number, number>;
  /**
   * Storages kept only where a saved conditional copy is a view of them (storage id → the
   * copy's first saver and the bytes with the view's factor).
   */
  readonly views: ReadonlyMap<number, { readonly op: number; readonly bytes: Dim }>;
  /** Bytes of all of them. */
  readonly bytes: Dim;
}

/**
 * The saved-bytes contract: the distinct storages autograd holds for backward right
 * after the forward pass, parameters excluded (buffers and the input count when saved).
 *
 * @example
 * ```ts
 * import { conv2d, relu, seq, tensor } from 'vram-ts';
 * import { savedStorages, trace } from 'vram-ts/internals';
 * const ir = trace(seq(conv2d({ out: 4, kernel: 1 }), relu({ inplace: true }), conv2d({ out: 4, kernel: 1 })), {
 *   inputs: [tensor([1, 2, 8, 8])], training: true, gradEnabled: true, device: 'cuda', paramDtype: 'float32',
 * });
 * // the input (512 B) and the conv output that relu overwrote in place (1024 B, saved by relu and conv alike)
 * console.log(savedStorages(ir).bytes); // 1536
 * ```
 */
export function savedStorages(ir: IR): SavedStorages {
  const firstSaver = new Map<number, number>();
  const regionStarts = new Map(ir.regions.map((r) => [r.firstOp, r]));
  for (const op of ir.ops) {
    if (op.stage !== 'model') continue;
    // A checkpointed region keeps only its inputs; its ops save again when it reruns in backward.
    const region = regionStarts.get(op.index);
    const kept = region !== undefined ? region.inputs : op.region === null ? op.saved : [];
    for (const id of kept) {
      const tensor = ir.tensors[id]!;
      if (tensor.role === 'param') continue;
      if (!firstSaver.has(tensor.storage)) firstSaver.set(tensor.storage, op.index);
    }
  }
  // A conditional copy that is saved keeps, where it is a view, the storage it views: counted
  // once, with the complementary factor, unless that storage is saved anyway.
  const views = new Map<number, { readonly op: number; readonly bytes: Dim }>();
  for (const [storage, op] of firstSaver) {
    const conditional = ir.storages[storage]!.conditional;
    if (conditional === undefined || firstSaver.has(conditional.viewOf) || views.has(conditional.viewOf) || ir.storages[conditional.viewOf]!.role === 'param')
      continue;
    views.set(conditional.viewOf, { op, bytes: mul(ir.storages[conditional.viewOf]!.bytes, sub(1, conditional.copyWhen)) });
  }
  return { firstSaver, views, bytes: sum([...[...firstSaver.keys()].map((s) => ir.storages[s]!.bytes), ...[...views.values()].map((v) => v.bytes)]) };
}

/** Saved bytes attributed to each op (by first saver). */
export function savedBytesByOp(ir: IR, saved: SavedStorages): Dim[] {
  const byOp: Dim[] = ir.ops.map(() => 0);
  for (const [storage, op] of saved.firstSaver) byOp[op] = add(byOp[op]!, ir.storages[storage]!.bytes);
  for (const { op, bytes } of saved.views.values()) byOp[op] = add(byOp[op]!, bytes);
  return byOp;
}
