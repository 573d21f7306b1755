import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { didYouMean, show } from '../validate.js';

/** GPU architecture families (they decide default runtime overheads). */
export type GpuFamily = 'volta' | 'turing' | 'ampere' | 'ada' | 'hopper' | 'cdna3';

/**
 * How exactly a published figure gives the bytes torch reports:
 * - `bytes`: the exact byte count (CUDA `deviceQuery`'s "(N bytes)", which is
 *   `cudaDeviceProp.totalGlobalMem`, the field `torch.cuda.get_device_properties().total_memory` returns);
 * - `mib`: whole MiB (`_CudaDeviceProperties(... total_memory=81050MB ...)` prints `bytes // 2^20`);
 * - `gib-2dp`: GiB to two decimals, the true total within ±0.005 GiB (±5.4 MB) — PyTorch's
 *   out-of-memory message ("GPU 0 has a total capacity of 79.25 GiB") and vLLM's
 *   `total_gpu_memory (79.22GiB)`, both `torch.cuda.mem_get_info()[1]`.
 */
export type CapacityPrecision = 'bytes' | 'mib' | 'gib-2dp';

/** One published figure of a GPU's total as torch reports it, with where it was printed. */
export interface CapacityFigure {
  /** The bytes the figure stands for (for `gib-2dp`, `round(GiB × 2^30)`; for `mib`, `MiB × 2^20`). */
  readonly bytes: number;
  /** The figure as printed, e.g. `79.22GiB`, `40339 MBytes (42298834944 bytes)`. */
  readonly printed: string;
  readonly precision: CapacityPrecision;
  /** Where it was printed: a GitHub issue, pull request or file URL. */
  readonly source: string;
  /** A short verbatim quote from that source holding `printed`. */
  readonly quote: string;
  /** The variant, driver or other context that explains a figure differing from another. */
  readonly note?: string;
}

/** The total torch reports for a GPU: the figure used, and others published for other variants or drivers. */
export interface TorchCapacity extends CapacityFigure {
  /** Other published figures for the same catalog GPU (another board, driver or ECC setting). */
  readonly others?: readonly CapacityFigure[];
}

/** A GPU as vram-ts needs it: its memory and family. */
export interface GpuSpec {
  readonly name: string;
  /**
   * Total device memory in bytes, as the driver reports it (nvidia-smi "Total", in MiB × 2^20;
   * `rocm-smi` for AMD). Larger than what torch can see: torch's total is {@link GpuSpec.capacity}.
   * `fits()` and `memoryBudget()` read this field.
   */
  readonly memoryBytes: number;
  /**
   * The size on the label ("80GB") in GiB × 2^30: the convention `memoryBudget('80GB')` reads, and the
   * unit HBM and GDDR parts are built in (an A100 80GB's driver total is exactly 80 GiB). A label,
   * not a measurement: neither the driver's total nor torch's equals it.
   */
  readonly nominalBytes: number;
  readonly family: GpuFamily;
  /** Other names people use for it. */
  readonly aliases: readonly string[];
  /**
   * The total PyTorch reports (`torch.cuda.get_device_properties(0).total_memory`,
   * `torch.cuda.mem_get_info()[1]`) from a published log, with its source and quote; absent where
   * none was found (see {@link torchCapacity}).
   */
  readonly capacity?: TorchCapacity;
  /**
   * The total vLLM's engine sizes itself from, where a published vLLM log gives it (0.01 GiB).
   * Kept as it was for the engines that read it (`vllmEngine`, `sglangEngine`, `rlJob`); where both
   * are present it equals `capacity.bytes`.
   */
  readonly torchTotal?: { readonly bytes: number; readonly source: string };
}

const MiB = 2 ** 20;
const GiB = 2 ** 30;

/** A figure printed as GiB to two decimals (PyTorch's OOM message, vLLM's memory profile). */
function gib(printed: string, source: string, quote: string, note?: string): CapacityFigure {
  const value = Number(/^(\d+\.\d\d) ?GiB$/.exec(printed)?.[1]);
  return { bytes: Math.round(value * GiB), printed, precision: 'gib-2dp', source, quote, ...(note !== undefined ? { note } : {}) };
}

/** A figure printed as an exact byte count (CUDA deviceQuery's "Total amount of global memory"). */
function exact(printed: string, source: string, quote: string, note?: string): CapacityFigure {
  const value = Number(/\((\d+) bytes\)$/.exec(printed)?.[1]);
  return { bytes: value, printed, precision: 'bytes', source, quote, ...(note !== undefined ? { note } : {}) };
}

/** The figure used, with the others published for the same catalog GPU. */
function capacity(used: CapacityFigure, ...others: CapacityFigure[]): TorchCapacity {
  return others.length === 0 ? used : { ...used, others };
}

/** The legacy `torchTotal` of a vLLM-log figure. */
function legacy(figure: CapacityFigure, what: string): { readonly bytes: number; readonly source: string } {
  return { bytes: figure.bytes, source: `${what}, total_gpu_memory (${figure.printed}): ${figure.source}` };
}

const VLLM_A100_40 = gib('39.38GiB', 'https://github.com/vllm-project/vllm/issues/16570', 'total_gpu_memory (39.38GiB)');
const VLLM_3090 = gib('23.58GiB', 'https://github.com/vllm-project/vllm/issues/10517', 'total_gpu_memory (23.58GiB)');
const VLLM_A6000 = gib('47.54GiB', 'https://github.com/vllm-project/vllm/issues/10360', 'total_gpu_memory (47.54GiB)');
const VLLM_L40S = gib('44.42GiB', 'https://github.com/vllm-project/vllm/issues/15815', 'total_gpu_memory (44.42GiB)');
const VLLM_H100 = gib(
  '79.22GiB',
  'https://github.com/vllm-project/vllm/pull/12126',
  'it can work on H100-80G now: ... the current vLLM instance can use total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB',
);

/**
 * Named GPUs. `memoryBytes` is the total the driver reports (`nvidia-smi` MiB; for the MI300X,
 * `rocm-smi`); `capacity` is what torch reports (`get_device_properties(0).total_memory`,
 * `mem_get_info()[1]`), 1–3% less, quoted from a published log; `nominalBytes` is the label.
 * Usable memory is lower still by the CUDA context: see the runtime lines. docs/gpus.md has the
 * table (`npx tsx scripts/gpus.ts`).
 */
export const GPUS: readonly GpuSpec[] = deepFreeze([
  {
    name: 'V100-16GB',
    memoryBytes: 16_160 * MiB,
    nominalBytes: 16 * GiB,
    family: 'volta',
    aliases: ['v100', 'tesla-v100-16gb'],
    capacity: gib(
      '15.78 GiB',
      'https://github.com/kchengiva/Shift-GCN/issues/34',
      'RuntimeError: CUDA out of memory. Tried to allocate 236.00 MiB (GPU 0; 15.78 GiB total capacity; ... I have used a 16G V100',
      'SXM2 or PCIe not said',
    ),
  },
  {
    name: 'V100-32GB',
    memoryBytes: 32_510 * MiB,
    nominalBytes: 32 * GiB,
    family: 'volta',
    aliases: ['tesla-v100-32gb'],
    capacity: capacity(
      gib(
        '31.74 GiB',
        'https://github.com/liucongg/ChatGLM-Finetuning/issues/73',
        '使用V100 32GB报GPU显存不足 ... (GPU 0; 31.74 GiB total capacity; 30.41 GiB already allocated',
      ),
    ),
  },
  {
    name: 'T4',
    memoryBytes: 15_360 * MiB,
    nominalBytes: 16 * GiB,
    family: 'turing',
    aliases: ['tesla-t4'],
    capacity: capacity(
      gib(
        '14.75 GiB',
        'https://github.com/hpcaitech/Open-Sora/issues/697',
        'I am running to following code on Google Colab with T4 GPU ... GPU 0 has a total capacity of 14.75 GiB of which 73.06 MiB is free',
      ),
      gib(
        '14.75GiB',
        'https://github.com/NVIDIA/DALI/issues/1813',
        'name: Tesla T4 computeCapability: 7.5 ... deviceMemorySize: 14.75GiB',
        "TensorFlow's device log: the same driver total (cuDeviceTotalMem) torch's total_memory reads",
      ),
    ),
  },
  {
    name: 'A100-40GB',
    memoryBytes: 40_960 * MiB,
    nominalBytes: 40 * GiB,
    family: 'ampere',
    aliases: ['a100-40', 'a100-sxm4-40gb', 'a100-pcie-40gb'],
    capacity: capacity(
      { ...VLLM_A100_40, note: 'the board (SXM4 or PCIe) is not named; kept equal to torchTotal' },
      exact(
        '40339 MBytes (42298834944 bytes)',
        'https://github.com/bottlerocket-os/bottlerocket/pull/3873',
        'Device 2: "NVIDIA A100-SXM4-40GB" ... Total amount of global memory:                 40339 MBytes (42298834944 bytes)',
        'A100-SXM4-40GB, CUDA deviceQuery (driver 12.2): totalGlobalMem, the field total_memory returns; 39.39 GiB',
      ),
      gib(
        '39.50 GiB',
        'https://github.com/TianheWu/CoSeR/issues/10',
        'CUDA out of memory(Do inference on one A100) ... GPU 0 has a total capacity of 39.50 GiB of which 25.24 GiB is free',
        'an A100 40GB whose board and driver the issue does not name',
      ),
    ),
    torchTotal: legacy(VLLM_A100_40, 'vLLM log'),
  },
  {
    name: 'A100-80GB',
    memoryBytes: 81_920 * MiB,
    nominalBytes: 80 * GiB,
    family: 'ampere',
    aliases: ['a100', 'a100-80', 'a100-sxm4-80gb'],
    capacity: capacity(
      gib(
        '79.25 GiB',
        'https://github.com/HiDream-ai/VAREdit/issues/6',
        'I use an A100 to run the example of Basic Usage, but torch.OutOfMemoryError ... GPU 0 has a total capacity of 79.25 GiB of which 11.19 MiB is free',
        'an 80GB A100 (no 40GB board reaches 79 GiB); the board is not named',
      ),
      gib(
        '79.25 GiB',
        'https://github.com/levihsu/OOTDiffusion/issues/235',
        'my day a100 error is low on memory ... (GPU 0; 79.25 GiB total capacity; 27.98 GiB already allocated',
      ),
      exact(
        '81158 MBytes (85100068864 bytes)',
        'https://github.com/thamada/nvidia-smi/blob/HEAD/nvsim/A100SXMx4_deviceQuery.py',
        'Device 0: "NVIDIA A100-SXM4-80GB" ... Total amount of global memory:                 81158 MBytes (85100068864 bytes)',
        'A100-SXM4-80GB, CUDA deviceQuery (driver 12.5): 79.26 GiB',
      ),
    ),
  },
  { name: 'A800-40GB', memoryBytes: 40_960 * MiB, nominalBytes: 40 * GiB, family: 'ampere', aliases: ['a800-40'] },
  {
    name: 'A800-80GB',
    memoryBytes: 81_920 * MiB,
    nominalBytes: 80 * GiB,
    family: 'ampere',
    aliases: ['a800', 'a800-80', 'a800-sxm4-80gb'],
    capacity: capacity(
      gib(
        '79.33 GiB',
        'https://github.com/hahnyuan/PB-LLM/issues/3',
        'I used A800-80G to train PB-LLM, but there was a memory overflow. ... GPU 0 has a total capacty of 79.33 GiB of which 49.81 MiB is free',
        'SXM or PCIe not said; the same figure on eight A800s: https://github.com/MoonshotAI/Kimi-VL/issues/51',
      ),
      gib(
        '79.32 GiB',
        'https://github.com/Tencent-Hunyuan/HunyuanImage-3.0/issues/22',
        '按照官方代码推理4*80g a800爆显存 ... GPU 0 has a total capacity of 79.32 GiB of which 10.81 GiB is free',
      ),
      gib('79.25 GiB', 'https://github.com/sgl-project/sglang/issues/1463', 'A800-80G ... GPU 0 has a total capacity of 79.25 GiB of which 2.27 GiB is free'),
    ),
  },
  {
    name: 'RTX-3090',
    memoryBytes: 24_576 * MiB,
    nominalBytes: 24 * GiB,
    family: 'ampere',
    aliases: ['3090', 'rtx3090', 'geforce-rtx-3090'],
    capacity: capacity(VLLM_3090),
    torchTotal: legacy(VLLM_3090, 'vLLM log'),
  },
  {
    name: 'RTX-A6000',
    memoryBytes: 49_140 * MiB,
    nominalBytes: 48 * GiB,
    family: 'ampere',
    aliases: ['a6000', 'rtx-a6000', 'nvidia-rtx-a6000'],
    capacity: capacity(VLLM_A6000),
    torchTotal: legacy(VLLM_A6000, 'vLLM log'),
  },
  {
    name: 'L40S',
    memoryBytes: 46_068 * MiB,
    nominalBytes: 48 * GiB,
    family: 'ada',
    aliases: ['l40s', 'nvidia-l40s'],
    capacity: capacity(VLLM_L40S),
    torchTotal: legacy(VLLM_L40S, 'vLLM log'),
  },
  {
    name: 'L4',
    memoryBytes: 23_034 * MiB,
    nominalBytes: 24 * GiB,
    family: 'ada',
    aliases: ['nvidia-l4'],
    capacity: gib(
      '22.03 GiB',
      'https://github.com/ArcInstitute/evo2/issues/190',
      'GPU 0 has a total capacity of 22.03 GiB of which 1.25 GiB is free. ... Is a L4 GPU not enough to run the test script?',
    ),
  },
  {
    name: 'RTX-4090',
    memoryBytes: 24_564 * MiB,
    nominalBytes: 24 * GiB,
    family: 'ada',
    aliases: ['4090', 'rtx4090', 'geforce-rtx-4090'],
    capacity: capacity(
      gib(
        '23.64 GiB',
        'https://github.com/ali-vilab/VGen/issues/104',
        'I use RTX 4090 24GB GPU. ... GPU 0 has a total capacity of 23.64 GiB of which 319.38 MiB is free',
      ),
      gib(
        '23.64 GiB',
        'https://github.com/3DTopia/Phidias-Diffusion/issues/8',
        'The 4090 GPU out of CUDA memory ... GPU 0 has a total capacty of 23.64 GiB of which 8.26 GiB is free',
      ),
      gib(
        '23.65 GiB',
        'https://github.com/TRI-ML/packnet-sfm/issues/250',
        'rtx 4090 RuntimeError: CUDA out of memory. ... (GPU 0; 23.65 GiB',
        'another setup (driver not given): 0.01 GiB more',
      ),
      gib(
        '23.61 GiB',
        'https://github.com/pinokiofactory/flux-webui/issues/11',
        'Out of Memory - RTX 4090 (24GB RAM) ... GPU 0 has a total capacity of 23.61 GiB of which 45.06 MiB is free',
        'another setup (driver and OS not given): 0.03 GiB less',
      ),
    ),
  },
  {
    name: 'RTX-4060',
    memoryBytes: 8_188 * MiB,
    nominalBytes: 8 * GiB,
    family: 'ada',
    aliases: ['4060', 'rtx4060', 'geforce-rtx-4060'],
    capacity: gib(
      '7.75 GiB',
      'https://github.com/ESRSchao/EdgeRegNet/issues/2',
      'GPU 0 has a total capacity of 7.75 GiB of which 279.12 MiB is free. ... GPU: RTX 4060 (8GB VRAM)',
      'likely the laptop RTX 4060 (the thread names an Intel Core Ultra 9 185H, a mobile CPU); no desktop figure found',
    ),
  },
  {
    name: 'H100-80GB',
    memoryBytes: 81_559 * MiB,
    nominalBytes: 80 * GiB,
    family: 'hopper',
    aliases: ['h100', 'h100-sxm', 'h100-80', 'h100-sxm5-80gb'],
    capacity: capacity(
      { ...VLLM_H100, note: 'kept equal to torchTotal; figures differ by driver' },
      gib(
        '79.11 GiB',
        'https://github.com/vllm-project/vllm/issues/27508',
        "[Bug]: openai/gpt-oss-120b can't run on H100 ... GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free",
        'another H100 80GB setup (board and driver not given): 0.11 GiB less',
      ),
      exact(
        '81106 MBytes (85045477376 bytes)',
        'https://github.com/thamada/nvidia-smi/blob/HEAD/nvsim/H100SXMx8_deviceQuery.py',
        'Device 0: "NVIDIA H100 80GB HBM3" ... Total amount of global memory:                 81106 MBytes (85045477376 bytes)',
        'H100 SXM5 (NVIDIA H100 80GB HBM3), CUDA deviceQuery (driver 12.7): 79.20 GiB',
      ),
    ),
    torchTotal: legacy(VLLM_H100, 'vLLM log on H100-80G'),
  },
  {
    name: 'H200-141GB',
    memoryBytes: 143_771 * MiB,
    nominalBytes: 141 * GiB,
    family: 'hopper',
    aliases: ['h200', 'h200-sxm'],
    capacity: gib(
      '139.81 GiB',
      'https://github.com/sungwon-chae/arxiv_confi/blob/HEAD/etu_logging.md',
      'GPU 0: NVIDIA H200 (139.8 GB) ... GPU 0 has a total capacity of 139.81 GiB of which 24.12 MiB is free',
      "a user's run log committed to a repository (not an issue thread)",
    ),
  },
  {
    name: 'MI300X',
    memoryBytes: 196_592 * MiB,
    nominalBytes: 192 * GiB,
    family: 'cdna3',
    aliases: ['mi300x', 'instinct-mi300x'],
    capacity: gib(
      '191.98 GiB',
      'https://github.com/vllm-project/vllm/issues/7951',
      'HIP out of memory. ... GPU 0 has a total capacity of 191.98 GiB of which 1.32 GiB is free',
      "ROCm's torch; the thread's environment names the AMD Instinct MI300X",
    ),
  },
]);

function normalise(name: string): string {
  return name
    .trim()
    .toLowerCase()
    .replace(/[\s_]+/g, '-');
}

/** The catalog name of the GPU whose name or alias is closest to a misspelt one, if one is close. */
function nearest(key: string): string | undefined {
  const names = GPUS.flatMap((g) => [normalise(g.name), ...g.aliases]);
  const hint = didYouMean(key, names);
  return hint === undefined ? undefined : GPUS.find((g) => normalise(g.name) === hint || g.aliases.includes(hint))?.name;
}

/**
 * A GPU by catalog name or alias (case-insensitive), e.g. `A800-80GB`, `h100`, `rtx 4090`; a
 * VramError with the closest name for an unknown one, and for anything but a string.
 *
 * @example
 * ```ts
 * import { gpu } from 'vram-ts';
 * console.log(gpu('A800-80GB').memoryBytes / 2 ** 20); // 81920
 * ```
 */
export function gpu(name: string): GpuSpec {
  if (typeof name !== 'string')
    fail('unknown-gpu', 'a GPU is named by a string', { path: ['gpu'], expected: GPUS.map((g) => g.name).join(' | '), received: show(name) });
  const key = normalise(name);
  const found = GPUS.find((g) => normalise(g.name) === key || g.aliases.includes(key));
  if (found === undefined) {
    const near = name.length <= 64 ? nearest(key) : undefined;
    fail('unknown-gpu', `unknown GPU${near !== undefined ? `; did you mean ${JSON.stringify(near)}?` : ''}`, {
      path: ['gpu'],
      expected: GPUS.map((g) => g.name).join(' | '),
      received: show(name.length > 64 ? `${name.slice(0, 64)}…` : name),
    });
  }
  return found;
}

/**
 * The total torch reports for a GPU, in bytes (`torch.cuda.get_device_properties(0).total_memory`,
 * `torch.cuda.mem_get_info()[1]`): {@link GpuSpec.capacity}, taken from a published log. A catalog
 * name, an alias or a spec; a VramError naming the GPU where no published figure was found (measure
 * it and pass bytes instead).
 *
 * @example
 * ```ts
 * import { torchCapacity } from 'vram-ts';
 * console.log((torchCapacity('A100-80GB') / 2 ** 30).toFixed(2)); // "79.25"
 * ```
 */
export function torchCapacity(which: string | GpuSpec): number {
  const spec = typeof which === 'object' && which !== null ? gpu(which.name) : gpu(which as string);
  return (
    spec.capacity?.bytes ??
    fail('not-modelled', `no published figure of the total PyTorch reports for ${spec.name}: measure torch.cuda.mem_get_info()[1] and give its bytes`, {
      path: ['gpu'],
      received: show(spec.name),
    })
  );
}

/**
 * Bytes of a memory budget: a catalog GPU name, a size like `24GB`, `24GiB`, `80G`, or a byte count.
 * `GB` is read as GiB, as people use it for GPU memory.
 *
 * @example
 * ```ts
 * import { memoryBudget } from 'vram-ts';
 * console.log(memoryBudget('24GB'), memoryBudget(1e9)); // 25769803776 1000000000
 * ```
 */
export function memoryBudget(value: string | number): number {
  if (typeof value !== 'string' && typeof value !== 'number')
    fail('bad-option', 'a memory budget is a GPU name, a size or a byte count', { path: ['gpu'], expected: 'string | number', received: show(value) });
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value <= 0)
      fail('bad-option', 'a memory budget in bytes must be a positive integer', { path: ['gpu'], received: String(value) });
    return value;
  }
  const size = value.length > 64 ? null : /^\s*(\d+(?:\.\d+)?)\s*(k|m|g|t)i?b?\s*$/i.exec(value);
  if (size !== null) {
    const scale = { k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 }[size[2]!.toLowerCase() as 'k' | 'm' | 'g' | 't'];
    const bytes = Math.floor(Number(size[1]) * scale);
    if (!Number.isSafeInteger(bytes) || bytes <= 0)
      fail('bad-option', 'a memory budget must be positive and below 2^53 bytes', {
        path: ['gpu'],
        expected: 'a size such as 24GB',
        received: JSON.stringify(value),
      });
    return bytes;
  }
  return gpu(value).memoryBytes;
}
