import type { Ledger } from '../../../memory/ledger.js';
import type { wholeGradients } from '../../../memory/residency/kit.js';
import type { DType } from '../../../tensor/dtype.js';
import type { IR, IROp } from '../../../trace/ir.js';

/* The types the ZeRO stages share (residency.ts builds them, zero12.ts, zero3.ts and the coordinator read them). */

/** What every stage reads off the trace, and the pieces both build on. */
export interface Common {
  readonly ir: IR;
  readonly ledger: Ledger;
  /** Trainable parameter tensors in `model.parameters()` order (the param group's order). */
  readonly order: readonly number[];
  /** Every parameter tensor in `model.parameters()` order (ZeRO-3's ds_id order). */
  readonly all: readonly number[];
  readonly n: (param: number) => number;
  /** The trainable parameters' dtype (the model's: DeepSpeed casts them, eng:1537-1550). */
  readonly lp: DType;
  readonly lpBytes: (elements: number) => number;
  /** Ops whose backward node runs (the simulator's rule: recorded, with a backward, reached by a gradient). */
  readonly runs: Uint8Array;
  /** Tensors a gradient reaches. */
  readonly reached: Uint8Array;
  /** Params whose post-accumulate-grad hook fires after this op's node (their last producer in backward). */
  readonly hooksAt: ReadonlyMap<number, readonly number[]>;
  /** The engine's hook dividing each returned tensor's gradient by the accumulation steps (eng:2837-2839, eng:2996-3002): tensors by producer op. */
  readonly outputHooks: ReadonlyMap<number, readonly number[]>;
  readonly trainable: (param: number) => boolean;
  /** Autograd's whole gradients of the trainable parameters, as one GPU makes them. */
  readonly gradients: ReturnType<typeof wholeGradients>;
  /** A gradient's storage goes (`.grad = None`, or copied into a bucket and freed). */
  readonly freeGrad: (param: number) => void;
  /** The engine's output hook before op `op`'s backward node (see `outputHooks`). */
  readonly outputHook: (op: IROp, prefix: string) => void;
  /** The optimizer on one flat fp32 partition of `elements` (see flatOptimizer). */
  readonly flatOptimizer: (elements: number, label: string) => FlatOptimizer;
}

/** The optimizer on one flat fp32 partition: its state's bytes (device and host) and its step. */
export interface FlatOptimizer {
  readonly bytes: number;
  /**
   * The state of the CPU optimizer ZeRO-Offload steps with instead: DeepSpeedCPUAdam and
   * DeepSpeedCPULion both make fp32 exp_avg and exp_avg_sq of the partition and keep `step` as a
   * Python int (ops/adam/cpu_adam.py:145-154, ops/lion/cpu_lion.py:110-119).
   */
  readonly hostBytes: number;
  readonly allocate: () => number[];
  readonly step: () => void;
}

/** ZeRO-3's partitions of every parameter over N ranks and the persistent parameters (what the coordinator and the step read). */
export interface Partitions {
  /** A parameter's partition q = ⌈n/N⌉ (pp:1788-1789). */
  readonly q: (param: number) => number;
  readonly dtypeOf: (param: number) => DType;
  /** Bytes of a parameter padded to q·N (its all-gather buffer). */
  readonly paddedBytes: (param: number) => number;
  /** Bytes of a parameter's partition. */
  readonly partitionBytes: (param: number) => number;
  /** ds_id order (`model.parameters()` order). */
  readonly byId: (a: number, b: number) => number;
  /** Q = Σq over the trainable parameters (lp_param_buffer, s3:918-924). */
  readonly Q: number;
  readonly persistent: ReadonlySet<number>;
  /** The persistent parameters in ds_id order. */
  readonly persistentList: readonly number[];
  /** Bytes a persistent parameter holds gathered. */
  readonly persistentBytes: (param: number) => number;
}
