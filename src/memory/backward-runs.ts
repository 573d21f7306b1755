import type { IR } from '../trace/ir.js';

/** Which backward nodes run in a training step, and which tensors a gradient reaches. */
export interface BackwardRuns {
  /** By op: 1 when its backward node runs (recorded, with a backward, an output reached by a gradient). */
  readonly runs: Uint8Array;
  /** By tensor: 1 when a gradient reaches it. */
  readonly reached: Uint8Array;
}

/**
 * Which backward nodes run, as autograd.ts decides while it runs them: the loss's gradient flows
 * back through recorded ops that have a backward, into the inputs that get a gradient and need one.
 * Engines that place hooks by node (DeepSpeed's gradient hooks, ZeRO-3's module hooks) read it
 * before the step.
 */
export function backwardRuns(ir: IR): BackwardRuns {
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
  return { runs, reached };
}
