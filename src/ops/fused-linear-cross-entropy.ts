/**
 * Liger's fused linear cross-entropy (liger-kernel 0.8.2, src/liger_kernel/ops/fused_linear_cross_entropy.py),
 * what transformers' `use_liger_kernel` puts in a causal LM's training forward. READ from the
 * source, not measured: it needs Triton on a GPU (the CPU oracle cannot run it).
 */
import type { Dim } from '../sym/expr.js';
import { mul } from '../sym/ops.js';
import { DTYPE_BITS, type DType } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/** Attributes of {@link fusedLinearCrossEntropyOp}. */
export interface FusedLinearCrossEntropyAttrs {
  readonly vocab: number;
  /** Parameter key of the tied input embedding. */
  readonly tiedWeight?: string;
  /** The matmul's dtype under autocast; default the hidden states'. */
  readonly compute?: DType;
}

function nextPowerOfTwo(n: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(1, n)));
}

/**
 * `LigerFusedLinearCrossEntropyFunction` over hidden states [B, S, H] (N = B·S rows) and lm_head's
 * weight: chunks of `next_pow2(⌈N / ⌈V/H⌉⌉)` rows (FLCE:64-70); `grad_input` [N, H] in the
 * input's dtype and `grad_weight` [V, H] in the weight's are allocated up front (FLCE:72-81) with
 * `loss_1d` and `token_accuracy_1d` ([N] float32) and the target mask; per chunk the logits
 * [r, V] in the matmul's dtype (no upcast), overwritten in place by their gradient, and the
 * [r, H] input-gradient product (FLCE:114-231). The weight gradient is accumulated in place
 * (`addmm(out_dtype=fp32)`, FLCE:235-255: float32 weights under autocast on sm80+ with torch ≥ 2.8)
 * or through `mm(...).float()`, a [V, H] in the matmul dtype and its float32 copy (FLCE:257).
 * The gradients are computed in the forward and saved (FLCE:431-435); backward scales them in
 * place and hands them on.
 */
export const fusedLinearCrossEntropyOp: OpRule<FusedLinearCrossEntropyAttrs> = {
  name: 'liger_fused_linear_cross_entropy',
  arity: 2,
  apply([hidden], attrs, ctx) {
    const [batch, seq, width] = hidden!.shape as [Dim, Dim, number];
    const rows = mul(batch, seq);
    const V = attrs.vocab;
    const inputDtype = hidden!.dtype;
    const compute = attrs.compute ?? inputDtype;
    const a = DTYPE_BITS[compute] / 8;
    const chunkRows = typeof rows === 'number' ? Math.min(rows, nextPowerOfTwo(Math.ceil(rows / Math.ceil(V / width)))) : nextPowerOfTwo(Math.ceil(V / width));
    const inPlace = ctx.paramDtype === 'float32' && compute !== 'float32';
    const steps: KernelStep[] = [
      { alloc: 'loss_1d', bytes: mul(rows, 4) },
      { alloc: 'token_accuracy_1d', bytes: mul(rows, 4) },
      { alloc: 'target_mask', bytes: rows },
      { alloc: 'cast weight', bytes: compute !== ctx.paramDtype ? V * width * a : 0 },
      { alloc: 'logits chunk', bytes: chunkRows * V * a },
      { alloc: 'grad_input chunk', bytes: chunkRows * width * a },
      { free: 'grad_input chunk' },
      { alloc: 'weight gradient', bytes: inPlace ? 0 : V * width * a },
      { alloc: 'weight gradient float', bytes: inPlace ? 0 : V * width * 4 },
      { free: 'weight gradient' },
      { free: 'weight gradient float' },
      { free: 'logits chunk' },
      { free: 'cast weight' },
      { results: 'outputs' },
      { free: 'loss_1d' },
      { free: 'token_accuracy_1d' },
      { free: 'target_mask' },
    ];
    const weight = tensor([V, width], ctx.paramDtype);
    return {
      outputs: [tensor([], 'float32')],
      params: [attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight }],
      saves: () => [
        { extra: tensor([rows, width], inputDtype), label: 'grad_input' },
        { extra: tensor([V, width], ctx.paramDtype), label: 'grad_weight' },
      ],
      forwardSteps: steps,
      macs: () => mul(mul(rows, width), V * 2),
      // The saved gradients are the results: scaled in place and handed on.
      backward: () => ({ inputGrads: ['new', 'none'], steps: [{ release: 'saved' }, { results: 'inputGrads' }, { results: 'paramGrads' }] }),
    };
  },
};
