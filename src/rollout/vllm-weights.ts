/**
 * The weights as vLLM loads them on one tensor-parallel rank ("Model loading took X GiB",
 * `model_runner.model_memory_usage`): every parameter of the checkpoint in the model's dtype,
 * sharded the way vLLM's parallel layers shard it (vllm/model_executor/layers/linear.py,
 * vocab_parallel_embedding.py, fused_moe/layer.py), plus the rotary embedding's `cos_sin_cache`
 * (vllm/model_executor/layers/rotary_embedding: `[max_position, rotary_dim]` in the model's
 * dtype, one per distinct rotary configuration).
 */
import { fail } from '../errors.js';
import { evaluate } from '../sym/index.js';
import { DTYPE_BITS, type DType } from '../tensor/dtype.js';
import { numel } from '../tensor/spec.js';
import type { IR, IRTensor } from '../trace/ir.js';
import type { ModelMeta, ModuleLayer } from '../nn/types.js';
import { declaredBlocks } from '../nn/repeated.js';
import { traceModel } from '../estimate.js';
import { reducedBlocks } from '../trace/blocks.js';

/** How one parameter is split over the tensor-parallel ranks. */
type Shard = 'column' | 'kv' | 'row' | 'vocab' | 'replicated';

/** `DEFAULT_VOCAB_PADDING_SIZE` (vocab_parallel_embedding.py): the vocabulary is padded to a multiple of 64 rows. */
const VOCAB_PADDING = 64;

const COLUMN = /(^|\.)(q_proj|gate_proj|up_proj|gate_up_proj|q_b_proj|kv_b_proj|c_fc|c_attn|qkv_proj|w1|w3)\.(weight|bias)$/;
const KV = /(^|\.)(k_proj|v_proj)\.(weight|bias)$/;
const ROW_WEIGHT = /(^|\.)(o_proj|down_proj|c_proj|w2)\.weight$/;
const ROW_BIAS = /(^|\.)(o_proj|down_proj|c_proj|w2)\.bias$/;
const VOCAB = /(^|\.)(embed_tokens|lm_head|wte|wpe)\.weight$/;
const EXPERTS = /\.experts\./;
const REPLICATED = /(norm|ln_\d|ln_f|layernorm)[^.]*\.(weight|bias)$|(^|\.)(gate|q_a_proj|kv_a_proj_with_mqa)\.weight$|e_score_correction_bias$/;

/** Which vLLM layer a parameter lands in, by its Hugging Face name. */
function shardOf(key: string): Shard {
  if (EXPERTS.test(key)) return 'column';
  if (VOCAB.test(key)) return 'vocab';
  if (KV.test(key)) return 'kv';
  if (COLUMN.test(key)) return 'column';
  if (ROW_WEIGHT.test(key)) return 'row';
  if (ROW_BIAS.test(key) || REPLICATED.test(key)) return 'replicated';
  return fail('not-modelled', "this parameter's place in vLLM's parallel layers is not known", { path: ['model', key] });
}

function elements(t: IRTensor): number {
  return evaluate(numel(t.spec), {});
}

/** One parameter's bytes on rank 0 of `tp`. */
function rankBytes(t: IRTensor, meta: ModelMeta, tp: number, dtypeBytes: number | undefined): number {
  const key = t.key ?? '';
  const all = elements(t);
  const bytes = dtypeBytes ?? DTYPE_BITS[t.spec.dtype] / 8;
  switch (shardOf(key)) {
    case 'replicated':
      return all * bytes;
    case 'vocab': {
      const rows = t.spec.shape[0] as number;
      const padded = Math.ceil(rows / VOCAB_PADDING) * VOCAB_PADDING;
      // VocabParallelEmbedding: divide(num_embeddings_padded, tp_size), which asserts that it divides.
      if (padded % tp !== 0)
        fail('bad-option', `vLLM's vocab-parallel embedding splits the padded vocabulary (${padded}) evenly: the tensor parallel size must divide it`, {
          path: ['tensorParallelSize'],
          received: String(tp),
        });
      return (padded / tp) * (all / rows) * bytes;
    }
    case 'kv':
      // QKVParallelLinear: max(1, kv_heads // tp) KV heads per rank (replicated when fewer heads than ranks).
      return (all / meta.kvHeads) * Math.max(1, Math.floor(meta.kvHeads / tp)) * bytes;
    case 'column':
    case 'row':
      if (/(^|\.)qkv_proj\./.test(key)) {
        const q = meta.heads * meta.headDim;
        const kv = meta.kvHeads * meta.headDim;
        const perRank = q / tp + 2 * Math.max(1, Math.floor(meta.kvHeads / tp)) * meta.headDim;
        return (all / (q + 2 * kv)) * perRank * bytes;
      }
      return (all / tp) * bytes;
  }
}

/** What the weights cost on one rank, and its parts. */
export interface VllmWeights {
  /** "Model loading took X GiB": parameters plus rotary caches, in bytes. */
  readonly bytes: number;
  readonly parameters: number;
  readonly rotaryCaches: number;
  /** Each decoder layer's parameters on this rank (`model.layers.N.`), for `cpu_offload_gb`. */
  readonly layers: readonly number[];
}

/**
 * The weights on rank 0 of `tensorParallelSize` as vLLM loads them, from the traced model's
 * parameters (a tied LM head once) and rotary buffers, in the parameters' dtype or `--dtype`'s
 * `dtypeBytes`. A parameter vLLM's layers would place
 * somewhere this rule does not know, or a quantized one, is an error rather than a guess.
 *
 * @example
 * ```ts
 * import { llm, traceModel } from 'vram-ts';
 * import { vllmWeights } from 'vram-ts/internals';
 * const model = llm('qwen2.5-0.5b');
 * const w = vllmWeights(traceModel(model, { input: [1, 1], mode: 'inference' }), model.meta!, 1);
 * console.log(w.parameters); // 988065536
 * ```
 */
export function vllmWeights(
  ir: IR,
  meta: ModelMeta,
  tensorParallelSize: number,
  dtypeBytes?: number,
  repeated?: { readonly prefix: string; readonly count: number },
): VllmWeights {
  const seen = new Set<number>();
  let parameters = 0;
  const layers: number[] = [];
  for (const t of ir.tensors) {
    if (t.role !== 'param' || seen.has(t.storage)) continue;
    seen.add(t.storage);
    if (!['bfloat16', 'float16', 'float32'].includes(t.spec.dtype))
      fail('not-modelled', `vLLM's ${t.spec.dtype} weight kernels are not modelled: give measured.weightsBytes`, { path: ['model', t.key ?? ''] });
    const bytes = rankBytes(t, meta, tensorParallelSize, dtypeBytes);
    // A reduced trace (three of `count` identical blocks): the middle block's parameters stand for count − 2 blocks.
    const middle = repeated !== undefined && (t.key ?? '').startsWith(`${repeated.prefix}1.`);
    parameters += middle ? bytes * (repeated.count - 2) : bytes;
    const layer = /(^|\.)layers\.(\d+)\./.exec(t.key ?? '');
    if (layer !== null) layers[Number(layer[2])] = (layers[Number(layer[2])] ?? 0) + bytes;
  }
  if (repeated !== undefined && layers.length === 3) layers.splice(1, 1, ...Array.from({ length: repeated.count - 2 }, () => layers[1]!));
  const rotaryKeys = new Set<string>();
  let rotaryCaches = 0;
  for (const t of ir.tensors) {
    if (t.role !== 'buffer' || !/rotary_emb\.inv_freq$/.test(t.key ?? '')) continue;
    const rotaryDim = 2 * elements(t);
    const key = `${t.key?.replace(/layers\.\d+\./, '')}`;
    if (rotaryKeys.has(key)) continue;
    rotaryKeys.add(key);
    const positions = meta.maxPositions ?? fail('not-modelled', "the rotary cache needs the model's max_position_embeddings", { path: ['model'] });
    rotaryCaches += positions * rotaryDim * (dtypeBytes ?? DTYPE_BITS[(ir.tensors.find((p) => p.role === 'param')?.spec.dtype ?? 'bfloat16') as DType] / 8);
  }
  return { bytes: parameters + rotaryCaches, parameters, rotaryCaches, layers };
}

/**
 * `cpu_offload_gb` (vllm/model_executor/models/utils.py `make_layers` → `maybe_offload_to_cpu`): whole
 * decoder layers, from the first, move to pinned CPU memory until the offloaded bytes reach the
 * budget (a layer starts offloading while the running total is below it).
 *
 * @example
 * ```ts
 * import { offloadedBytes } from 'vram-ts/internals';
 * console.log(offloadedBytes([10, 10, 10], 15)); // 20
 * ```
 */
export function offloadedBytes(layers: readonly number[], budgetBytes: number): number {
  let offloaded = 0;
  for (const bytes of layers) {
    if (offloaded >= budgetBytes) break;
    offloaded += bytes;
  }
  return offloaded;
}

/**
 * {@link vllmWeights} of a model: a model of identical repeated blocks is traced with three of them
 * (as estimate does; trace/blocks.ts checks the shape) and the middle one counted over.
 *
 * @example
 * ```ts
 * import { llm } from 'vram-ts';
 * import { vllmModelWeights } from 'vram-ts/internals';
 * const model = llm('qwen2.5-0.5b');
 * console.log(vllmModelWeights(model, model.meta!, 1).layers.length); // 24
 * ```
 */
export function vllmModelWeights(model: ModuleLayer, meta: ModelMeta, tensorParallelSize: number, dtypeBytes?: number): VllmWeights {
  const repeated = declaredBlocks(model);
  if (repeated !== undefined && repeated.count > 3) {
    const reduced: ModuleLayer = { ...model, body: repeated.withCount(3).body };
    const ir = traceModel(reduced, { input: [1, 1], mode: 'inference' });
    if (reducedBlocks(ir, repeated.prefix, repeated.count) !== null)
      return vllmWeights(ir, meta, tensorParallelSize, dtypeBytes, { prefix: repeated.prefix, count: repeated.count });
  }
  return vllmWeights(traceModel(model, { input: [1, 1], mode: 'inference' }), meta, tensorParallelSize, dtypeBytes);
}
