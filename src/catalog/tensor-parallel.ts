import { fail, VramError, type VramIssue } from '../errors.js';
import type { Layer } from '../nn/types.js';

/**
 * Tensor parallelism of a decoder as PyTorch DTensor applies it (torchtitan's Llama plan,
 * the Hugging Face `base_model_tp_plan`): ColwiseParallel on q/k/v/gate/up, RowwiseParallel
 * on o/down, the token embedding vocab-parallel (RowwiseParallel with Replicate ids), the LM
 * head ColwiseParallel (its logits gathered, or kept sharded under `loss_parallel()`), norms
 * replicated, and with sequence parallelism SequenceParallel norms between all-gathers and
 * reduce-scatters on the sequence dimension. The builder builds one rank's model.
 */
export interface TensorParallelOptions {
  /** Ranks in the tensor-parallel group (t); heads, key/value heads and the MLP's inner size must divide by it. */
  readonly size: number;
  /**
   * Which rank of the group (default 0). Ranks differ only where the vocabulary does not
   * divide: DTensor shards with torch.chunk (⌈V/t⌉ rows per rank, the last ones fewer, no
   * padding kept in the parameter).
   */
  readonly rank?: number;
  /**
   * Sequence parallelism (default false): the norms and residual stream hold s/t positions
   * (SequenceParallel), attention and MLP inputs are all-gathered (PrepareModuleInput), their
   * RowwiseParallel outputs reduce-scattered (`output_layouts=Shard(1)`). The sequence length
   * must divide by t.
   */
  readonly sequenceParallel?: boolean;
  /**
   * `loss_parallel()` (default false): the LM head keeps its logits sharded over the
   * vocabulary (`output_layouts=Shard(-1), use_local_output=False`) and the cross entropy runs
   * on the local [N, V/t] shard; without it the logits are all-gathered to [B, S, V] first.
   */
  readonly lossParallel?: boolean;
  /**
   * A tied config (`tie_word_embeddings`): `parallelize_module` gives embed_tokens and lm_head
   * each its own DTensor parameter, which breaks the tie (measured, torch 2.13: two local
   * tables that then train apart, the embedding's gradient the whole table). Default false:
   * the model as the plan leaves it. true: `model.lm_head.weight =
   * model.model.embed_tokens.weight` again after parallelizing (one local table; the LM head's
   * Shard(0) gradient comes first and the embedding's is added into it: a local gradient).
   * Ignored for an untied config.
   */
  readonly retie?: boolean;
}

export type { TensorParallelBuild } from '../nn/types.js';

/**
 * The rows rank `rank` of `size` holds of a dimension of `n` sharded as DTensor does
 * (`torch.chunk`: ⌈n/size⌉ per rank, the last ranks fewer, possibly none).
 *
 * @example
 * ```ts
 * import { chunkRows } from 'vram-ts/internals';
 * console.log(chunkRows(10, 4, 0), chunkRows(10, 4, 3), chunkRows(151936, 2, 1)); // 3 1 75968
 * ```
 */
export function chunkRows(n: number, size: number, rank: number): number {
  const chunk = Math.ceil(n / size);
  return Math.max(0, Math.min(chunk, n - rank * chunk));
}

/** The sizes one rank computes with. */
export interface LocalDecoderSizes {
  readonly heads: number;
  readonly kvHeads: number;
  readonly intermediate: number;
  readonly vocab: number;
}

/**
 * Checks tensor-parallel options against a decoder's sizes and returns the rank's local ones:
 * heads, key/value heads and the MLP's inner size must divide by the size (Hugging Face's
 * attention reshapes with its local head count; RowwiseParallel's `from_local` assumes even
 * shards), the vocabulary is torch.chunk'ed (uneven allowed). Every
 * problem is a VramError issue under `path` (`['options', 'tensorParallel', …]`).
 *
 * @example
 * ```ts
 * import { localDecoderSizes } from 'vram-ts/internals';
 * const local = localDecoderSizes({ heads: 14, kvHeads: 2, intermediate: 4864, vocab: 151936 }, { size: 2 });
 * console.log(local.heads, local.kvHeads, local.intermediate, local.vocab); // 7 1 2432 75968
 * ```
 */
export function localDecoderSizes(
  whole: LocalDecoderSizes,
  tp: TensorParallelOptions,
  path: readonly (string | number)[] = ['options', 'tensorParallel'],
): LocalDecoderSizes {
  const issues: VramIssue[] = [];
  const size = tp.size;
  if (!Number.isSafeInteger(size) || size < 1)
    fail('bad-option', 'the tensor-parallel size must be a positive integer', { path: [...path, 'size'], expected: 'integer >= 1', received: String(size) });
  const rank = tp.rank ?? 0;
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= size)
    fail('bad-option', 'the tensor-parallel rank must be below the size', { path: [...path, 'rank'], expected: `0 .. ${size - 1}`, received: String(rank) });
  for (const key of ['sequenceParallel', 'lossParallel', 'retie'] as const) {
    if (tp[key] !== undefined && typeof tp[key] !== 'boolean')
      issues.push({
        path: [...path, key],
        code: 'bad-option',
        message: `${key} must be true or false`,
        expected: 'true | false',
        received: JSON.stringify(tp[key]),
      });
  }
  const known = ['size', 'rank', 'sequenceParallel', 'lossParallel', 'retie'];
  for (const key of Object.keys(tp))
    if (!known.includes(key))
      issues.push({ path: [...path, key], code: 'unknown-key', message: `unknown key ${key}`, expected: known.join(' | '), received: key });
  if (whole.heads % size !== 0)
    issues.push({
      path: [...path, 'size'],
      code: 'bad-option',
      message: `the attention heads (${whole.heads}) must divide by the tensor-parallel size`,
      expected: `a divisor of ${whole.heads}`,
      received: String(size),
    });
  if (whole.kvHeads % size !== 0)
    issues.push({
      path: [...path, 'size'],
      code: 'bad-option',
      message: `the key/value heads (${whole.kvHeads}) must divide by the tensor-parallel size (ColwiseParallel shards k_proj/v_proj by rows; replicating kv heads is not modelled)`,
      expected: `a divisor of ${whole.kvHeads}`,
      received: String(size),
    });
  // RowwiseParallel wraps down_proj's local input with from_local(Shard(-1), run_check=False),
  // which takes the global size for local × t: an uneven MLP fails DTensor's sharding
  // propagation (measured, torch 2.13). The vocabulary may be uneven (no from_local on it).
  if (whole.intermediate % size !== 0)
    issues.push({
      path: [...path, 'size'],
      code: 'bad-option',
      message: `the MLP's inner size (${whole.intermediate}) must divide by the tensor-parallel size (RowwiseParallel's from_local assumes even shards)`,
      expected: `a divisor of ${whole.intermediate}`,
      received: String(size),
    });
  const intermediate = chunkRows(whole.intermediate, size, rank);
  const vocab = chunkRows(whole.vocab, size, rank);
  if (intermediate === 0 || vocab === 0)
    issues.push({
      path: [...path, 'rank'],
      code: 'bad-option',
      message: 'this rank holds no rows of the MLP or the vocabulary',
      expected: 'a rank with rows',
      received: String(rank),
    });
  if (issues.length > 0) throw new VramError(issues);
  return { heads: whole.heads / size, kvHeads: whole.kvHeads / size, intermediate, vocab };
}

/**
 * The tensor-parallel size a model was built for (1 when it was not).
 *
 * @example
 * ```ts
 * import { estimate, llm } from 'vram-ts';
 * import { builtTensorParallel } from 'vram-ts/internals';
 * console.log(builtTensorParallel(llm('Qwen2.5-0.5B'))); // 1
 * // Qwen2.5-0.5B ties its embeddings: re-tied after parallelize_module, one local table.
 * const rank = llm('Qwen2.5-0.5B', { tensorParallel: { size: 2, sequenceParallel: true, retie: true } });
 * console.log(builtTensorParallel(rank), estimate(rank, { input: [1, 512], parallel: { engine: 'fsdp2', dp: 4, tp: 2 } }).params.total); // 2 247038336
 * ```
 */
export function builtTensorParallel(model: Layer): number {
  return model.kind === 'module' ? (model.meta?.tensorParallel?.size ?? 1) : 1;
}
