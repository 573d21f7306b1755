/**
 * TRL SFTTrainer's chunked cross entropy (`loss_type='chunked_nll'`, TRL 1.13 sft_trainer.py
 * :101-230): the LM head and the loss over chunks of tokens, each chunk under non-reentrant
 * activation checkpointing, so the full logits never exist.
 */
import type { Dim } from '../sym/expr.js';
import { mul, sub } from '../sym/ops.js';
import { DTYPE_BITS, type DType } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/** `min(a, k)` for a size that is a number, else k (a symbolic size is taken to be at least k). */
function atMost(a: Dim, k: number): Dim {
  return typeof a === 'number' ? Math.min(a, k) : k;
}

/** How many chunks the rows make (a symbolic size: taken to be more than one). */
function chunksOf(rows: Dim, chunk: number): number {
  return typeof rows === 'number' ? Math.ceil(rows / chunk) : 2;
}

/**
 * Backward of the chunked loss, at its largest chunk (the first, which backward reaches last):
 * the chunk recomputed whole — logits, log_softmax, and the entropy's `exp` and product, all
 * four at once — then only `log_p` kept; nll's and log_softmax's gradients; the matmul's [c, H]
 * and [V, H] gradients (16-bit first under autocast, then ToCopyBackward's float32). The weight
 * gradients of the chunks meet in TBackward0's buffer: the earlier chunks' sum is alive, and the
 * last is added out of place (three [V, H] at once) before lm_head's `.grad` takes the sum.
 * Measured: torch 2.13 CPU, TRL 1.13 (sft_qwen3_h64_v12800_chunked_nogc_fp32's trace).
 */
function chunkBackward(b: {
  readonly castRows: Dim;
  readonly castWeight: Dim;
  readonly lowLogits: Dim;
  readonly logits32: Dim;
  readonly rowsGrad: Dim;
  readonly weightBytes: number;
  readonly weight16: Dim;
  readonly packed: Dim;
  readonly many: boolean;
}): KernelStep[] {
  const steps: KernelStep[] = [];
  if (b.many) steps.push({ alloc: 'earlier weight gradients', bytes: b.weightBytes });
  steps.push(
    { alloc: 'castRows', bytes: b.castRows },
    { alloc: 'castWeight', bytes: b.castWeight },
    { alloc: 'lowLogits', bytes: b.lowLogits },
    // `.float()`: the 16-bit logits go as soon as the float32 copy exists.
    { alloc: 'logits', bytes: b.logits32 },
    { free: 'lowLogits' },
    { alloc: 'logp', bytes: b.logits32 },
    { alloc: 'exp', bytes: b.logits32 },
    { alloc: 'product', bytes: b.logits32 },
    { free: 'product' },
    { free: 'exp' },
    { free: 'logits' },
    { alloc: 'nllGrad', bytes: b.logits32 },
    { alloc: 'logitsGrad', bytes: b.logits32 },
    { free: 'logp' },
    { free: 'nllGrad' },
    { alloc: 'logitsGrad16', bytes: b.lowLogits },
    { free: 'logitsGrad' },
    { alloc: 'rowsGrad', bytes: b.rowsGrad },
    { alloc: 'weightGrad16', bytes: b.weight16 },
    { free: 'logitsGrad16' },
    { free: 'castRows' },
    { free: 'castWeight' },
    { alloc: 'weightGrad', bytes: b.weightBytes },
    { free: 'weightGrad16' },
    { results: 'paramGrads' },
  );
  if (b.many) steps.push({ free: 'earlier weight gradients' });
  steps.push(
    { free: 'weightGrad' },
    { alloc: 'sliceGrad', bytes: b.packed },
    { free: 'rowsGrad' },
    { alloc: 'packedGrad', bytes: b.packed },
    { free: 'sliceGrad' },
    { results: 'inputGrads' },
    { free: 'packedGrad' },
  );
  return steps;
}

/** Attributes of {@link chunkedNllOp}. */
export interface ChunkedNllAttrs {
  readonly vocab: number;
  /** Tokens per chunk (TRL's `_CHUNKED_LM_HEAD_CHUNK_SIZE`, 256). */
  readonly chunk: number;
  /** Parameter key of the tied input embedding. */
  readonly tiedWeight?: string;
  /** The matmul's dtype under autocast (bf16 mixed precision); default the hidden states'. */
  readonly compute?: DType;
}

/**
 * `_chunked_cross_entropy_loss(hidden [B, S, H], lm_head.weight, labels)`:
 * - `hidden[..., :-1, :].reshape(-1, H)` (a copy unless the batch is 1) and the labels likewise;
 *   the valid mask, `argsort` of it (int64 order), `hidden[order]` [N, H] and `labels[order]`
 *   — the packed copies, kept as the checkpointed chunks' inputs (and `order` by IndexBackward0);
 * - per chunk of c rows, without saving: `h @ w.t()` ([c, V] in the compute dtype, its `.float()`),
 *   `log_softmax`, nll, argmax, and the entropy's `exp(log_p)` and `exp * log_p`;
 * - backward, chunk by chunk from the last: the recomputed chunk keeps `log_p` and `exp`, then
 *   nll's gradient and log_softmax's ([c, V] each), the matmul's [c, H] and [V, H] gradients (the
 *   latter added into lm_head's `.grad`), and slice backward's zeros [N, H] per chunk added into
 *   the packed hidden state's gradient; IndexBackward0 scatters it back to [N, H], then to [B, S, H].
 */
export const chunkedNllOp: OpRule<ChunkedNllAttrs> = {
  name: 'chunked_nll',
  arity: 2,
  apply([hidden], attrs, ctx) {
    const [batch, seq, width] = hidden!.shape as [Dim, Dim, number];
    const hiddenDtype = hidden!.dtype;
    const h = DTYPE_BITS[hiddenDtype] / 8;
    const compute = attrs.compute ?? hiddenDtype;
    const c16 = DTYPE_BITS[compute] / 8;
    const rows = mul(batch, sub(seq, 1));
    const chunk = atMost(rows, attrs.chunk);
    const V = attrs.vocab;
    const strided = typeof batch !== 'number' || batch > 1;
    const logits32 = mul(mul(chunk, V), 4);
    const packed = mul(mul(rows, width), h);
    const weight = tensor([V, width], ctx.paramDtype);
    const castWeight = compute !== ctx.paramDtype ? mul(V * width, c16) : 0;
    const castRows = compute !== hiddenDtype ? mul(mul(chunk, width), c16) : 0;
    const lowLogits = compute !== 'float32' ? mul(mul(chunk, V), c16) : 0;
    const forward: KernelStep[] = [];
    if (strided) forward.push({ alloc: 'shifted', bytes: packed }, { alloc: 'shiftedLabels', bytes: mul(rows, 8) });
    // The valid mask, its int8 copy and argsort's values; `order` and the packed copies are the saved extras.
    forward.push({ alloc: 'valid', bytes: rows }, { alloc: 'mask8', bytes: rows }, { alloc: 'sortValues', bytes: rows });
    forward.push({ free: 'sortValues' }, { free: 'mask8' }, { results: 'outputs' });
    if (strided) forward.push({ free: 'shifted' }, { free: 'shiftedLabels' });
    // One chunk's forward under checkpoint (nothing saved): the biggest moment is the entropy's product.
    forward.push({ alloc: 'castRows', bytes: castRows }, { alloc: 'castWeight', bytes: castWeight }, { alloc: 'lowLogits', bytes: lowLogits });
    forward.push({ free: 'castRows' }, { free: 'castWeight' }, { alloc: 'logits', bytes: logits32 }, { free: 'lowLogits' });
    forward.push({ alloc: 'logp', bytes: logits32 }, { alloc: 'exp', bytes: logits32 }, { alloc: 'product', bytes: logits32 });
    forward.push({ free: 'exp' }, { free: 'product' }, { free: 'logp' }, { free: 'logits' }, { free: 'valid' });
    const weightBytes = V * width * (DTYPE_BITS[ctx.paramDtype] / 8);
    const backward = (weights: boolean) =>
      chunkBackward({
        castRows,
        castWeight,
        lowLogits,
        logits32,
        rowsGrad: mul(mul(chunk, width), h),
        // A frozen lm_head (LoRA) gets no weight gradient.
        weightBytes: weights ? weightBytes : 0,
        weight16: weights && compute !== ctx.paramDtype ? mul(V * width, c16) : 0,
        packed,
        many: weights && chunksOf(rows, attrs.chunk) > 1,
      });
    return {
      outputs: [tensor([], 'float32')],
      params: [attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight }],
      saves: (needs) =>
        needs.inputs[0] || needs.params
          ? [
              { extra: tensor([rows, width], hiddenDtype), label: 'packed hidden' },
              { extra: tensor([rows], 'int64'), label: 'packed labels' },
              { extra: tensor([rows], 'int64'), label: 'order' },
            ]
          : [],
      macs: () => mul(mul(rows, width), V),
      forwardSteps: forward,
      backward: (needs) => ({ inputGrads: ['new', 'none'], steps: backward(needs.params) }),
    };
  },
};
