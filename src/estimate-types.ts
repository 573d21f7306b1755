import type { Category, PeakPoint, Phase, StepProgram, TimelineEvent } from './memory/ledger.js';
import type { OptimizerName, OptimizerSpec } from './memory/optimizers.js';
import type { HostBytes } from './memory/residency/types.js';
import type { Device, Framework } from './ops/types.js';
import type { ParallelPlan } from './parallel/index.js';
import type { Dim } from './sym/expr.js';
import type { DType } from './tensor/dtype.js';
import type { TensorSpec } from './tensor/spec.js';
import type { IR } from './trace/ir.js';
import type { CheckpointPlan, LoraPlan } from './trace/trace.js';

/* estimate's public types: its options and the estimate it returns (plain data). */

/** What to estimate: the input and how the model runs. */
export interface EstimateOptions {
  /** Batch-first input shape, e.g. `[1, 3, 4000, 2672]` or `[sym('B'), 3, 224, 224]`; or tensor specs. */
  readonly input: readonly Dim[] | TensorSpec | readonly TensorSpec[];
  /** `train`: autograd records and saves for backward (default); `inference`: no_grad. */
  readonly mode?: 'train' | 'inference';
  /** model.train() or model.eval(): BatchNorm statistics and dropout (default follows `mode`). */
  readonly moduleMode?: 'train' | 'eval';
  /** dtype of parameters and of a shape-only input (default float32; `precision` sets it too). */
  readonly dtype?: DType;
  /**
   * `fp32` (default); pure `bf16` / `fp16` (parameters, activations, gradients and, by
   * default, optimizer state in 16 bits); `amp-bf16` / `amp-fp16`: torch.autocast mixed
   * precision (fp32 master weights, 16-bit copies of conv/linear weights cached for the
   * forward, conv/linear/matmul in 16 bits, softmax/log_softmax/layer_norm/losses in fp32).
   */
  readonly precision?: Precision;
  /** Activation checkpointing: which modules (or groups of blocks, or ops) recompute in backward. */
  readonly checkpoint?: CheckpointPlan;
  /** LoRA / QLoRA fine-tuning: only the adapters train; everything else is frozen. */
  readonly lora?: LoraPlan;
  /** dtype of a shape-only input when it differs from `dtype` (token ids are int64). */
  readonly inputDtype?: DType;
  /** `cuda` (default) or `cpu`: a few kernels keep different tensors. */
  readonly device?: Device;
  /** PyTorch's rules to follow where versions differ (default `torch-2`; the CPU oracle is `torch-1.13`). */
  readonly framework?: Framework;
  /** Whether the input needs a gradient (default false). */
  readonly inputRequiresGrad?: boolean;
  /** Parameter keys (or key prefixes ending at a `.` boundary) that stay frozen. */
  readonly freeze?: readonly string[];
  /** The optimizer of the training step (default `adam`); `null` for forward + backward only. */
  readonly optimizer?: OptimizerName | OptimizerSpec | null;
  /** Loss on the model's output (default `cross_entropy`; ignored when the model returns a scalar). */
  readonly loss?: 'cross_entropy' | 'none';
  /** Micro-batches per optimizer step (gradient accumulation; `input` is one micro-batch). */
  readonly microBatches?: number;
  /** Keep the event-by-event timeline (default: true for concrete inputs, false for symbolic ones). */
  readonly timeline?: boolean;
  /**
   * One rank of a data-parallel job (DDP, ZeroRedundancyOptimizer, FSDP2): every figure is that
   * rank's — its parameters, gradients and optimizer state, the engine's buffers, its peak.
   */
  readonly parallel?: ParallelPlan;
  /**
   * Symbolic inputs: build the peak as an expression (default true). The step's program
   * (`steps.*.program`) replays exactly at any values either way; maxFitting uses that.
   */
  readonly peakExpression?: boolean;
}

/** Training precisions. */
export type Precision = 'fp32' | 'fp16' | 'bf16' | 'amp-fp16' | 'amp-bf16';

/** Parameter element counts. */
export interface ParamCounts {
  readonly total: number;
  readonly trainable: number;
}

/**
 * Bytes by category; numbers for concrete inputs, expressions for symbolic ones. `D` is
 * `number` when the input shape is all numbers (estimate's overload says so to the compiler).
 */
export interface ByteCounts<D extends Dim = Dim> {
  /** Parameters, tied weights once. */
  readonly parameters: D;
  /** Buffers (BatchNorm running statistics). */
  readonly buffers: D;
  /** What autograd holds for backward after the forward (design.md's saved-bytes contract). */
  readonly activations: D;
  /** The model's input tensors (the loss targets count in the timeline's `input` category). */
  readonly input: D;
  /** Parameter gradients (trainable parameters; 0 in inference). */
  readonly gradients: D;
  /** Optimizer state on the device (0 in inference or without an optimizer). */
  readonly optimizer: D;
  /**
   * The largest live total of the step: a training step's steady state (the first step, without
   * last step's gradients and with the optimizer state made at the step, never peaks higher);
   * the forward in inference. Allocated bytes as CUDA's allocator
   * counts them (512-byte blocks) on `cuda`, exact bytes on `cpu`; runtime lines excluded.
   */
  readonly peak: D;
  /**
   * What PyTorch's caching allocator reserves over the step (`torch.cuda.max_memory_reserved`):
   * the step's allocations and frees, in the order the simulator makes them, replayed through
   * `replayAllocator` after a first step (training: the first step, then the steady one;
   * inference: the forward twice), so that the segments the first step left are there. At least
   * the allocated peak. Runtime lines (CUDA context, cuBLAS workspaces) excluded.
   *
   * Only for a concrete input on `cuda`: absent on `cpu` (no caching allocator: what is allocated
   * is what is held, `peak`) and for symbolic inputs (evaluate them first; `maxFitting`
   * replays at each value it tries). Undefined when the two steps' log passes 2,000,000 entries
   * (REPLAY_LIMIT, which bounds the replay's cost). Made when first read, and not enumerable (`Object.keys`
   * and a spread leave it out, so the concrete and symbolic `bytes` have the same keys);
   * `estimateToJSON` writes it.
   */
  readonly reserved?: number;
}

/** Where the peak happens and what is live then. */
export interface PeakDetails {
  readonly bytes: Dim;
  /** Which simulated step holds it (`steady` in training: the first step never peaks higher). */
  readonly step: 'first' | 'steady' | 'inference';
  readonly phase: Phase;
  readonly label: string;
  readonly byCategory: Readonly<Record<Category, Dim>>;
  /** For symbolic sizes: every candidate that can be the peak for some dimension values. */
  readonly candidates: readonly PeakPoint[];
  /**
   * Bytes the caching allocator has reserved at the peak (segments are never returned, so what
   * it reserved up to then). Present where `bytes.reserved` is (concrete input on `cuda`), and
   * like it made when first read and not enumerable.
   */
  readonly reserved?: number;
  /**
   * `reserved - bytes` at the peak: memory in the allocator's segments that no live tensor holds
   * (cached free blocks, the unused ends of segments). Present where `reserved` is.
   */
  readonly fragmentation?: number;
}

/** One simulated step: its peak and the live bytes before and after. */
export interface StepSummary {
  readonly peak: Dim;
  readonly baseline: Dim;
  readonly end: Dim;
  /** The step's allocations, frees and events, replayable at any symbol values. */
  readonly program: StepProgram;
}

/** One module of the model with its share of the figures. */
export interface ModuleRow {
  readonly path: readonly string[];
  readonly className: string;
  readonly depth: number;
  /** Parameters of the module and its children, tied ones once. */
  readonly params: number;
  /** Parameters it owns directly. */
  readonly ownParams: number;
  /** Shape of its first output, or null when it returned nothing. */
  readonly outputShape: readonly Dim[] | null;
  /** Saved bytes first saved by ops inside it. */
  readonly activations: Dim;
}

/** The estimate: plain data. `D` is `number` for an all-number input shape. */
export interface Estimate<D extends Dim = Dim> {
  readonly params: ParamCounts;
  readonly bytes: ByteCounts<D>;
  /** Modules in tree order (pre-order), the root first. Made when first read. */
  readonly modules: readonly ModuleRow[];
  /** Dimensions that must stay >= 1 for the symbolic shapes to exist. */
  readonly constraints: readonly Dim[];
  /** Where the peak is and what is live at that moment. */
  readonly peak: PeakDetails;
  /** The steady-state step (or the inference forward), event by event. Made when first read. */
  readonly timeline: readonly TimelineEvent[];
  /**
   * Training: the first step (state allocated lazily) and a later one; inference: the forward.
   * The first step, and every step's program, are worked out when first read.
   */
  readonly steps: { readonly first?: StepSummary; readonly steady?: StepSummary; readonly inference?: StepSummary };
  /** The optimizer the step was simulated with (null: inference, or none asked for). */
  readonly optimizer: OptimizerSpec | null;
  /** The data-parallel rank the figures are for (null: one device). */
  readonly parallel: ParallelPlan | null;
  /**
   * With `parallel.offload`: what the rank keeps in host memory (`bytes` are then the GPU's
   * figures). Absent without offloading.
   */
  readonly host?: HostBytes<D>;
  /**
   * The traced model everything above was computed from. For a model with repeated blocks (see
   * RepeatedBlocks) the figures come from a trace of three of them; this IR, like the module
   * rows, the timeline and the step programs, is the whole model's, traced when first read.
   */
  readonly ir: IR;
}
