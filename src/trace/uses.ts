import type { IR } from './ir.js';

/** The IR's edges seen from the tensor side: which ops read each tensor, and which keep it for backward. */
export interface TensorUses {
  /** By tensor id: the ops that take it as an input, in execution order. */
  readonly consumers: readonly (readonly number[])[];
  /** By tensor id: the ops whose backward keeps it (what `saved_tensors_hooks` would see it packed by). */
  readonly savedBy: readonly (readonly number[])[];
}

/**
 * Consumers and savers of every tensor of a traced model. The IR stores each op's inputs and
 * saved tensors; this inverts them once for tools that walk from tensors to ops.
 *
 * @example
 * ```ts
 * import { bn, conv2d, relu, seq, tensor } from 'vram-ts';
 * import { tensorUses, trace } from 'vram-ts/internals';
 * const ir = trace(seq(conv2d({ out: 8, kernel: 3 }), bn(), relu()), {
 *   inputs: [tensor([1, 3, 16, 16])], training: true, gradEnabled: true, device: 'cuda', paramDtype: 'float32', loss: 'none',
 * });
 * const convOut = ir.ops[0]!.outputs[0]!;
 * const uses = tensorUses(ir);
 * // batch_norm (op 1) reads the conv output and keeps it for backward:
 * console.log(uses.consumers[convOut], uses.savedBy[convOut]); // [ 1 ] [ 1 ]
 * ```
 */
export function tensorUses(ir: IR): TensorUses {
  const consumers: number[][] = ir.tensors.map(() => []);
  const savedBy: number[][] = ir.tensors.map(() => []);
  for (const op of ir.ops) {
    for (const id of op.inputs) if (consumers[id]!.at(-1) !== op.index) consumers[id]!.push(op.index);
    for (const id of op.saved) savedBy[id]!.push(op.index);
  }
  return { consumers, savedBy };
}

/**
 * Parameter tensor ids in `model.parameters()` order: the module tree depth first, each
 * module's own parameters before its children, children in registration order (the order they
 * ran unless the module says otherwise); a tied or shared parameter once, where first met.
 *
 * @example
 * ```ts
 * import { linear, seq, traceModel } from 'vram-ts';
 * import { parameterOrder } from 'vram-ts/internals';
 * const ir = traceModel(seq(linear({ out: 4 }), linear({ out: 2 })), { input: [1, 3] });
 * console.log(parameterOrder(ir).map((id) => ir.tensors[id]!.key).join(' ')); // 0.weight 0.bias 1.weight 1.bias
 * ```
 */
export function parameterOrder(ir: IR): number[] {
  const out: number[] = [];
  const seen = new Uint8Array(ir.tensors.length);
  const visit = (index: number): void => {
    const module = ir.modules[index]!;
    for (const id of module.params) {
      if (seen[id]) continue;
      seen[id] = 1;
      out.push(id);
    }
    const children =
      module.childOrder === undefined
        ? module.children
        : [...module.children].sort((a, b) => rank(module.childOrder!, ir.modules[a]!.name) - rank(module.childOrder!, ir.modules[b]!.name));
    for (const child of children) visit(child);
  };
  if (ir.modules.length > 0) visit(0);
  return out;
}

/** Position of a child name in a registration order; names not listed keep their place after the listed ones. */
function rank(order: readonly string[], name: string): number {
  const i = order.indexOf(name);
  return i === -1 ? order.length : i;
}
