import type { Dim } from '../sym/expr.js';
import type { DType } from '../tensor/dtype.js';
import type { TensorSpec } from '../tensor/spec.js';

/** Where the model runs: a few kernels keep different tensors on CPU and CUDA. */
export type Device = 'cuda' | 'cpu';

/**
 * Which PyTorch's autograd rules to follow where they changed: `torch-2` (default, 2.x) or
 * `torch-1.13` (the version the CPU oracle measures: mean saves its input, gradients are
 * always summed out of place).
 */
export type Framework = 'torch-2' | 'torch-1.13';

/** What an op rule may read besides its inputs and attributes. */
export interface OpContext {
  /** model.train() (true) or model.eval() (false): BatchNorm statistics, dropout. */
  readonly training: boolean;
  /** Whether autograd records the op at all (false under no_grad / inference). */
  readonly gradEnabled: boolean;
  readonly device: Device;
  readonly framework: Framework;
  /** dtype new parameters are created in. */
  readonly paramDtype: DType;
  /** Where the op sits, for error paths. */
  readonly path: readonly (string | number)[];
}

/** A parameter or buffer an op owns. */
export interface OwnedTensor {
  readonly name: string;
  readonly spec: TensorSpec;
  /** Parameter key of an already traced parameter this one is tied to (shared storage). */
  readonly tiedTo?: string;
  /**
   * The gradient autograd accumulates for this parameter when it is not the parameter's shape
   * (a DTensor whose gradient comes out with another placement: the vocab-parallel embedding's
   * is Replicate, the whole table). Default: the parameter's spec.
   */
  readonly gradSpec?: TensorSpec;
  /**
   * What the storage behind the tensor holds when it is more than the tensor: a narrowed view
   * of a padded buffer (DTensor's uneven shards keep ⌈n/t⌉ rows on every rank). Default: the spec.
   */
  readonly storageSpec?: TensorSpec;
}

/**
 * One tensor autograd keeps for backward:
 * an input, an output, a parameter or buffer by name, or a new tensor the op makes
 * only to save it (BatchNorm's mean and inverse std, max-pool indices, dropout masks,
 * the clone an in-place activation keeps of its original input).
 */
export type SavedRef =
  | { readonly input: number }
  | { readonly output: number }
  | { readonly param: string }
  | { readonly buffer: string }
  | { readonly extra: TensorSpec; readonly label: string };

/** Which of an op's differentiable inputs need a gradient when it runs. */
export interface GradNeeds {
  readonly inputs: readonly boolean[];
  /** True when any of the op's own parameters is trainable. */
  readonly params: boolean;
}

/**
 * One step of a kernel's allocations: a named temporary comes or goes, or the op's own
 * results are allocated at that point (`outputs` in forward; `inputGrads` / `paramGrads`
 * in backward). Steps run in order; the simulator notes the live total before each free.
 */
export type KernelStep =
  | { readonly alloc: string; readonly bytes: Dim }
  | { readonly free: string }
  | { readonly results: 'outputs' | 'inputGrads' | 'paramGrads' }
  /**
   * Backward only: the gradients that reached this op are let go here rather than after its
   * kernels, as when one op of ours is two autograd nodes (a pad before a conv: the conv's
   * node frees its grad_output before the pad's node runs).
   */
  | { readonly release: 'incomingGrads' }
  /**
   * Backward only: what the op saved is let go here rather than after its kernels, as when one
   * op of ours is several autograd nodes and the node that used the saved tensors ran first
   * (5.x experts' `act(gate) * up`: MulBackward0 and SiluBackward0 free theirs before the cat).
   */
  | { readonly release: 'saved' }
  /**
   * Forward only: input `releaseInput` is let go here when this op is its last use, rather than
   * after the kernel, as when the real code rebinds the Python name that held it mid-function
   * (5.x's grouped experts: `proj_out` goes from the activation to the down projection's output).
   */
  | { readonly releaseInput: number };

/**
 * What an input's gradient is: a `new` tensor of the input's size, an `alias` of the incoming
 * gradient (add, views, identity), a `strided` view of it (cat's backward narrows along a
 * dimension after the first: not contiguous), or `none` when no gradient flows.
 */
export type GradKind = 'new' | 'alias' | 'strided' | 'none';

/** How an op's backward allocates, beyond releasing what forward saved. */
export interface BackwardPlan {
  /**
   * Per input: `new` gradient tensor of the input's size, `alias` when backward hands the
   * incoming gradient on as it is (add, views, identity), `none` when no gradient flows.
   * Default: `new` for every input that needs a gradient.
   */
  readonly inputGrads?: readonly GradKind[];
  /**
   * The backward kernels need a contiguous gradient of the output: a strided one (a slice of
   * cat's gradient) is copied first, for the kernel's duration (convolution, pooling and
   * batch-norm backward call `grad_output.contiguous()`).
   */
  readonly contiguousGradOutput?: boolean;
  /**
   * For `strided` input gradients: 1 when the slice is strided, 0 when it is contiguous after
   * all, or an expression in the symbols that is 1 or 0 (a slice after a batch of B is strided
   * unless B = 1). Default 1.
   */
  readonly stridedFactor?: Dim;
  /** The kernels' allocations in order (default: input gradients, then parameter gradients). */
  readonly steps?: readonly KernelStep[];
}

/** What an op does to memory, derived from its input specs and attributes. */
export interface OpResult {
  readonly outputs: readonly TensorSpec[];
  readonly params?: readonly OwnedTensor[];
  readonly buffers?: readonly OwnedTensor[];
  /** `inplace`: output 0 writes into input 0; `view`: output 0 shares input 0's storage. */
  readonly alias?: 'inplace' | 'view';
  /** The input `alias` refers to, when not input 0 (an expert loop's `index_add_` into the running sum). */
  readonly aliasInput?: number;
  /**
   * Output 0 is a new copy only where this 0/1 factor is 1 and a view of input 0 where it is
   * 0 (`.contiguous()` / `reshape` of a tensor that is contiguous only at batch 1). A number
   * decides at trace time; an expression keeps both cases exact for symbolic sizes.
   */
  readonly copyWhen?: Dim;
  /** Outputs that carry no gradient (indices, masks), by index. */
  readonly nonDifferentiableOutputs?: readonly number[];
  /** What autograd saves when the op is recorded, given which inputs need gradients. */
  readonly saves: (needs: GradNeeds) => readonly SavedRef[];
  /**
   * The op only owns its parameters: a module the forward never calls (4.5x's experts no token
   * chose). No autograd node, so its parameters get no gradient this step (they keep their
   * optimizer state).
   */
  readonly paramsUnused?: boolean;
  /**
   * Multiply-accumulate count of the forward, computed only when asked: it is informational,
   * and at long contexts it passes 2^53 where the memory figures do not.
   */
  readonly macs?: () => Dim;
  /** The forward kernel's allocations in order (default: just the outputs). */
  readonly forwardSteps?: readonly KernelStep[];
  /**
   * The forward kernel's allocations when autograd does not record the op (no_grad, or no
   * input needs a gradient), where the kernel still makes what it would have saved
   * (default: `forwardSteps`).
   */
  readonly forwardStepsUnrecorded?: readonly KernelStep[];
  /** How backward allocates (default: a new gradient per input that needs one). */
  readonly backward?: (needs: GradNeeds) => BackwardPlan;
}

/** The rule of one primitive op: specs in, memory facts out. */
export interface OpRule<A> {
  readonly name: string;
  /** Number of tensor inputs, or `'variadic'`. */
  readonly arity: number | 'variadic';
  apply(inputs: readonly TensorSpec[], attrs: A, ctx: OpContext): OpResult;
}
