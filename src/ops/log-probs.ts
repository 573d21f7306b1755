/**
 * The log-probability kernels RL and SFT trainers run on the logits (TRL 1.13's trainer/utils.py),
 * each one op whose Python loop is replayed as kernel steps: selective_log_softmax (a gather and a
 * logsumexp per row), entropy_from_logits (128-row chunks under no_grad) and `.detach()`.
 */
import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { mul, product } from '../sym/ops.js';
import { DTYPE_BITS } from '../tensor/dtype.js';
import { tensor, type TensorSpec } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/** `min(a, k)` for a size that is a number, else k (a symbolic size is taken to be at least k). */
function atMost(a: Dim, k: number): Dim {
  return typeof a === 'number' ? Math.min(a, k) : k;
}

/** `x.detach()` (or a tensor read under `torch.no_grad()`): a view that carries no gradient, so nothing after it is recorded. */
export const detachOp: OpRule<Record<string, never>> = {
  name: 'detach',
  arity: 1,
  apply([x]) {
    return { outputs: [tensor(x!.shape, x!.dtype)], alias: 'view', nonDifferentiableOutputs: [0], saves: () => [] };
  },
};

function rowsOf(x: TensorSpec): { rows: Dim; batch: Dim; positions: Dim; classes: Dim } {
  const shape = x.shape;
  const classes = shape[shape.length - 1]!;
  const batch = shape[0]!;
  const positions = product(shape.slice(1, -1));
  return { rows: mul(batch, positions), batch, positions, classes };
}

/**
 * TRL's `selective_log_softmax(logits, index)` for float32 logits [B, K, V] and int64 ids [B, K]
 * (trainer/utils.py:485-529): `torch.gather` of the chosen logits, then `torch.logsumexp` of
 * each row `for lg in logits` (an unbind: one view per sequence), stacked, and subtracted.
 *
 * Forward: the gathered [B, K, 1]; per row, logsumexp's `self - amax` [K, V] (exponentiated in
 * place) with its small [K] temporaries; the B results [K] stay (LogsumexpBackward0.result); the
 * stack [B, K] and the difference. Saved: the logits (LogsumexpBackward0.self of every row) and
 * the ids (GatherBackward0.index). Backward: each row's `grad * (self - result).exp()` ([K, V],
 * two temporaries) waits in UnbindBackward0's buffer until the last row, which then stacks them
 * into the logits' gradient [B, K, V]; GatherBackward0's zeros [B, K, V] + scatter_add_ is then
 * added to it in place.
 */
export const selectiveLogSoftmaxOp: OpRule<Record<string, never>> = {
  name: 'selective_log_softmax',
  arity: 2,
  apply([logits, index], _attrs, ctx) {
    // The 16-bit branch (a log_softmax per row) is another kernel sequence: not modelled.
    if (logits!.dtype !== 'float32' && logits!.dtype !== 'float64')
      fail('not-modelled', "selective_log_softmax of 16-bit logits (TRL's row-by-row log_softmax branch) is not modelled", {
        path: ctx.path,
        received: logits!.dtype,
      });
    const { batch, positions, classes } = rowsOf(logits!);
    const f = DTYPE_BITS[logits!.dtype] / 8;
    const rowTensor = mul(mul(positions, classes), f);
    const small = mul(positions, f);
    const pairs = mul(mul(batch, positions), f);
    const full = mul(rowTensor, batch);
    // One logsumexp per sequence: a loop that a symbolic batch cannot unroll.
    if (typeof batch !== 'number') fail('not-modelled', 'selective_log_softmax loops over the sequences: it needs a concrete batch', { path: ctx.path });
    const rows = batch;
    const forward: KernelStep[] = [{ alloc: 'gathered', bytes: pairs }];
    const backward: KernelStep[] = [];
    for (let r = 0; r < rows; r++) {
      forward.push({ alloc: 'amax', bytes: small }, { alloc: 'shifted', bytes: rowTensor }, { free: 'shifted' }, { free: 'amax' });
      backward.push(
        { alloc: `diff${r}`, bytes: rowTensor },
        { alloc: `row${r}`, bytes: rowTensor },
        { free: `diff${r}` },
        { alloc: `grad${r}`, bytes: rowTensor },
        { free: `row${r}` },
      );
    }
    forward.push({ alloc: 'stacked', bytes: pairs }, { results: 'outputs' }, { free: 'stacked' }, { free: 'gathered' });
    backward.push({ results: 'inputGrads' });
    for (let r = 0; r < rows; r++) backward.push({ free: `grad${r}` });
    backward.push({ alloc: 'scattered', bytes: full }, { free: 'scattered' });
    return {
      outputs: [tensor(index!.shape, logits!.dtype)],
      saves: (needs) => (needs.inputs[0] ? [{ input: 0 }, { input: 1 }, { extra: tensor([batch, positions], logits!.dtype), label: 'logsumexp' }] : []),
      forwardSteps: forward,
      backward: () => ({ inputGrads: ['new', 'none'], steps: backward }),
    };
  },
};

/** Attributes of {@link entropyOp}. */
export interface EntropyAttrs {
  /** Rows per chunk (TRL's default 128). */
  readonly chunk?: number;
  /** The logits are not contiguous (a shifted slice): `reshape` copies them first. */
  readonly copy?: boolean;
}

/**
 * TRL's `entropy_from_logits(logits, chunk_size=128)` (trainer/utils.py:532-566) on logits that
 * carry no gradient: flattened to [N, V] (a copy when they are a strided slice), then per chunk of
 * rows `logps = log_softmax(chunk)` (the previous chunk's `logps` still referenced while the new
 * one is made), `exp(logps) * logps` summed; the chunks' [c] entropies are concatenated.
 */
export const entropyOp: OpRule<EntropyAttrs> = {
  name: 'entropy_from_logits',
  arity: 1,
  apply([logits], attrs) {
    const { rows, classes } = rowsOf(logits!);
    const f = DTYPE_BITS[logits!.dtype] / 8;
    const chunk = attrs.chunk ?? 128;
    const chunkRows = atMost(rows, chunk);
    const chunkBytes = mul(mul(chunkRows, classes), f);
    const steps: KernelStep[] = [];
    if (attrs.copy === true) steps.push({ alloc: 'flat', bytes: mul(mul(rows, classes), f) });
    // Two chunks' log-probabilities exist at once from the second chunk on (the old `logps` until reassigned).
    const many = typeof rows === 'number' ? rows > chunk : true;
    steps.push({ alloc: 'logps', bytes: chunkBytes });
    if (many) steps.push({ alloc: 'next', bytes: chunkBytes }, { free: 'logps' });
    steps.push({ alloc: 'exp', bytes: chunkBytes }, { alloc: 'product', bytes: chunkBytes }, { free: 'exp' }, { free: 'product' });
    steps.push({ free: many ? 'next' : 'logps' });
    // The chunks' entropies, then their concatenation (the output).
    steps.push({ alloc: 'entropies', bytes: mul(rows, f) }, { results: 'outputs' }, { free: 'entropies' });
    if (attrs.copy === true) steps.push({ free: 'flat' });
    return { outputs: [tensor(logits!.shape.slice(0, -1), logits!.dtype)], nonDifferentiableOutputs: [0], saves: () => [], forwardSteps: steps };
  },
};
