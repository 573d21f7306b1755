import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { didYouMean, show } from '../validate.js';

/** GPU architecture families (they decide default runtime overheads). */
export type GpuFamily = 'volta' | 'turing' | 'ampere' | 'ada' | 'hopper' | 'cdna3';

/** A GPU as vram-ts needs it: its memory and family. */
export interface GpuSpec {
  readonly name: string;
  /** Total device memory in bytes, as the driver reports it (nvidia-smi "Total", in MiB × 2^20). */
  readonly memoryBytes: number;
  readonly family: GpuFamily;
  /** Other names people use for it. */
  readonly aliases: readonly string[];
  /**
   * The total PyTorch reports (`torch.cuda.mem_get_info()[1]`), where a published log gives it, with
   * that log: vLLM prints it to 0.01 GiB ("total_gpu_memory"), so the bytes are that figure's.
   */
  readonly torchTotal?: { readonly bytes: number; readonly source: string };
}

const MiB = 2 ** 20;
const GiB = 2 ** 30;

/** A total as a vLLM log printed it (GiB to two decimals). */
function logged(gib: number, source: string): { readonly bytes: number; readonly source: string } {
  return { bytes: Math.round(gib * GiB), source };
}

/**
 * Named GPUs. Memory is the total the driver reports (`nvidia-smi` MiB; for the MI300X,
 * `rocm-smi`), which is what `torch.cuda.get_device_properties(0).total_memory` returns;
 * the marketing "GB" differs (an 80 GB card reports 81,920 MiB on A100/A800, 81,559 MiB on
 * H100 SXM). Usable memory is lower by the CUDA context: see the runtime lines.
 */
export const GPUS: readonly GpuSpec[] = deepFreeze([
  { name: 'V100-16GB', memoryBytes: 16_160 * MiB, family: 'volta', aliases: ['v100', 'tesla-v100-16gb'] },
  { name: 'V100-32GB', memoryBytes: 32_510 * MiB, family: 'volta', aliases: ['tesla-v100-32gb'] },
  { name: 'T4', memoryBytes: 15_360 * MiB, family: 'turing', aliases: ['tesla-t4'] },
  {
    name: 'A100-40GB',
    memoryBytes: 40_960 * MiB,
    family: 'ampere',
    aliases: ['a100-40', 'a100-sxm4-40gb', 'a100-pcie-40gb'],
    torchTotal: logged(39.38, 'vLLM log, total_gpu_memory (39.38GiB): https://github.com/vllm-project/vllm/issues/16570'),
  },
  { name: 'A100-80GB', memoryBytes: 81_920 * MiB, family: 'ampere', aliases: ['a100', 'a100-80', 'a100-sxm4-80gb'] },
  { name: 'A800-40GB', memoryBytes: 40_960 * MiB, family: 'ampere', aliases: ['a800-40'] },
  { name: 'A800-80GB', memoryBytes: 81_920 * MiB, family: 'ampere', aliases: ['a800', 'a800-80', 'a800-sxm4-80gb'] },
  {
    name: 'RTX-3090',
    memoryBytes: 24_576 * MiB,
    family: 'ampere',
    aliases: ['3090', 'rtx3090', 'geforce-rtx-3090'],
    torchTotal: logged(23.58, 'vLLM log, total_gpu_memory (23.58GiB): https://github.com/vllm-project/vllm/issues/10517'),
  },
  {
    name: 'RTX-A6000',
    memoryBytes: 49_140 * MiB,
    family: 'ampere',
    aliases: ['a6000', 'rtx-a6000', 'nvidia-rtx-a6000'],
    torchTotal: logged(47.54, 'vLLM log, total_gpu_memory (47.54GiB): https://github.com/vllm-project/vllm/issues/10360'),
  },
  {
    name: 'L40S',
    memoryBytes: 46_068 * MiB,
    family: 'ada',
    aliases: ['l40s', 'nvidia-l40s'],
    torchTotal: logged(44.42, 'vLLM log, total_gpu_memory (44.42GiB): https://github.com/vllm-project/vllm/issues/15815'),
  },
  { name: 'L4', memoryBytes: 23_034 * MiB, family: 'ada', aliases: ['nvidia-l4'] },
  { name: 'RTX-4090', memoryBytes: 24_564 * MiB, family: 'ada', aliases: ['4090', 'rtx4090', 'geforce-rtx-4090'] },
  { name: 'RTX-4060', memoryBytes: 8_188 * MiB, family: 'ada', aliases: ['4060', 'rtx4060', 'geforce-rtx-4060'] },
  {
    name: 'H100-80GB',
    memoryBytes: 81_559 * MiB,
    family: 'hopper',
    aliases: ['h100', 'h100-sxm', 'h100-80', 'h100-sxm5-80gb'],
    torchTotal: logged(79.22, 'vLLM log on H100-80G, total_gpu_memory (79.22GiB): https://github.com/vllm-project/vllm/pull/12126'),
  },
  { name: 'H200-141GB', memoryBytes: 143_771 * MiB, family: 'hopper', aliases: ['h200', 'h200-sxm'] },
  { name: 'MI300X', memoryBytes: 196_592 * MiB, family: 'cdna3', aliases: ['mi300x', 'instinct-mi300x'] },
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
