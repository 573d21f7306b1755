import { gradientBytes } from '../step-plan.js';
import { optimizerOver, releaseGradients, wholeGradients } from './kit.js';
import type { EngineHooks, RankContext } from './types.js';

/** One device holding everything: whole parameters, whole gradients, the whole optimizer state. */
export function singleDevice(ctx: RankContext): EngineHooks {
  const { ir, ledger, plan } = ctx;
  const gradients = wholeGradients(ctx);
  const optimizer = optimizerOver(ctx, ctx.optimizer === null ? [] : plan.trainable);
  return {
    param: (storage) => {
      ledger.alloc(ir.storages[storage]!.bytes, 'parameters', 1, ctx.owner(storage));
    },
    start() {
      // The steady step: last step's gradients and the optimizer state exist before it starts —
      // none for a parameter no recorded op uses (an expert no token chose: taken to have been
      // routed the same way the step before).
      const used = new Set<number>();
      for (const op of ir.ops) if (op.recorded) for (const param of op.params) used.add(param);
      const grads = plan.trainable
        .filter((id) => used.has(id))
        .map((id) => {
          const block = ledger.alloc(gradientBytes(ir, id), 'gradients', 1, ctx.owner(ir.tensors[id]!.storage));
          gradients.grads.set(id, block);
          return block;
        });
      return { grads, state: optimizer.allocateState() };
    },
    zeroGrad: () => releaseGradients(ledger, plan.trainable, gradients.grads),
    paramGrads: gradients.paramGrads,
    afterBackward: gradients.afterBackward,
    endBackward: gradients.endBackward,
    step: optimizer.step,
    optimizerState: optimizer.optimizerState,
  };
}
