import { add, sum } from '../sym/ops.js';
import type { Dim } from '../sym/expr.js';
import type { IR } from '../trace/ir.js';

/** Which op first saved each storage that autograd keeps (parameters excluded). */
export interface SavedStorages {
  /** storage id → index of the first op that saved it. */
  readonly firstSaver: ReadonlyMap<number, number>;
  /** Bytes of all of them. */
  readonly bytes: Dim;
}

/**
 * The saved-bytes contract: the distinct storages autograd holds for backward right
 * after the forward pass, parameters excluded (buffers and the input count when saved).
 *
 * @example
 * ```ts
 * import { conv2d, relu, savedStorages, seq, tensor, trace } from 'vram-ts';
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
  return { firstSaver, bytes: sum([...firstSaver.keys()].map((s) => ir.storages[s]!.bytes)) };
}

/** Saved bytes attributed to each op (by first saver). */
export function savedBytesByOp(ir: IR, saved: SavedStorages): Dim[] {
  const byOp: Dim[] = ir.ops.map(() => 0);
  for (const [storage, op] of saved.firstSaver) byOp[op] = add(byOp[op]!, ir.storages[storage]!.bytes);
  return byOp;
}
