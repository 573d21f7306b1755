/**
 * GRPOTrainer's policy loss over per-token log-probabilities (TRL 1.13 grpo_trainer.py
 * `_compute_loss`, :3113-3385, loss types grpo/bnpo/dr_grpo/dapo/luspo), as one op: every tensor
 * in it is [B, L] (or a scalar), so it is counted tensor by tensor from the source rather than
 * traced op by op.
 */
import { mul } from '../sym/ops.js';
import { DTYPE_BITS } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/** Attributes of {@link grpoLossOp}. */
export interface GrpoLossAttrs {
  /** beta ≠ 0: the KL term against the reference log-probabilities. */
  readonly beta: boolean;
}

/**
 * The clipped policy loss: `log_ratio`, `coef_1 = exp(log_ratio)`, `coef_2 = clamp(coef_1)`,
 * the two products with the advantages, `-min(...)`, `* mask`, the sum — locals that live until
 * the loss returns (seven [B, L]); with beta the KL term adds five more. Saved for backward:
 * `coef_1` (ExpBackward0.result), both products (MinimumBackward0), and with beta the KL's
 * `exp` result and its product. The clip-ratio metrics (boolean masks and their float copies)
 * are transient.
 */
export const grpoLossOp: OpRule<GrpoLossAttrs> = {
  name: 'grpo_loss',
  arity: 1,
  apply([logps], attrs) {
    const token = mul(mul(logps!.shape[0]!, logps!.shape[1] ?? 1), DTYPE_BITS[logps!.dtype] / 8);
    const locals = attrs.beta ? 12 : 7;
    const saved = attrs.beta ? 5 : 3;
    const steps: KernelStep[] = [];
    for (let i = 0; i < locals; i++) steps.push({ alloc: `local${i}`, bytes: token });
    steps.push({ alloc: 'metrics', bytes: mul(token, 2) }, { free: 'metrics' }, { results: 'outputs' });
    for (let i = 0; i < locals; i++) steps.push({ free: `local${i}` });
    const spec = tensor(logps!.shape, logps!.dtype);
    return {
      outputs: [tensor([], logps!.dtype)],
      saves: (needs) => (needs.inputs[0] ? Array.from({ length: saved }, (_, i) => ({ extra: spec, label: `token${i}` })) : []),
      forwardSteps: steps,
      backward: () => ({
        inputGrads: ['new'],
        steps: [{ alloc: 'grads', bytes: mul(token, 3) }, { results: 'inputGrads' }, { free: 'grads' }],
      }),
    };
  },
};
