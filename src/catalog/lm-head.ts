/**
 * What a causal LM's forward computes after its last hidden states when a trainer asks for
 * something other than Hugging Face's loss with labels (see {@link LmHead}): logits of the last
 * positions (`logits_to_keep`), TRL GRPOTrainer's per-token log-probabilities and policy loss,
 * TRL SFTTrainer's chunked cross entropy, or the loss followed by SFTTrainer's metrics.
 */
import { fail } from '../errors.js';
import type { linear } from '../nn/linear.js';
import { opLayer } from '../nn/op.js';
import type { GraphBuilder, LmHead, TensorRef } from '../nn/types.js';
import type { OpRule } from '../ops/types.js';
import { chunkedNllOp } from '../ops/chunked-nll.js';
import { fusedLinearCrossEntropyOp } from '../ops/fused-linear-cross-entropy.js';
import { grpoLossOp } from '../ops/grpo-loss.js';
import { detachOp, entropyOp, selectiveLogSoftmaxOp } from '../ops/log-probs.js';
import { castOp } from '../ops/cast.js';
import { mulScalarOp } from '../ops/pointwise.js';
import { copyOp, copyUnlessOne, sliceOp } from '../ops/view.js';
import type { Dim } from '../sym/expr.js';
import { add, sub } from '../sym/ops.js';
import type { DType } from '../tensor/dtype.js';

/** What the head needs to know of the model it ends. */
export interface HeadModel {
  readonly vocab: number;
  readonly tied: boolean;
  /** The layer whose forward is the LM head (`lm_head`). */
  readonly lmHead: ReturnType<typeof linear>;
}

/** Refuses a head on a model build it was not modelled for (tensor, context or pipeline parallel, logit soft-capping). */
export function checkHeadBuild(head: LmHead, parallel: boolean, softcap: boolean): void {
  if (head.kind === 'loss') return;
  if (parallel)
    fail('not-modelled', `the '${head.kind}' head of a tensor-, context- or pipeline-parallel build is not modelled`, {
      path: ['options', 'head'],
      expected: "{ kind: 'loss' } or no parallel build",
      received: head.kind,
    });
  if (softcap)
    fail('not-modelled', `the '${head.kind}' head with final logit soft-capping (Gemma 2) is not modelled`, { path: ['options', 'head'], received: head.kind });
}

/** accelerate's `convert_outputs_to_fp32`: 16-bit logits copied to float32 as the forward returns. */
export function fp32(g: GraphBuilder, logits: TensorRef, convert: boolean | undefined): TensorRef {
  return convert === true && logits.dtype !== 'float32' ? g.call(castOp, [logits], { dtype: 'float32' })[0]! : logits;
}

/**
 * A loss that reads lm_head's weight itself (the patched forward never calls lm_head): one op
 * owning `lm_head.weight` (tied to the embedding where the model ties it); without grad, lm_head.
 */
function fusedLoss<A>(
  g: GraphBuilder,
  m: HeadModel,
  h: TensorRef,
  ids: TensorRef,
  rule: OpRule<A & { readonly vocab: number; readonly tiedWeight?: string }>,
  attrs: A,
): TensorRef {
  if (!g.gradEnabled) return g.apply(m.lmHead, h);
  const own = { ...attrs, vocab: m.vocab, ...(m.tied ? { tiedWeight: 'model.embed_tokens.weight' } : {}) };
  return g.apply(opLayer(rule, 'Linear', own, { name: 'lm_head' }), h, ids);
}

/**
 * `lm_head(hidden_states[:, -keep:, :])`: the slice, and the copy matmul's reshape makes of it
 * when it is strided (batch > 1) — under autocast the cast to 16 bits is that copy.
 */
function keptLogits(g: GraphBuilder, m: HeadModel, h: TensorRef, keep: number | undefined, autocast: boolean | undefined): TensorRef {
  const [batch, seq] = h.shape as [Dim, Dim];
  if (keep === undefined || (typeof seq === 'number' && keep >= seq)) return g.apply(m.lmHead, h);
  const kept = g.call(sliceOp, [h], { dim: 1, start: sub(seq, keep), end: seq })[0]!;
  return g.apply(m.lmHead, autocast === true ? kept : g.call(copyOp, [kept], { when: copyUnlessOne(batch) })[0]!);
}

/** The forward returns its logits: the autocast cache goes, then accelerate's float32 copy of them. */
function returned(g: GraphBuilder, logits: TensorRef, autocast: boolean | undefined): TensorRef {
  g.endForward();
  return fp32(g, logits, autocast);
}

/** The head's ops after the final norm's output `h` (ids: the input ids). */
export function trainerHead(g: GraphBuilder, m: HeadModel, head: Exclude<LmHead, { kind: 'loss' | 'loss-metrics' }>, h: TensorRef, ids: TensorRef): TensorRef {
  // accelerate's autocast is bf16 here: the chunked loss's matmul runs in it.
  const compute: DType | undefined = head.autocast === true ? 'bfloat16' : undefined;
  switch (head.kind) {
    case 'logits': {
      const logits = returned(g, keptLogits(g, m, h, head.keep, head.autocast), head.autocast);
      g.hold(logits);
      return logits;
    }
    case 'token-logps':
      return tokenLogps(g, m, head, h, ids);
    case 'liger-flce':
      return fusedLoss(g, m, h, ids, fusedLinearCrossEntropyOp, compute === undefined ? {} : { compute });
    case 'chunked-nll':
      return fusedLoss(g, m, h, ids, chunkedNllOp, { chunk: head.chunk ?? 256, ...(compute !== undefined ? { compute } : {}) });
  }
}

/**
 * GRPOTrainer's `_get_per_token_logps_and_entropies` (grpo_trainer.py:1452-1565) on one chunk:
 * `logits_to_keep = keep + 1`, `logits[:, :-1, :]`, `logits / temperature` (a new tensor even at
 * T = 1), selective_log_softmax against the completion ids, the entropy under no_grad; in
 * training `_compute_loss`'s policy loss over the log-probabilities.
 */
function tokenLogps(g: GraphBuilder, m: HeadModel, head: Extract<LmHead, { kind: 'token-logps' }>, h: TensorRef, ids: TensorRef): TensorRef {
  const [, seq] = ids.shape as [Dim, Dim];
  const keep = head.keep;
  let logits = returned(g, keptLogits(g, m, h, keep + 1, head.autocast), head.autocast);
  // `outputs.logits` lives until the function returns (the loop's locals).
  g.hold(logits);
  const positions = logits.shape[1]!;
  logits = g.call(sliceOp, [logits], { dim: 1, start: 0, end: sub(positions, 1) })[0]!;
  logits = g.call(sliceOp, [logits], { dim: 1, start: 0, end: keep })[0]!;
  const scaled = g.call(mulScalarOp, [logits], {})[0]!;
  g.hold(scaled);
  const completion = g.call(sliceOp, [ids], { dim: 1, start: sub(seq, keep), end: add(sub(seq, keep), keep) })[0]!;
  const logps = g.call(selectiveLogSoftmaxOp, [scaled, completion], {})[0]!;
  if (head.entropy === true) {
    const entropies = g.call(entropyOp, [g.call(detachOp, [scaled], {})[0]!], {})[0]!;
    g.hold(entropies);
  }
  if (!g.gradEnabled || (head.loss ?? 'none') === 'none') return logps;
  return g.call(grpoLossOp, [logps], { beta: head.beta ?? false })[0]!;
}

/** SFTTrainer's metrics for `loss_type='nll'` (sft_trainer.py:1832-1843): entropy and accuracy of the shifted logits, without grad. */
export function lossMetrics(g: GraphBuilder, logits: TensorRef): void {
  const [batch, seq] = logits.shape as [Dim, Dim];
  const detached = g.call(detachOp, [logits], {})[0]!;
  const shifted = g.call(sliceOp, [detached], { dim: 1, start: 0, end: sub(seq, 1) })[0]!;
  // `reshape(-1, V)` copies the strided slice unless the batch is 1.
  const copy = typeof batch !== 'number' || batch > 1;
  const entropies = g.call(entropyOp, [shifted], { copy })[0]!;
  g.hold(entropies);
}
