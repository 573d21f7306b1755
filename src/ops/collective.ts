import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { mul, product } from '../sym/ops.js';
import { bytesOf } from '../tensor/dtype.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { dimIndex, positiveInt } from './check.js';
import { copyUnlessOne } from './view.js';
import type { KernelStep, OpRule } from './types.js';

/*
 * The collectives of PyTorch DTensor tensor parallelism (torch.distributed.tensor.parallel,
 * torch 2.13), as one rank sees them. Every functional collective is out of place: its output
 * is a new tensor the caller allocates (torch.ops._c10d_functional.*), the input is freed when
 * nothing else holds it. What each op's backward does follows DTensor's Redistribute.backward
 * (_redistribute.py, `_redistribute_backward`): Partial → Replicate is kept Replicate (no
 * collective), Shard → Partial becomes Shard → Replicate (all-gather), Replicate → Shard is a
 * local split.
 */

/**
 * The identity that ColwiseParallel's input hook makes of a replicated input
 * (`DTensor.from_local(x, mesh, (Replicate(),))`: a view of x) whose backward all-reduces the
 * partial gradient the sharded projection hands back (Megatron's "f"): a new tensor of the
 * input's size per projection that wraps x.
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { tpCopyOp } from 'vram-ts/internals';
 * const r = tpCopyOp.apply([tensor([1, 8, 64], 'bfloat16')], {}, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.alias, r.backward!({ inputs: [true], params: false }).inputGrads); // view [ 'new' ]
 * ```
 */
export const tpCopyOp: OpRule<Record<string, never>> = {
  name: 'tp_copy',
  arity: 1,
  apply([x]) {
    return { outputs: [tensor(x!.shape, x!.dtype)], alias: 'view', saves: () => [], backward: () => ({ inputGrads: ['new'] }) };
  },
};

/**
 * RowwiseParallel's output hook with `output_layouts=Replicate()`: the Partial local result
 * all-reduced by `funcol.all_reduce`, which clones it and reduces the clone (a new tensor of
 * the same size). The backward keeps the gradient Replicate: it passes through unchanged.
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { allReduceOp } from 'vram-ts/internals';
 * const r = allReduceOp.apply([tensor([1, 8, 64], 'bfloat16')], {}, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.outputs[0]!.shape, r.alias); // [ 1, 8, 64 ] undefined
 * ```
 */
export const allReduceOp: OpRule<Record<string, never>> = {
  name: 'all_reduce',
  arity: 1,
  apply([x]) {
    return { outputs: [tensor(x!.shape, x!.dtype)], saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
  },
};

/** Attributes of {@link allGatherOp} and {@link reduceScatterOp}. */
export interface CollectiveAttrs {
  /** The sharded dimension (DTensor's `Shard(dim)`). */
  readonly dim: number;
  /** Ranks in the tensor-parallel group. */
  readonly size: number;
  /**
   * All-gather only: what its backward does to the gradient: `reduce-scatter` (the gradient is
   * Partial, as the sum of sharded projections' input gradients: Shard(1) ← Partial) or `split`
   * (the gradient is Replicate, as a plain loss's gradient of gathered logits: the local chunk,
   * cloned). Default `reduce-scatter`.
   */
  readonly backward?: 'reduce-scatter' | 'split';
  /**
   * All-gather only: the whole (logical) extent of the gathered dimension when the shards are
   * uneven (torch.chunk): each shard is padded to ⌈extent/size⌉ for the collective (a padded
   * copy on a short rank) and the result narrowed to `extent` (a view; the output here is
   * counted at the logical extent). Default: the local extent times the size.
   */
  readonly extent?: number;
}

/** The bytes of the copy `torch.cat(torch.chunk(x, n, dim), 0)` (or its inverse) makes, 0 where it is a view. */
function chunkCatCopy(shape: readonly Dim[], dim: number, bytes: Dim, gather: boolean): Dim {
  // _maybe_view_chunk_cat (all-gather) is a view when every extent before `dim` is 1;
  // _chunk_or_narrow_cat (reduce-scatter) always copies (torch.cat).
  if (!gather) return bytes;
  const leading = product(shape.slice(0, dim));
  return leading === 1 ? 0 : mul(bytes, copyUnlessOne(leading));
}

/**
 * DTensor Shard(dim) → Replicate: `funcol.all_gather_single` gathers along dim 0 into a new
 * [size·d0, …] tensor and, for dim > 0, re-concatenates it along `dim` (a second copy unless
 * every extent before `dim` is 1). Backward: a reduce-scatter of the Partial gradient (the
 * chunk-and-concatenate copy, then the new shard) or a local split of a Replicate one (a clone).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { allGatherOp } from 'vram-ts/internals';
 * const r = allGatherOp.apply([tensor([1, 4, 64], 'bfloat16')], { dim: 1, size: 2 }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.outputs[0]!.shape); // [ 1, 8, 64 ]
 * ```
 */
export const allGatherOp: OpRule<CollectiveAttrs> = {
  name: 'all_gather',
  arity: 1,
  apply([x], attrs, ctx) {
    const size = positiveInt(attrs.size, 'size', ctx);
    const dim = dimIndex(attrs.dim, x!.shape.length, ctx);
    const local = x!.shape[dim]!;
    const padded = attrs.extent === undefined ? local : Math.ceil(attrs.extent / size);
    const shape = x!.shape.map((d, i) => (i === dim ? (attrs.extent ?? mul(d, size)) : d));
    const out = tensor(shape, x!.dtype);
    const bytes = specBytes(out);
    const gathered = specBytes(
      tensor(
        x!.shape.map((d, i) => (i === dim ? mul(padded, size) : d)),
        x!.dtype,
      ),
    );
    const pad: KernelStep[] =
      padded !== local
        ? [
            {
              alloc: 'padded shard',
              bytes: specBytes(
                tensor(
                  x!.shape.map((d, i) => (i === dim ? padded : d)),
                  x!.dtype,
                ),
              ),
            },
          ]
        : [];
    const copy = chunkCatCopy(shape, dim, bytes, true);
    // The gathered buffer is the output itself when no re-concatenation and no narrowing follow.
    const even = attrs.extent === undefined || (typeof padded === 'number' && padded * size === attrs.extent);
    const forwardSteps: KernelStep[] =
      copy === 0 && even && pad.length === 0
        ? [{ results: 'outputs' }]
        : // `local_tensor = self._maybe_pad_tensor(...)`: the padded shard lives until the gather returns.
          [
            ...pad,
            { alloc: 'all_gather_into_tensor output', bytes: gathered },
            { results: 'outputs' },
            { free: 'all_gather_into_tensor output' },
            ...(pad.length > 0 ? [{ free: 'padded shard' }] : []),
          ];
    const split = attrs.backward === 'split';
    const backwardSteps: KernelStep[] = split
      ? [{ results: 'inputGrads' }]
      : [{ alloc: 'chunk-cat copy for reduce_scatter', bytes }, { results: 'inputGrads' }, { free: 'chunk-cat copy for reduce_scatter' }];
    return { outputs: [out], forwardSteps, saves: () => [], backward: () => ({ inputGrads: ['new'], steps: backwardSteps }) };
  },
};

/**
 * DTensor Partial → Shard(dim) (RowwiseParallel with `output_layouts=Shard(1)`, sequence
 * parallel): `funcol.reduce_scatter_single` first concatenates the chunks along dim 0 (a copy,
 * for dim > 0), then reduces into a new shard. Backward: Shard → Replicate, an all-gather of the
 * gradient (the gathered tensor, re-concatenated unless the leading extents are 1).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { reduceScatterOp } from 'vram-ts/internals';
 * const r = reduceScatterOp.apply([tensor([1, 8, 64], 'bfloat16')], { dim: 1, size: 2 }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.outputs[0]!.shape); // [ 1, 4, 64 ]
 * ```
 */
export const reduceScatterOp: OpRule<CollectiveAttrs> = {
  name: 'reduce_scatter',
  arity: 1,
  apply([x], attrs, ctx) {
    const size = positiveInt(attrs.size, 'size', ctx);
    const dim = dimIndex(attrs.dim, x!.shape.length, ctx);
    const extent = x!.shape[dim]!;
    // ⌊S/t⌋·t is not S for a symbol: the gathered sequence would not match the rest of the model.
    if (typeof extent !== 'number')
      fail(
        'not-modelled',
        'sharding a symbolic dimension (sequence parallelism over a symbolic sequence length) is not modelled: give the length as a number',
        { path: ctx.path, expected: 'a number', received: 'an expression' },
      );
    if (extent % size !== 0)
      fail('bad-input', `the sharded dimension (${extent}) must divide by the tensor-parallel size`, {
        path: ctx.path,
        expected: `a multiple of ${size}`,
        received: String(extent),
      });
    const shape = x!.shape.map((d, i) => (i === dim ? extent / size : d));
    const full = specBytes(x!);
    const forwardSteps: KernelStep[] =
      dim === 0
        ? [{ results: 'outputs' }]
        : [{ alloc: 'chunk-cat copy for reduce_scatter', bytes: full }, { results: 'outputs' }, { free: 'chunk-cat copy for reduce_scatter' }];
    const copy = chunkCatCopy(x!.shape, dim, full, true);
    const backwardSteps: KernelStep[] =
      copy === 0
        ? [{ results: 'inputGrads' }]
        : [{ alloc: 'all_gather_into_tensor output', bytes: full }, { results: 'inputGrads' }, { free: 'all_gather_into_tensor output' }];
    return { outputs: [tensor(shape, x!.dtype)], forwardSteps, saves: () => [], backward: () => ({ inputGrads: ['new'], steps: backwardSteps }) };
  },
};

/** Attributes of {@link globalViewOp}. */
export interface GlobalViewAttrs {
  readonly shape: readonly Dim[];
}

/**
 * A DTensor's global shape over its local shard: what Python code reading `.shape` of a
 * sharded DTensor sees (the sequence length of a sequence-parallel hidden state). Metadata
 * only: a view of the local storage that carries no gradient, for ops that read only shapes
 * (the causal mask, the rotary tables).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { globalViewOp } from 'vram-ts/internals';
 * const r = globalViewOp.apply([tensor([1, 4, 64], 'bfloat16')], { shape: [1, 8, 64] }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.outputs[0]!.shape, r.alias); // [ 1, 8, 64 ] view
 * ```
 */
export const globalViewOp: OpRule<GlobalViewAttrs> = {
  name: 'dtensor_global_view',
  arity: 1,
  apply([x], attrs) {
    return {
      outputs: [tensor(attrs.shape, x!.dtype)],
      alias: 'view',
      nonDifferentiableOutputs: [0],
      saves: () => [],
      backward: () => ({ inputGrads: ['none'] }),
    };
  },
};

/** Attributes of {@link vocabEmbeddingOp}. */
export interface VocabEmbeddingAttrs {
  /** This rank's rows of the table (torch.chunk of the vocabulary). */
  readonly num: number;
  readonly dim: number;
  readonly tiedWeight?: string;
  /**
   * The whole vocabulary: DTensor's embedding backward (Replicate grad_output and ids) makes
   * the weight's gradient Replicate, the whole [vocab, dim] table on every rank (measured,
   * torch 2.13), and the optimizer redistributes it to the local rows at the step. Default
   * `num` (a gradient of the local rows). Not for a tied table (the LM head's Shard(0)
   * gradient comes first and the embedding's is added into it).
   */
  readonly wholeNum?: number;
  /** Rows the weight's storage holds (⌈vocab/t⌉ on a short rank: DTensor's padded shard, narrowed). Default `num`. */
  readonly storageRows?: number;
}

/**
 * A vocab-parallel embedding (RowwiseParallel on nn.Embedding: weight Shard(0), ids
 * Replicate): DTensor's `_MaskPartial` builds the out-of-range mask (bool, one per id) and the
 * shifted ids (`ids.clone() - offset`, then masked in place), looks the local rows up into a
 * Partial [..., dim] result and zeroes the masked rows in place before the reduction (the next
 * op: {@link allReduceOp} or {@link reduceScatterOp}). Autograd keeps the replicated ids;
 * embedding_dense_backward re-masks them (the same two temporaries) and makes the weight
 * gradient: with `wholeNum`, the whole table's (DTensor makes it Replicate).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { vocabEmbeddingOp } from 'vram-ts/internals';
 * const r = vocabEmbeddingOp.apply([tensor([1, 8], 'int64')], { num: 128, dim: 64, wholeNum: 256 }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.params![0]!.spec.shape, r.params![0]!.gradSpec!.shape, r.outputs[0]!.shape); // [ 128, 64 ] [ 256, 64 ] [ 1, 8, 64 ]
 * ```
 */
export const vocabEmbeddingOp: OpRule<VocabEmbeddingAttrs> = {
  name: 'embedding (vocab-parallel)',
  arity: 1,
  apply([ids], attrs, ctx) {
    if (ids!.dtype !== 'int64' && ids!.dtype !== 'int32')
      fail('bad-dtype', 'embedding takes integer ids', { path: ctx.path, expected: 'int64', received: ids!.dtype });
    const num = positiveInt(attrs.num, 'num', ctx);
    const dim = positiveInt(attrs.dim, 'dim', ctx);
    const weight = tensor([num, dim], ctx.paramDtype);
    const grad =
      attrs.wholeNum !== undefined && attrs.wholeNum !== num ? { gradSpec: tensor([positiveInt(attrs.wholeNum, 'wholeNum', ctx), dim], ctx.paramDtype) } : {};
    const padded =
      attrs.storageRows !== undefined && attrs.storageRows !== num
        ? { storageSpec: tensor([positiveInt(attrs.storageRows, 'storageRows', ctx), dim], ctx.paramDtype) }
        : {};
    const n = product(ids!.shape);
    const mask = bytesOf(n, 'bool');
    const idBytes = bytesOf(n, ids!.dtype);
    const masking: KernelStep[] = [
      { alloc: 'mask', bytes: mask },
      { alloc: 'ids.clone()', bytes: idBytes },
      { alloc: 'masked ids', bytes: idBytes },
      { free: 'ids.clone()' },
    ];
    return {
      outputs: [tensor([...ids!.shape, dim], ctx.paramDtype)],
      params: [
        attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight, ...grad, ...padded },
      ],
      forwardSteps: [...masking, { results: 'outputs' }, { free: 'masked ids' }, { free: 'mask' }],
      saves: (needs) => (needs.params ? [{ input: 0 }] : []),
      backward: () => ({ inputGrads: ['none'], steps: [...masking, { results: 'paramGrads' }, { free: 'masked ids' }, { free: 'mask' }] }),
    };
  },
};

/**
 * log_softmax over a class dimension sharded across ranks, under `loss_parallel()`
 * (torch/distributed/tensor/parallel/loss.py `_log_softmax`): amax and the sum of exponentials
 * are all-reduced ([N, 1] each); `shifted = x - max` and `exp(shifted)` are live together, then
 * `shifted` and the result. Autograd keeps the (local) result. Its backward handler does no
 * work (`grad.to(dtype)`): the nll_loss backward already computed the log_softmax gradient.
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { parallelLogSoftmaxOp } from 'vram-ts/internals';
 * const r = parallelLogSoftmaxOp.apply([tensor([7, 128])], {}, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'float32', path: [] });
 * console.log(r.forwardSteps!.length); // 15
 * ```
 */
export const parallelLogSoftmaxOp: OpRule<Record<string, never>> = {
  name: 'log_softmax (loss_parallel)',
  arity: 1,
  apply([x]) {
    const out = tensor(x!.shape, x!.dtype);
    const bytes = specBytes(out);
    // The [N, 1] reductions: amax and its all-reduce, the sum of exponentials and its all-reduce, its log.
    const row = specBytes(tensor([...x!.shape.slice(0, -1), 1], x!.dtype));
    return {
      outputs: [out],
      forwardSteps: [
        { alloc: 'amax', bytes: row },
        { alloc: 'all_reduce(amax)', bytes: row },
        { free: 'amax' },
        { alloc: 'x - max', bytes },
        { alloc: 'exp(x - max)', bytes },
        { alloc: 'sum', bytes: row },
        { free: 'exp(x - max)' },
        { alloc: 'all_reduce(sum)', bytes: row },
        { free: 'sum' },
        { alloc: 'log', bytes: row },
        { results: 'outputs' },
        { free: 'x - max' },
        { free: 'all_reduce(amax)' },
        { free: 'all_reduce(sum)' },
        { free: 'log' },
      ],
      saves: () => [{ output: 0 }],
      backward: () => ({ inputGrads: ['alias'] }),
    };
  },
};

/**
 * nll_loss (mean) over sharded log-probabilities under `loss_parallel()`: the forward gathers
 * each row's target through a `_MaskPartial` of the targets ([N] tensors only); the backward
 * (`_nll_loss_and_log_softmax_backward`) computes log_softmax's gradient too:
 * `(zeros_like(x) with -1 at local targets + exp(x)) * grad` — the zeros, exp(x) and their sum
 * live together before the product, the input's gradient.
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { parallelNllLossOp } from 'vram-ts/internals';
 * const r = parallelNllLossOp.apply([tensor([7, 128]), tensor([7], 'int64')], {}, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'float32', path: [] });
 * console.log(r.backward!({ inputs: [true, false], params: false }).steps!.length); // 7
 * ```
 */
export const parallelNllLossOp: OpRule<Record<string, never>> = {
  name: 'nll_loss (loss_parallel)',
  arity: 2,
  apply([input, target]) {
    const bytes = specBytes(input!);
    const rows = product(target!.shape);
    return {
      outputs: [tensor([], input!.dtype)],
      nonDifferentiableOutputs: [],
      forwardSteps: [
        { alloc: 'safe target', bytes: bytesOf(rows, target!.dtype) },
        { alloc: 'target mask', bytes: bytesOf(rows, 'bool') },
        { alloc: 'masked target', bytes: bytesOf(rows, target!.dtype) },
        { alloc: 'gathered', bytes: bytesOf(rows, input!.dtype) },
        { alloc: 'all_reduce(gathered)', bytes: bytesOf(rows, input!.dtype) },
        { free: 'gathered' },
        { results: 'outputs' },
        { free: 'safe target' },
        { free: 'target mask' },
        { free: 'masked target' },
        { free: 'all_reduce(gathered)' },
      ],
      saves: () => [{ input: 1 }, { extra: tensor([], input!.dtype), label: 'total_weight' }],
      backward: () => ({
        inputGrads: ['new', 'none'],
        steps: [
          { alloc: 'zeros_like(x)', bytes },
          { alloc: 'exp(x)', bytes },
          { alloc: 'zeros + exp(x)', bytes },
          { free: 'exp(x)' },
          { results: 'inputGrads' },
          { free: 'zeros + exp(x)' },
          { free: 'zeros_like(x)' },
        ],
      }),
    };
  },
};
