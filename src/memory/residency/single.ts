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
      // The steady step: last step's gradients and the optimizer state exist before it starts.
      const grads = plan.trainable.map((id) => {
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
