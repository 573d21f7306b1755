import type { Dim } from '../../sym/expr.js';
import type { IR, IROp } from '../../trace/ir.js';
import type { Ledger } from '../ledger.js';
import type { OptimizerSpec } from '../optimizers.js';
import type { Plan } from '../step-plan.js';

/** What a residency policy works with: the traced model, its step plan, the ledger of the step. */
export interface RankContext {
  readonly ir: IR;
  readonly plan: Plan;
  readonly ledger: Ledger;
  readonly optimizer: OptimizerSpec | null;
  /** The repeated-model block a storage belongs to (-1 outside blocks, or without them). */
  readonly owner: (storage: number) => number;
  /** How many times block 1 counts (reduced repeated blocks), else 1. */
  readonly times: number;
  /** Micro-batches per optimizer step (gradient accumulation). */
  readonly microBatches: number;
  /** With reduced repeated blocks: the block an op belongs to (the ledger's context while it runs); else null. */
  readonly unitOfOp: ((op: number) => number) | null;
  /**
   * Micro-batches whose backward has ended since `zeroGrad` (the simulator counts them, so no
   * engine keeps a counter): during the k-th micro-batch's backward this is k − 1.
   */
  readonly microDone: () => number;
  /** Whether the parameter tensor `param` is trained (its storage is trainable). */
  readonly trainable: (param: number) => boolean;
}

/**
 * A residency as an engine writes it: only the hooks it needs. The simulator fills in the rest
 * as doing nothing (`withDefaults`).
 */
export type EngineHooks = Pick<Residency, 'start' | 'step' | 'optimizerState'> & Partial<Omit<Residency, 'start' | 'step' | 'optimizerState'>>;

const nothing = (): void => undefined;

/** The hooks an engine left out, as doing nothing. */
export function withDefaults(hooks: EngineHooks): Residency {
  return {
    param: nothing,
    zeroGrad: nothing,
    beforeForward: nothing,
    afterForward: nothing,
    beforeBackward: nothing,
    paramGrads: nothing,
    afterBackward: nothing,
    endBackward: nothing,
    ...hooks,
  };
}

/**
 * How one device holds a model's parameters, their gradients and the optimizer state over a
 * training step, and what it allocates around them: one GPU, or one rank of a data-parallel
 * engine (DDP buckets, ZeRO partitions, FSDP units gathered and resharded at module
 * boundaries). The step simulator (simulate.ts, autograd.ts) runs the activations and calls
 * these hooks; each engine is one implementation (src/parallel/engines/, one device in single.ts).
 */
export interface Residency {
  /** A parameter storage as the step begins: allocate it if the device holds it whole. */
  readonly param: (storage: number) => void;
  /**
   * The rest of what exists before the steady step (last step's gradients, the optimizer state,
   * the engine's own buffers). Returns the gradient blocks (which the first step does not have)
   * and the state blocks (which the first step makes at its optimizer step).
   */
  readonly start: () => { readonly grads: readonly number[]; readonly state: readonly number[] };
  /** `optimizer.zero_grad(set_to_none=True)`. */
  readonly zeroGrad: () => void;
  /** Before op `op` runs in forward (module boundaries are the engine's to find). */
  readonly beforeForward: (op: IROp, micro: string) => void;
  /** After op `op` ran in forward and what it was the last reader of went. */
  readonly afterForward: (op: IROp, micro: string) => void;
  /** Before op `op`'s backward node runs. */
  readonly beforeBackward: (op: IROp, micro: string) => void;
  /** Inside the node: the parameter gradients it makes (at the kernel's `paramGrads` step). */
  readonly paramGrads: (op: IROp, label: string) => void;
  /** After the node let go of its incoming gradients and saved tensors. */
  readonly afterBackward: (op: IROp, label: string) => void;
  /** After the whole backward of one micro-batch (`last`: the micro-batch before the optimizer step). */
  readonly endBackward: (micro: string, last: boolean) => void;
  /** The optimizer step. */
  readonly step: () => void;
  /** Bytes of the optimizer state on this device (the full model's, with reduced blocks). */
  readonly optimizerState: () => Dim;
  /** Bytes of parameters and gradients this device keeps between steps, when not the whole model's (sharding). */
  readonly resident?: () => { readonly parameters: Dim; readonly gradients: Dim };
  /** With offloading: what the rank keeps in host memory instead (see HostBytes). */
  readonly host?: () => HostBytes;
}

/**
 * What one rank keeps in host (CPU) memory when an engine offloads (`parallel.offload`): the
 * estimate's `bytes.parameters/gradients/optimizer` are then the GPU-resident figures and these
 * the host ones. Page-locked (pinned) or not, they are host memory and never count on the GPU.
 * Read from the engines' sources (DeepSpeed ZeRO-Offload, FSDP2's `CPUOffloadPolicy`), not
 * measured.
 *
 * @example
 * ```ts
 * import { estimate, linear, relu, seq } from 'vram-ts';
 * const mlp = seq(linear({ out: 6 }), relu(), linear({ out: 4 }));
 * const r = estimate(mlp, { input: [2, 8], parallel: { engine: 'fsdp2', dp: 2, offload: { optimizer: true, parameters: true } } });
 * console.log(r.bytes.parameters, r.host?.parameters); // 0 164
 * ```
 */
export interface HostBytes<D extends Dim = Dim> {
  /** Parameter partitions or shards kept on the host (DeepSpeed ZeRO-3 `offload_param`, FSDP2). */
  readonly parameters: D;
  /** Gradient partitions or shards on the host (the fp32 gradient partition the CPU optimizer reads, accumulation buffers). */
  readonly gradients: D;
  /** The fp32 master partition (DeepSpeed) and the optimizer state the CPU step updates. */
  readonly optimizer: D;
  /** The engine's own host staging buffers (DeepSpeed stages 1/2: the bit16 copy-back buffer and the gradient transfer buffer). */
  readonly staging: D;
}
