import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { validate } from '../validate.js';
import { boolean, integer, number, object, oneOf } from '../validate.js';

// The closed forms' inputs are bounded so that every figure stays a finite double: parameters are a
// count (at most 2^53 - 1), GPUs and nodes at most a million, factors at most a million.
const PARAMS = number(0, Number.MAX_SAFE_INTEGER);
const GPUS = integer(1, 1_000_000);
const FACTOR = number(0, 1_000_000);

/**
 * The published closed forms for distributed training memory, reproduced to the byte so that
 * vram-ts's per-rank simulation can be set beside them (`vram-ts compat`): the ZeRO paper's
 * model-state table, DeepSpeed's `estimate_zero2/3_model_states_mem_needs` and Megatron-LM's
 * `theoretical_memory_usage.py`, each read at a named commit (test/fixtures/distributed/
 * estimators.json runs the upstream functions; tools/compat/distributed_estimators.py makes it).
 */

/** Where each closed form was read. */
export const CLOSED_FORM_SOURCES = deepFreeze({
  zeroPaper: 'Rajbhandari et al., ZeRO (SC 2020, arXiv 1910.02054), section 5 and Figure 1',
  deepspeed: 'deepspeedai/DeepSpeed edaa7221 deepspeed/runtime/zero/stage_1_and_2.py l.3081-3098, stage3.py l.3744-3780',
  megatron: 'NVIDIA/Megatron-LM d98e8a64 megatron/training/theoretical_memory_usage.py',
});

/** The ZeRO paper's bytes per GPU of mixed-precision Adam model states (2Ψ weights, 2Ψ gradients, KΨ optimizer state). */
export interface ZeroPaperFigures {
  readonly baseline: number;
  readonly stage1: number;
  readonly stage2: number;
  readonly stage3: number;
}

/**
 * The ZeRO paper's model states per GPU: baseline data parallelism (2+2+K)Ψ, P_os 4Ψ + KΨ/N,
 * P_os+g 2Ψ + (2+K)Ψ/N, P_os+g+p (2+2+K)Ψ/N (K = 12: fp32 master, momentum, variance).
 *
 * @example
 * ```ts
 * import { zeroPaper } from 'vram-ts';
 * const z = zeroPaper({ params: 7.5e9, gpus: 64 });
 * console.log(z.baseline / 1e9, z.stage1 / 1e9, z.stage2 / 1e9, z.stage3 / 1e9); // 120 31.40625 16.640625 1.875
 * ```
 */
export function zeroPaper(options: { readonly params: number; readonly gpus: number; readonly k?: number }): ZeroPaperFigures {
  validate(options, object({ fields: { params: PARAMS, gpus: GPUS, k: FACTOR }, required: ['params', 'gpus'] }), ['zeroPaper']);
  const { params: p, gpus: n } = options;
  const k = options.k ?? 12;
  return { baseline: (2 + 2 + k) * p, stage1: 4 * p + (k * p) / n, stage2: 2 * p + ((2 + k) * p) / n, stage3: ((2 + 2 + k) * p) / n };
}

/** DeepSpeed's estimate, bytes: `cpu` per node (host RAM), `gpu` per GPU. */
export interface DeepSpeedEstimate {
  readonly cpu: number;
  readonly gpu: number;
}

/**
 * DeepSpeed's `estimate_zero2_model_states_mem_needs` as the code computes it (not as its docs
 * print it: PR #5099 changed the GPU term to 2Ψ + 18Ψ/N). Without offload the GPU holds
 * 2Ψ + int(18Ψ/N); offloading the optimizer leaves 2Ψ.
 *
 * @example
 * ```ts
 * import { deepspeedZero2 } from 'vram-ts';
 * console.log(deepspeedZero2({ totalParams: 7.5e9, gpusPerNode: 8, nodes: 8, cpuOffload: false }).gpu); // 17109375000
 * ```
 */
export function deepspeedZero2(options: {
  readonly totalParams: number;
  readonly gpusPerNode?: number;
  readonly nodes?: number;
  readonly cpuOffload?: boolean;
  readonly additionalBufferFactor?: number;
}): DeepSpeedEstimate {
  validate(
    options,
    object({
      fields: { totalParams: PARAMS, gpusPerNode: GPUS, nodes: GPUS, cpuOffload: boolean, additionalBufferFactor: FACTOR },
      required: ['totalParams'],
    }),
    ['deepspeedZero2'],
  );
  const p = options.totalParams;
  const perNode = options.gpusPerNode ?? 1;
  const n = (options.nodes ?? 1) * perNode;
  const f = options.additionalBufferFactor ?? 1.5;
  if (options.cpuOffload ?? true) return { cpu: Math.trunc(p * Math.max(4 * n, 16) * f), gpu: Math.trunc(2 * p) };
  return { cpu: Math.trunc(p * 4 * perNode * f), gpu: Math.trunc(2 * p + Math.trunc((18 * p) / n)) };
}

/**
 * DeepSpeed's `estimate_zero3_model_states_mem_needs`: the largest module's own parameters
 * gathered with their gradients (4 B each) plus int(18Ψ/N) without offload, int(2Ψ/N) with the
 * optimizer offloaded, nothing more with parameters offloaded too. `largestLayerMemory` is the
 * 4·LL term itself.
 *
 * @example
 * ```ts
 * import { deepspeedZero3 } from 'vram-ts';
 * const t5 = deepspeedZero3({ totalParams: 2851e6, largestLayerParams: 32e6, gpusPerNode: 8, cpuOffload: false });
 * console.log((t5.gpu / 2 ** 30).toFixed(2)); // 6.09
 * ```
 */
export function deepspeedZero3(options: {
  readonly totalParams: number;
  readonly largestLayerParams: number;
  readonly gpusPerNode?: number;
  readonly nodes?: number;
  readonly cpuOffload?: boolean;
  readonly cpuOffloadParams?: boolean;
  readonly zeroInit?: boolean;
  readonly additionalBufferFactor?: number;
}): DeepSpeedEstimate & { readonly largestLayerMemory: number } {
  validate(
    options,
    object({
      fields: {
        totalParams: PARAMS,
        largestLayerParams: PARAMS,
        gpusPerNode: GPUS,
        nodes: GPUS,
        cpuOffload: boolean,
        cpuOffloadParams: boolean,
        zeroInit: boolean,
        additionalBufferFactor: FACTOR,
      },
      required: ['totalParams', 'largestLayerParams'],
    }),
    ['deepspeedZero3'],
  );
  const p = options.totalParams;
  const g = options.gpusPerNode ?? 1;
  const nodes = options.nodes ?? 1;
  const n = nodes * g;
  const gf = 1 / nodes;
  const f = options.additionalBufferFactor ?? 1.5;
  const zeroInit = options.zeroInit ?? true;
  const lm = 4 * options.largestLayerParams;
  if ((options.cpuOffload ?? true) && (options.cpuOffloadParams ?? true)) {
    return { gpu: Math.trunc(lm), cpu: Math.trunc(zeroInit ? p * 18 * gf * f : p * Math.max(4 * g, 18 * gf) * f), largestLayerMemory: lm };
  }
  if (options.cpuOffload ?? true) {
    return {
      gpu: Math.trunc(lm + Math.trunc((2 * p) / n)),
      cpu: Math.trunc(zeroInit ? p * 16 * gf * f : p * Math.max(4 * g, 16 * gf) * f),
      largestLayerMemory: lm,
    };
  }
  return {
    gpu: Math.trunc(lm + Math.trunc((18 * p) / n)),
    cpu: Math.trunc(zeroInit ? options.largestLayerParams * 4 * g * f : p * 4 * g * f),
    largestLayerMemory: lm,
  };
}

/** The arguments `theoretical_memory_usage.py` reads (Megatron-LM's flag names in camelCase). */
export interface MegatronArgs {
  readonly numLayers: number;
  readonly hiddenSize: number;
  readonly numAttentionHeads: number;
  /** `--kv-channels` (default hidden / heads). */
  readonly kvChannels?: number;
  /** `--ffn-hidden-size` (default 4h; with SwiGLU int((4h·2/3)/64)·64). */
  readonly ffnHiddenSize?: number;
  /** `--group-query-attention` with `--num-query-groups`. */
  readonly numQueryGroups?: number;
  readonly swiglu?: boolean;
  readonly normalization?: 'LayerNorm' | 'RMSNorm';
  readonly untieEmbeddingsAndOutputWeights?: boolean;
  /** `padded_vocab_size`: the vocabulary padded to a multiple of 128·tp (use {@link megatronPaddedVocab}). */
  readonly paddedVocabSize: number;
  readonly tensorModelParallelSize?: number;
  readonly pipelineModelParallelSize?: number;
  readonly virtualPipelineModelParallelSize?: number;
  readonly dataParallelSize: number;
  readonly useDistributedOptimizer?: boolean;
  readonly seqLength: number;
  readonly microBatchSize: number;
  readonly sequenceParallel?: boolean;
  readonly recomputeGranularity?: 'selective' | 'full';
}

/**
 * Megatron's `padded_vocab_size`: the vocabulary rounded up to a multiple of `divisibleBy`·tp (default 128).
 *
 * @example
 * ```ts
 * import { megatronPaddedVocab } from 'vram-ts';
 * console.log(megatronPaddedVocab(50257, 2)); // 50432
 * ```
 */
export function megatronPaddedVocab(vocab: number, tp: number, divisibleBy = 128): number {
  validate(vocab, integer(1, 2 ** 40), ['megatronPaddedVocab', 'vocab']);
  validate(tp, GPUS, ['megatronPaddedVocab', 'tp']);
  validate(divisibleBy, integer(1, 1_000_000), ['megatronPaddedVocab', 'divisibleBy']);
  return Math.ceil(vocab / (divisibleBy * tp)) * (divisibleBy * tp);
}

/** Megatron's theoretical memory of the most loaded rank, bytes; `total` as its report prints it, MiB. */
export interface MegatronFigures {
  readonly weightAndOptimizer: number;
  readonly activation: number;
  /** Parameters on the most loaded shard (first pipeline stage, one tensor-parallel rank) as its GPT counts them. */
  readonly parametersOnShard: number;
  /** Which activation formula the report used. */
  readonly path: 'sp' | 'without-sp';
  /** report_theoretical_memory's (weight and optimizer, activation, total) in MiB, printed as "MB". */
  readonly reportMiB: readonly [number, number, number];
}

/** A model size Megatron takes (layers, widths, heads, the vocabulary, tokens): at most 2^24, so that its products stay exact. */
const SIZE = integer(1, 2 ** 24);

/** megatronTheoretical's arguments as a check (the names of Megatron's argparse options). */
const MEGATRON_ARGS = object({
  fields: {
    numLayers: integer(1, 100_000),
    hiddenSize: SIZE,
    numAttentionHeads: SIZE,
    kvChannels: SIZE,
    ffnHiddenSize: SIZE,
    numQueryGroups: SIZE,
    swiglu: boolean,
    normalization: oneOf(['LayerNorm', 'RMSNorm']),
    untieEmbeddingsAndOutputWeights: boolean,
    paddedVocabSize: SIZE,
    tensorModelParallelSize: GPUS,
    pipelineModelParallelSize: GPUS,
    virtualPipelineModelParallelSize: GPUS,
    dataParallelSize: GPUS,
    useDistributedOptimizer: boolean,
    seqLength: SIZE,
    microBatchSize: SIZE,
    sequenceParallel: boolean,
    recomputeGranularity: oneOf(['selective', 'full']),
  },
  required: ['numLayers', 'hiddenSize', 'numAttentionHeads', 'paddedVocabSize', 'dataParallelSize', 'seqLength', 'microBatchSize'],
});

/**
 * What Megatron refuses before it reports (TransformerConfig.__post_init__, arguments.py
 * validate_args): heads and query groups split evenly over the tensor-parallel ranks, heads in
 * whole query groups, the hidden size in whole heads (without --kv-channels), the layers evenly
 * over the pipeline stages.
 */
function megatronRefusals(args: MegatronArgs): void {
  const t = args.tensorModelParallelSize ?? 1;
  const heads = args.numAttentionHeads;
  const groups = args.numQueryGroups ?? heads;
  const refuse = (field: keyof MegatronArgs, message: string, expected: string) =>
    fail('bad-option', message, { path: ['megatronTheoretical', field], expected, received: String(args[field]) });
  if (heads % t !== 0) refuse('numAttentionHeads', 'num_attention_heads must be a multiple of tensor_model_parallel_size', `a multiple of ${t}`);
  if (groups % t !== 0) refuse('numQueryGroups', 'num_query_groups must be a multiple of tensor_model_parallel_size', `a multiple of ${t}`);
  if (heads % groups !== 0) refuse('numQueryGroups', 'num_query_groups must divide num_attention_heads', `a divisor of ${heads}`);
  if (args.kvChannels === undefined && args.hiddenSize % heads !== 0)
    refuse('hiddenSize', 'hidden_size must be a multiple of num_attention_heads (or give kvChannels)', `a multiple of ${heads}`);
  const p = args.pipelineModelParallelSize ?? 1;
  if (args.numLayers % p !== 0) refuse('numLayers', 'number of layers should be divisible by the pipeline parallel size', `a multiple of ${p}`);
}

/**
 * Megatron-LM's `report_theoretical_memory` for dense models (no MoE, MLA or MTP), evaluated
 * in the same order as the Python so the doubles match: weights and optimizer of the first
 * pipeline stage (18 bytes per parameter, or 6 + 12/d with the distributed optimizer), and
 * activations by Korthikanti's "TP + SP + selective recompute" path (only with sequence
 * parallelism and selective recompute) or the "without SP" one (×1.05, 2-byte logits).
 *
 * @example
 * ```ts
 * import { megatronPaddedVocab, megatronTheoretical } from 'vram-ts';
 * const r = megatronTheoretical({ numLayers: 24, hiddenSize: 2048, numAttentionHeads: 16, paddedVocabSize: megatronPaddedVocab(50257, 2), tensorModelParallelSize: 2, dataParallelSize: 4, seqLength: 2048, microBatchSize: 4 }, 4);
 * console.log(r.weightAndOptimizer, r.path); // 11804811264 without-sp
 * ```
 */
export function megatronTheoretical(args: MegatronArgs, numMicrobatches?: number): MegatronFigures {
  validate(args, MEGATRON_ARGS, ['megatronTheoretical']);
  if (numMicrobatches !== undefined) validate(numMicrobatches, integer(1, 1_000_000_000), ['megatronTheoretical', 'numMicrobatches']);
  megatronRefusals(args);
  const h = args.hiddenSize;
  const a = args.numAttentionHeads;
  const L = args.numLayers;
  const t = args.tensorModelParallelSize ?? 1;
  const p = args.pipelineModelParallelSize ?? 1;
  const v = args.virtualPipelineModelParallelSize;
  const V = args.paddedVocabSize;
  const kv = args.kvChannels ?? Math.trunc(h / a);
  const F = args.ffnHiddenSize ?? (args.swiglu ? Math.trunc((4 * h * 2) / 3 / 64) * 64 : 4 * h);
  const g = args.numQueryGroups ?? a;
  // Weights and optimizer (compute_weight_and_optimizer_memory).
  const ratio = (kv * a) / h;
  const gm = args.swiglu ? 3 / 2 : 1;
  const ns = args.normalization === 'RMSNorm' ? 1 : 2;
  const attn = 2 * h * h * ((1 + g / a) * ratio);
  const emb = h * V;
  const finalLn = ns * h;
  const denseMlp = 2 * h * F * gm;
  const ln = 2 * h * ns;
  const tpBlock = (attn + denseMlp) * L;
  const replBlock = ln * L + finalLn;
  let tpPart = (tpBlock / p + 0 + emb) / t;
  const repl = replBlock / p + 0;
  if ((args.untieEmbeddingsAndOutputWeights ?? false) && p === 1) tpPart += emb / t;
  const bpp = (d: number) => (args.useDistributedOptimizer ? 6 + 12 / d : 18);
  const weightAndOptimizer = (tpPart + repl) * bpp(args.dataParallelSize) + 0 * bpp(args.dataParallelSize);
  // Activations.
  const s = args.seqLength;
  const b = args.microBatchSize;
  const sp = (args.sequenceParallel ?? false) && t > 1 && args.recomputeGranularity === 'selective';
  const scale = (memory: number): number => {
    let m = memory;
    if (v !== undefined && v !== 1) m *= 1 + (p - 1) / (p * v);
    if ((v === undefined || v === 1) && p > 1 && numMicrobatches !== undefined) m *= Math.min(1, numMicrobatches / p);
    return m;
  };
  let activation: number;
  if (sp) {
    let memory = s * b * h * (18 + 4 * (F / h));
    memory *= L;
    memory += 8 * s * b * p;
    memory += s * b * h * p;
    memory = scale(memory);
    if (p === 1) memory += s * b * h * 4 * (1 + V / h);
    activation = memory / t;
  } else {
    let memory = s * b * h * (10 + 24 / t);
    memory *= L;
    memory += 8 * s * b * p;
    memory += s * b * h * p;
    memory = scale(memory);
    if (p === 1) {
      let logits = s * b * V;
      logits /= t;
      memory += (logits + s * b * h) * 2;
    }
    memory *= 1.05;
    activation = memory;
  }
  const w = weightAndOptimizer / 1048576;
  const act = activation / 1048576;
  return { weightAndOptimizer, activation, parametersOnShard: tpPart + repl, path: sp ? 'sp' : 'without-sp', reportMiB: [w, act, w + act] };
}
