import { castOp } from '../ops/cast.js';
import { parallelLogSoftmaxOp, parallelNllLossOp } from '../ops/collective.js';
import { logSoftmaxOp, nllLossOp } from '../ops/loss.js';
import { copyOp, copyUnlessOne, sliceOp, viewOp } from '../ops/view.js';
import type { GraphBuilder, TensorRef } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import { add, mul, sub } from '../sym/ops.js';

/** How a Hugging Face causal LM computes its loss from `labels` (see {@link HFRules.loss}). */
export type CausalLmLossStyle = 'shift' | 'pad-shift';

/**
 * The loss a Hugging Face `*ForCausalLM` computes when given `labels` (the input ids here),
 * op for op:
 * - `shift`: `logits[..., :-1, :].contiguous()` and `labels[..., 1:].contiguous()` (copies,
 *   unless the batch is 1: then the slices are contiguous already), flattened, into
 *   CrossEntropyLoss (log_softmax + nll_loss);
 * - `pad-shift` (ForCausalLMLoss since 4.49): the logits flattened as they are, the labels
 *   padded with -100 (a new int64 [B, S + 1]) and shifted (`.contiguous()`: a copy unless the
 *   batch is 1).
 * `upcast`: the logits go to float32 first (`logits.float()` inside the loss).
 * `lossParallel`: the logits are one rank's vocabulary shard (`vocab` its rows) and the cross
 * entropy runs under `loss_parallel()` (see {@link parallelLogSoftmaxOp}).
 */
export function causalLmLoss(
  g: GraphBuilder,
  logits: TensorRef,
  ids: TensorRef,
  vocab: number,
  style: CausalLmLossStyle,
  upcast: boolean,
  lossParallel = false,
): TensorRef {
  const [batch, seq] = ids.shape as [Dim, Dim];
  let scores = upcast ? g.call(castOp, [logits], { dtype: 'float32' })[0]! : logits;
  let rows: Dim = mul(batch, seq);
  let labels: TensorRef;
  if (style === 'shift') {
    const kept = sub(seq, 1);
    // At batch 1 a slice along the sequence is contiguous already: .contiguous() returns it.
    const contiguous = (t: TensorRef) => g.call(copyOp, [t], { when: copyUnlessOne(batch) })[0]!;
    scores = contiguous(g.call(sliceOp, [scores], { dim: 1, start: 0, end: kept })[0]!);
    labels = contiguous(g.call(sliceOp, [ids], { dim: 1, start: 1, end: seq })[0]!);
    rows = mul(batch, kept);
  } else {
    // F.pad(labels, (0, 1), value=-100): a new int64 [B, S + 1], a local until the loss returns.
    const padded = g.call(copyOp, [ids], { shape: [batch, add(seq, 1)] })[0]!;
    g.hold(padded);
    const shifted = g.call(sliceOp, [padded], { dim: 1, start: 1, end: add(seq, 1) })[0]!;
    labels = g.call(copyOp, [shifted], { when: copyUnlessOne(batch) })[0]!;
  }
  const flat = g.call(viewOp, [scores], { shape: [rows, vocab] })[0]!;
  const target = g.call(viewOp, [labels], { shape: [rows] })[0]!;
  if (lossParallel) return g.call(parallelNllLossOp, [g.call(parallelLogSoftmaxOp, [flat], {})[0]!, target], {})[0]!;
  const logp = g.call(logSoftmaxOp, [flat], { dim: 1 })[0]!;
  return g.call(nllLossOp, [logp, target], {})[0]!;
}
