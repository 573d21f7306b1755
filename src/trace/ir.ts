import type { Device, Framework, GradKind, KernelStep } from '../ops/types.js';
import type { Dim } from '../sym/expr.js';
import type { DType } from '../tensor/dtype.js';
import type { TensorSpec } from '../tensor/spec.js';

/** What a tensor is to the accounting. */
export type TensorRole = 'input' | 'param' | 'buffer' | 'activation' | 'extra';

/** One tensor of the traced model. */
export interface IRTensor {
  readonly id: number;
  readonly spec: TensorSpec;
  /** The storage it lives in (views and in-place results share their input's). */
  readonly storage: number;
  readonly role: TensorRole;
  /** Index of the op that made it, or null for inputs, parameters and buffers. */
  readonly producer: number | null;
  /** Whether autograd tracks it. */
  readonly requiresGrad: boolean;
  /** `features.0.0.weight` for parameters and buffers. */
  readonly key?: string | undefined;
  /** What a saved-only tensor is (`save_mean`, `mask`, `indices`, `original input`). */
  readonly label?: string | undefined;
  /** Parameters: the gradient's spec where it is not the parameter's (the op's OwnedTensor.gradSpec). */
  readonly gradSpec?: TensorSpec | undefined;
}

/** One allocation: the bytes its first tensor needs. */
export interface IRStorage {
  readonly id: number;
  readonly bytes: Dim;
  readonly dtype: DType;
  readonly role: TensorRole;
  /** Parameters: whether the optimizer trains it. */
  readonly trainable: boolean;
  /**
   * A copy that happens only where `copyWhen` (a 0/1 expression) is 1: `bytes` already carries
   * the factor; where it is 0 the tensor is a view of storage `viewOf`, which then lives as
   * long as this one does.
   */
  readonly conditional?: { readonly copyWhen: Dim; readonly viewOf: number };
}

/** One primitive op, in execution order. */
export interface IROp {
  readonly index: number;
  /** Rule name, e.g. `conv2d`. */
  readonly op: string;
  /** Index of the innermost module it runs in. */
  readonly module: number;
  readonly inputs: readonly number[];
  readonly outputs: readonly number[];
  readonly params: readonly number[];
  readonly buffers: readonly number[];
  /** Tensors the op makes only to save them for backward. */
  readonly extras: readonly number[];
  /** Tensors autograd keeps for this op's backward (distinct ids). */
  readonly saved: readonly number[];
  readonly alias: 'inplace' | 'view' | null;
  /** Whether autograd records a node for it. */
  readonly recorded: boolean;
  /** Multiply-accumulate count of the forward, computed when asked (a VramError past 2^53). */
  readonly macs: () => Dim;
  readonly attrs: unknown;
  /** The forward kernel's allocations in order (outputs and saved extras at `results: outputs`). */
  readonly forwardSteps: readonly KernelStep[];
  /** What backward allocates (null when not recorded). */
  readonly backward: {
    readonly inputGrads: readonly GradKind[];
    readonly steps: readonly KernelStep[];
    readonly contiguousGradOutput: boolean;
    /** 1, 0 or a 0/1 expression: whether its `strided` input gradients really are. */
    readonly stridedFactor: Dim;
  } | null;
  /** `model` for the model's forward, `loss` for the loss the training step adds after it. */
  readonly stage: 'model' | 'loss';
  /** Autocast's 16-bit copies of this op's weights (their gradients pass through them). */
  readonly paramCopies: readonly number[];
  /** The checkpoint region it runs in (recomputed in backward), or null. */
  readonly region: number | null;
}

/** A span of ops run under activation checkpointing: only its inputs are kept; it runs again in backward. */
export interface IRRegion {
  readonly id: number;
  readonly firstOp: number;
  readonly endOp: number;
  /** Tensors from outside it that its ops read: what checkpoint keeps. */
  readonly inputs: readonly number[];
}

/** One node of the module tree. */
export interface IRModule {
  readonly index: number;
  readonly name: string;
  /** Names from the root ([] for the root). */
  readonly path: readonly string[];
  /** The path joined with dots, as `named_modules()` spells it ('' for the root). */
  readonly key: string;
  readonly className: string;
  /** An nn.Sequential (or subclass): torchsummary gives those no row. */
  readonly isSequential: boolean;
  readonly parent: number | null;
  readonly children: readonly number[];
  /** Parameters it owns directly (not its children's). */
  readonly params: readonly number[];
  readonly buffers: readonly number[];
  /** Its ops are `ops[firstOp .. endOp - 1]`. */
  readonly firstOp: number;
  readonly endOp: number;
  readonly inputs: readonly number[];
  readonly outputs: readonly number[];
  /** Position in forward-hook order (children finish before their parent). */
  readonly finishOrder: number;
  /** When the same layer object ran before (a shared module, weights shared): that first module's index. */
  readonly sharedWith: number | null;
  /** Child names in registration order when it differs from the order they ran (see ModuleLayer.childOrder). */
  readonly childOrder?: readonly string[];
  /** Child modules registered but never called (see ModuleLayer.idleChildren). */
  readonly idleChildren?: readonly string[];
  /** Children called through their weights only (see ModuleLayer.functionalChildren). */
  readonly functionalChildren?: readonly string[];
}

/** The options the trace was made under. */
export interface TraceSettings {
  readonly training: boolean;
  readonly gradEnabled: boolean;
  readonly device: Device;
  readonly framework?: Framework;
  readonly paramDtype: DType;
}

/** A traced model: everything the accounting and the reports read. */
export interface IR {
  readonly tensors: readonly IRTensor[];
  readonly storages: readonly IRStorage[];
  readonly ops: readonly IROp[];
  readonly modules: readonly IRModule[];
  readonly inputs: readonly number[];
  readonly outputs: readonly number[];
  /** The scalar loss tensor of the training step, when one was added or the model returns one. */
  readonly lossOutput: number | null;
  /** Target tensors the loss reads (int64 class indices). */
  readonly targets: readonly number[];
  /** Storages kept alive until an op index by references the ops do not show (autocast cache, locals). */
  readonly holds: readonly { readonly storage: number; readonly until: number }[];
  readonly regions: readonly IRRegion[];
  readonly settings: TraceSettings;
  /** Dimensions that must be >= 1 for the shapes to exist (symbolic inputs). */
  readonly constraints: readonly Dim[];
}
