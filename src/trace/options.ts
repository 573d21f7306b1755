import type { QuantizationPlan } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import type { TensorSpec } from '../tensor/spec.js';
import type { TraceSettings } from './ir.js';

/** How to trace: the settings of {@link vram-ts!IR} plus the input and which parameters train. */
export interface TraceOptions extends TraceSettings {
  readonly inputs: readonly TensorSpec[];
  /** Whether the inputs themselves need gradients (default false: data); per input, or for all. */
  readonly inputRequiresGrad?: boolean | readonly boolean[];
  /** Whether the parameter with this key trains (default: all). */
  readonly trainable?: (key: string) => boolean;
  /**
   * The loss the training step computes on the model's output: `cross_entropy` over
   * classes (dim 1) against int64 targets. Skipped when the model already returns a
   * scalar loss, or when autograd is off.
   */
  readonly loss?: 'cross_entropy' | 'none';
  /** torch.autocast dtype for the forward (mixed precision), or none. */
  readonly autocast?: DType | null;
  /** Which modules run under activation checkpointing, and which ops are recomputed. */
  readonly checkpoint?: CheckpointPlan;
  /** LoRA adapters on Linear layers (PEFT), optionally over a 4-bit base (QLoRA). */
  readonly lora?: LoraPlan;
  /** Which Linear/Conv1D layers are stored quantized, and how (a `quantization_config`, or QLoRA's 4-bit base). */
  readonly quantize?: QuantizationPlan;
}

/** PEFT LoRA: adapters lora_A [r, in] and lora_B [out, r] beside frozen Linear layers. */
export interface LoraPlan {
  readonly rank: number;
  /**
   * Module names adapted (estimate's default: PEFT's for the model family — q_proj and v_proj
   * for Llama/Qwen2/Mistral, c_attn for GPT-2 — else q_proj, k_proj, v_proj, o_proj);
   * `'all-linear'` as PEFT defines it: every `nn.Linear` and `Conv1D` (bitsandbytes' quantized
   * Linear4bit/Linear8bitLt included, GPTQ/AWQ QuantLinear not) except the output embedding.
   */
  readonly targets?: readonly string[] | 'all-linear';
  /** lora_dropout (default 0: PEFT uses nn.Identity). */
  readonly dropout?: number;
  /**
   * QLoRA: the model is loaded in bitsandbytes 4-bit (NF4, double quantisation), which
   * quantizes every Linear but the output embedding, whatever the adapters target.
   */
  readonly quantizeBase?: boolean;
  /** dtype of the adapters (PEFT's autocast_adapter_dtype keeps them in float32 over a 16-bit base). */
  readonly adapterDtype?: DType;
}

/** Activation checkpointing: module paths, groups of k children of a container, or op names. */
export interface CheckpointPlan {
  /** Module paths (`features.3`, `model.layers.0`) each checkpointed as one region. */
  readonly modules?: readonly string[];
  /** Checkpoint the children of this container (path) in runs of `every` consecutive blocks. */
  readonly within?: string;
  readonly every?: number;
  /** Op names (`matmul`, `softmax`, `dropout`) whose runs inside one module are recomputed (selective). */
  readonly selective?: readonly string[];
}
