import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { GpuFamily } from '../gpus/catalog.js';
import { anyOf, boolean, integer, object, oneOf, validate } from '../validate.js';
import { type NcclOptions, ncclLinesUnchecked, ncclOptions } from './nccl.js';

/** Opt-in runtime lines: memory the CUDA runtime and libraries take beside tensors. */
export interface RuntimeOptions {
  /** CUDA context (bytes, or true for the family default). */
  readonly context?: boolean | number;
  /** cuBLAS workspace (bytes, or true for the default per handle). */
  readonly cublas?: boolean | number;
  /**
   * cuBLAS handles, each with its workspace: one per thread and stream that runs matmuls.
   * Default 1; {@link fits} uses 2 for training, since autograd's backward runs on a thread of
   * its own (measured on an H200 with PyTorch 2.11: 2 × 32 MiB stay allocated after a step).
   */
  readonly cublasHandles?: number;
  /** cuDNN workspace in bytes (algorithm-dependent; no default). */
  readonly cudnnWorkspace?: number;
  /** NCCL communicator buffers, one line per buffer kind and communicator (see `ncclLines`; fits does not take it yet). */
  readonly nccl?: NcclOptions;
}

/** One runtime line, reported beside the allocated peak, never folded into it. */
export interface RuntimeLine {
  readonly label: string;
  readonly bytes: number;
  /** Where the figure comes from. */
  readonly source: string;
}

const MiB = 2 ** 20;

/**
 * cuBLAS workspace per handle: PyTorch's default CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8"
 * (2 × 4 MiB + 8 × 16 KiB = 8,519,680 B), and 32 MiB on Hopper (":4096:8", since PyTorch 2.1).
 *
 * @example
 * ```ts
 * import { cublasWorkspace } from 'vram-ts/internals';
 * console.log(cublasWorkspace('ampere'), cublasWorkspace('hopper')); // 8519680 33554432
 * ```
 */
export function cublasWorkspace(family: GpuFamily): number {
  return family === 'hopper' ? 32 * MiB : 4096 * 1024 * 2 + 16 * 1024 * 8;
}

/**
 * Default CUDA context per family. Hopper's is measured (tools/measure_cuda.py on an H200,
 * PyTorch 2.11, CUDA 13.0, driver 580: device memory in use that the caching allocator did
 * not reserve, after `torch.cuda.init()`); the others are round figures for PyTorch 2.x with
 * lazy module loading, not measured. The real figure depends on the driver, the CUDA version
 * and which kernels load: measure yours and pass it.
 */
export const CONTEXT_DEFAULTS: Readonly<Record<GpuFamily, number>> = deepFreeze({
  volta: 300 * MiB,
  turing: 300 * MiB,
  ampere: 400 * MiB,
  ada: 400 * MiB,
  hopper: 648_871_936,
  cdna3: 500 * MiB,
});

const MEASURED_CONTEXT: ReadonlySet<GpuFamily> = new Set(['hopper']);

const FAMILIES = Object.keys(CONTEXT_DEFAULTS);
const bytesOrDefault = anyOf([boolean, integer(0)], 'true, false or a byte count');

/** RuntimeOptions, key by key (fits checks them as its `runtime`). */
const runtimeOptions = object({
  fields: { context: bytesOrDefault, cublas: bytesOrDefault, cublasHandles: integer(0, 1024), cudnnWorkspace: integer(0), nccl: ncclOptions },
});

/**
 * The runtime lines asked for. The options are checked key by key (byte counts are integers
 * >= 0), the family must be one of {@link GpuFamily}: a VramError with the path otherwise, and an
 * `overflow` where the handles' workspaces together pass 2^53 bytes.
 *
 * @example
 * ```ts
 * import { runtimeLines } from 'vram-ts';
 * console.log(runtimeLines({ cublas: true }, 'ampere')[0]?.bytes); // 8519680
 * ```
 */
export function runtimeLines(options: RuntimeOptions, family: GpuFamily): RuntimeLine[] {
  validate(options, runtimeOptions, ['runtimeLines', 'options']);
  validate(family, oneOf(FAMILIES, 'GPU family'), ['runtimeLines', 'family']);
  const lines: RuntimeLine[] = [];
  if (options.context !== undefined && options.context !== false) {
    lines.push({
      label: 'CUDA context',
      bytes: options.context === true ? CONTEXT_DEFAULTS[family] : options.context,
      source:
        options.context !== true
          ? 'given'
          : MEASURED_CONTEXT.has(family)
            ? `default for ${family} (measured on an H200, PyTorch 2.11, CUDA 13.0; yours may differ)`
            : `default for ${family} (not measured; pass your own)`,
    });
  }
  if (options.cublas !== undefined && options.cublas !== false) {
    const handles = options.cublasHandles ?? 1;
    const each = options.cublas === true ? cublasWorkspace(family) : options.cublas;
    if (!Number.isSafeInteger(each * handles))
      fail('overflow', 'the cuBLAS workspaces together are past 2^53 bytes', {
        path: ['runtimeLines', 'options', 'cublas'],
        expected: `at most ${Math.floor(Number.MAX_SAFE_INTEGER / Math.max(handles, 1))} bytes per handle`,
        received: String(each),
      });
    lines.push({
      label: `cuBLAS workspace (${handles} handle${handles === 1 ? '' : 's'})`,
      bytes: each * handles,
      source: options.cublas === true ? 'PyTorch default CUBLAS_WORKSPACE_CONFIG' : 'given',
    });
  }
  if (options.cudnnWorkspace !== undefined && options.cudnnWorkspace > 0) {
    lines.push({ label: 'cuDNN workspace', bytes: options.cudnnWorkspace, source: 'given' });
  }
  if (options.nccl !== undefined) lines.push(...ncclLinesUnchecked(options.nccl, ['runtimeLines', 'options', 'nccl']));
  return lines;
}
