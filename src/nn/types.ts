import type { QuantScheme } from '../ops/quant.js';
import type { Device, OpRule } from '../ops/types.js';
import type { Dim } from '../sym/expr.js';
import type { DType } from '../tensor/dtype.js';

/** Options every layer builder takes. */
export interface LayerOptions {
  /** Name in the parent module (default: its index in a sequence). */
  readonly name?: string;
}

/** A primitive op; a torch module of class `className`, or a functional call when that is null. */
export interface OpLayer<A = unknown> {
  readonly kind: 'op';
  readonly rule: OpRule<A>;
  readonly attrs: A;
  readonly className: string | null;
  readonly name?: string;
}

/** An nn.Sequential (or subclass): children run in order, named by index unless named. */
export interface SeqLayer {
  readonly kind: 'seq';
  readonly className: string;
  /** Whether the torch class is an nn.Sequential (subclass); false for a plain nn.Module that runs its children in order. */
  readonly isSequential: boolean;
  readonly children: readonly Layer[];
  readonly name?: string;
}

/** A named module around a body that is not itself a module (residual, branch, graph). */
export interface ModuleLayer {
  readonly kind: 'module';
  readonly className: string;
  readonly body: Layer;
  readonly name?: string;
  /** dtype of the model's input when it is not the parameters' (token ids are int64). */
  readonly inputDtype?: DType;
  /** dtype the model's parameters default to (estimate's `dtype`/`precision` override it). */
  readonly dtype?: DType;
  /** Facts about the model that reports and helpers read (decoder shape for the KV cache). */
  readonly meta?: ModelMeta;
  /** Linear layers stored quantized (a Hugging Face `quantization_config`). */
  readonly quantization?: QuantizationPlan;
  /**
   * Child names in the order `__init__` registers them, where forward runs them in another
   * order: `model.parameters()` (and so a for-loop optimizer) follows registration.
   */
  readonly childOrder?: readonly string[];
  /**
   * Child modules torch registers but forward never calls (MultiheadAttention's `out_proj`, used
   * through `F.linear`): reports that follow torchinfo count this module as a parent, not a leaf.
   */
  readonly idleChildren?: readonly string[];
  /**
   * Child modules whose weights forward passes to a function instead of calling them
   * (ShiftedWindowAttention's `qkv` and `proj`, through `F.linear`): traced as the children that
   * own those parameters, but no hook sees them run, so torchinfo's text leaves them out.
   */
  readonly functionalChildren?: readonly string[];
  /** Identical blocks the model runs one after another (see {@link RepeatedBlocks}). */
  readonly repeated?: RepeatedBlocks;
  /**
   * A causal LM only: the same model whose forward ends as `head` says (what a trainer asks of
   * it: logits of the last positions, per-token log-probabilities, a chunked loss).
   */
  readonly withHead?: (head: LmHead) => ModuleLayer;
}

/**
 * What a causal LM's forward computes after the decoder's last hidden states:
 * - `loss`: lm_head and the release's loss with `labels` in training, the logits otherwise (the default);
 * - `logits`: lm_head on the last `keep` positions only (`logits_to_keep`; default all), no labels;
 * - `token-logps`: TRL GRPOTrainer's `_get_per_token_logps_and_entropies`: logits of the last
 *   `keep + 1` positions, the last dropped, divided by the temperature, selective_log_softmax
 *   against the ids, the entropy without grad when `entropy`; in training with `loss: 'grpo'`
 *   the policy loss over those log-probabilities (`beta`: with the KL term);
 * - `chunked-nll`: TRL SFTTrainer's chunked cross entropy (`loss_type='chunked_nll'`): lm_head
 *   and the loss in checkpointed chunks of `chunk` tokens (default 256);
 * - `liger-flce`: Liger's fused linear cross-entropy (`use_liger_kernel`; read from its source, not measured);
 * - `loss-metrics`: the release's loss, then SFTTrainer's no-grad entropy and accuracy on the
 *   shifted logits (`loss_type='nll'`).
 */
export type LmHead = (
  | { readonly kind: 'loss' }
  | { readonly kind: 'logits'; readonly keep?: number }
  | {
      readonly kind: 'token-logps';
      readonly keep: number;
      readonly entropy?: boolean;
      readonly loss?: 'grpo' | 'none';
      readonly beta?: boolean;
    }
  | { readonly kind: 'chunked-nll'; readonly chunk?: number }
  | { readonly kind: 'liger-flce' }
  | { readonly kind: 'loss-metrics' }
) & {
  /**
   * The forward runs under accelerate's mixed precision (torch.autocast, then
   * `convert_outputs_to_fp32`): the kept hidden states are cast to 16 bits (a contiguous copy,
   * so matmul's reshape copies nothing) and the 16-bit logits come back as float32 copies.
   */
  readonly autocast?: boolean;
  /** The forward's `use_cache` when the trainer passes one (TRL's log-prob passes: False). */
  readonly useCache?: boolean;
};

/**
 * A model's identical blocks (decoder layers): `count` of them, keyed `${prefix}${i}`, and the
 * same model built with another count. estimate traces the model with three (the first, one
 * interior block, the last) and counts the interior one `count - 2` times, so that its cost
 * does not grow with depth; the trace itself checks that the blocks are identical.
 */
export interface RepeatedBlocks {
  readonly count: number;
  /** Key of block i without the i: `model.layers.`. */
  readonly prefix: string;
  /** The model body the blocks are in (a model whose body is another one is traced whole). */
  readonly body: Layer;
  readonly withCount: (count: number) => ModuleLayer;
  /**
   * The model's pipeline stage holding blocks [start, end): the input embedding on the first
   * stage only, the output head on the last only, the received hidden states as the input of
   * the others; it returns what feeds the loss (logits) or the next stage (hidden states).
   */
  readonly stage?: (start: number, end: number) => ModuleLayer;
}

/**
 * Quantized Linear layers, as a Hugging Face quantizer converts them: every `nn.Linear` /
 * `Conv1D` under one of the `within` key prefixes (default: the whole model; GPTQ: the decoder
 * blocks) whose module key does not match a `skip` entry (transformers' rule: the entry equals
 * the key or `entry + '.'` occurs in it; default `lm_head`, the output embedding).
 */
export interface QuantizationPlan {
  readonly scheme: QuantScheme;
  readonly within?: readonly string[];
  readonly skip?: readonly string[];
}

/** What a decoder catalog entry records about itself. */
/** Module keys of a decoder's parts by role (see {@link ModelMeta.roles}). */
export interface DecoderRoles {
  /** Class name of the decoder layers (`LlamaDecoderLayer`, `GPT2Block`): `_no_split_modules`. */
  readonly layerClass: string;
  readonly inputEmbedding: string;
  readonly outputEmbedding: string;
  readonly finalNorm: string;
}

export interface ModelMeta {
  readonly kind: 'decoder';
  readonly family: string;
  readonly layers: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly hidden: number;
  readonly vocab: number;
  /** The MLP's inner size (`intermediate_size`, GPT-2's `n_inner`). */
  readonly intermediate: number;
  /** A gated MLP (SwiGLU: gate, up and down projections) rather than two matrices. */
  readonly gatedMlp: boolean;
  /** Whether the LM head shares the token embedding's weight. */
  readonly tied: boolean;
  /**
   * The modules found by role, as Hugging Face and accelerate find them: the decoder layer class
   * (`_no_split_modules`), `get_input_embeddings()`, `get_output_embeddings()` and the base
   * model's last `*Norm*` child (accelerate's `_find_final_norm`). Where the builder records them.
   */
  readonly roles?: DecoderRoles;
  /** `max_position_embeddings`, where the config gives it. */
  readonly maxPositions?: number;
  /** The attention implementation the model was built with (eager, sdpa, flash), where the builder records it. */
  readonly attention?: 'eager' | 'sdpa' | 'flash';
  /** Mistral's sliding window: the KV cache keeps at most this many positions. */
  readonly slidingWindow?: number;
  /**
   * Per layer (Gemma 2/3, Qwen3's layer_types): the sliding window of a local layer, whose KV
   * cache keeps at most that many positions, or null for a global layer. Absent: every layer
   * is as {@link slidingWindow} says.
   */
  readonly layerWindows?: readonly (number | null)[];
  /**
   * The tensor parallelism this rank's model was built for (`tensorParallel` of the decoder
   * builders). The other fields stay the whole model's (the config's); the parameters and
   * activations the model traces to are the rank's.
   */
  readonly tensorParallel?: TensorParallelBuild;
  /** One rank of context parallelism: the activations the model traces to hold s/c positions. */
  readonly contextParallel?: ContextParallelBuild;
  /** One rank of (Hugging Face's) expert parallelism: E/size routed experts per MoE layer. */
  readonly expertParallel?: { readonly size: number; readonly rank: number };
  /**
   * A mixture of experts: experts per MoE layer, experts per token, how many layers are MoE,
   * each routed expert's parameters, and the parameters a token does not use
   * (`inactiveParams` = MoE layers × (experts − k) × expert size): active = total − inactive.
   */
  readonly moe?: {
    readonly experts: number;
    readonly k: number;
    readonly moeLayers: number;
    readonly expertParams: number;
    readonly sharedExperts: number;
    readonly inactiveParams: number;
  };
  /**
   * Multi-head latent attention (DeepSeek-V2/V3): per token and layer, the latent an
   * MLA-aware engine (vLLM, SGLang) caches, `kv_lora_rank + qk_rope_head_dim` elements, and
   * what Hugging Face's cache holds.
   */
  readonly mla?: {
    readonly kvLoraRank: number;
    readonly qkRopeHeadDim: number;
    readonly qkNopeHeadDim: number;
    readonly vHeadDim: number;
    readonly qLoraRank: number | null;
    readonly latentPerToken: number;
    readonly hfCachePerToken: number;
  };
}

/** What a rank's model records about the tensor parallelism it was built for (plain data). */
export interface TensorParallelBuild {
  readonly size: number;
  readonly rank: number;
  readonly sequenceParallel: boolean;
  readonly lossParallel: boolean;
  /** Whether the LM head shares the embedding's table on the rank (a tied config re-tied after parallelizing). */
  readonly tied: boolean;
}

/** What a rank's model records about the context parallelism it was built for (plain data). */
export interface ContextParallelBuild {
  readonly size: number;
  readonly rank: number;
  readonly loadBalance: boolean;
}

/** `body(x) + x` (or `+=` in place), optionally through a shortcut layer. */
export interface ResidualLayer {
  readonly kind: 'residual';
  readonly body: Layer;
  readonly inplace: boolean;
  readonly shortcut?: Layer;
  /** A layer applied to x after the body (torchvision's `downsample`), then added. */
  readonly downsample?: Layer;
  /** The body's children (a sequence's) are traced in the enclosing module, not in a node of their own. */
  readonly inline?: boolean;
  readonly name?: string;
}

/** How a branch merges its paths. */
export type Merge = 'add' | 'mul' | 'concat';

/** Paths that each see the same input, merged by add, mul or concat (channels). */
export interface BranchLayer {
  readonly kind: 'branch';
  readonly className: string;
  readonly paths: readonly Layer[];
  readonly merge: Merge;
  /** The paths (sequences' children) are traced in the enclosing module, not in a node of their own (SqueezeNet's Fire). */
  readonly inline?: boolean;
  readonly name?: string;
}

/** A handle on a tensor while a graph layer is being traced. */
export interface TensorRef {
  readonly id: number;
  readonly shape: readonly Dim[];
  readonly dtype: DType;
}

/** What a graph layer's build function can do with tensors. */
export interface GraphBuilder {
  /** Runs a layer (usually a named module) on tensors; returns its first output. */
  readonly apply: (layer: Layer, ...inputs: TensorRef[]) => TensorRef;
  /** Runs a layer and returns all of its outputs. */
  readonly applyAll: (layer: Layer, ...inputs: TensorRef[]) => readonly TensorRef[];
  /** Runs a functional op (no module of its own) on tensors; returns its outputs. */
  readonly call: <A>(rule: OpRule<A>, inputs: readonly TensorRef[], attrs: A) => TensorRef[];
  /** The path of the module this graph runs in (empty at the model's root), for errors at the right place. */
  readonly path: readonly string[];
  /** model.train() or model.eval() for the traced model. */
  readonly training: boolean;
  /** Whether autograd records (a training step) or not (inference, no_grad). */
  readonly gradEnabled: boolean;
  /** Whether activation checkpointing is on for this step (Hugging Face then turns `use_cache` off in training). */
  readonly checkpointing: boolean;
  /** The device whose kernels run (sdpa's CPU math path, where its flash kernel declines). */
  readonly device: Device;
  /**
   * Keeps a tensor referenced until the enclosing module returns (a Python local that
   * outlives its last use), or with `'forward'` until the model's forward returns (what the
   * model's output object holds, such as a KV cache).
   */
  readonly hold: (tensor: TensorRef, until?: 'module' | 'forward') => void;
  /** Keeps a tensor referenced up to the ops traced so far (a Python variable reassigned only now). */
  readonly touch: (tensor: TensorRef) => void;
  /**
   * The model's forward returns here and the ops after it are the caller's (a trainer's loss on
   * the logits): what the forward held to its end (autocast's weight cache, locals held with
   * `'forward'`) is let go, and the ops after it run outside autocast.
   */
  readonly endForward: () => void;
  /**
   * A condition the input must meet for the model to run: `value` >= 1. Concrete inputs that
   * break it are a VramError with `message`; symbolic ones carry it as a constraint.
   */
  readonly require: (value: Dim, message: string) => void;
}

/** Custom data flow (attention, gated MLPs): a function of the builder and the inputs. */
export interface GraphLayer {
  readonly kind: 'graph';
  readonly build: (g: GraphBuilder, inputs: readonly TensorRef[]) => TensorRef | readonly TensorRef[];
  readonly name?: string;
}

/** Any model or part of one. Plain data: build it with the functions of this package. */
export type Layer = OpLayer<unknown> | SeqLayer | ModuleLayer | ResidualLayer | BranchLayer | GraphLayer;
