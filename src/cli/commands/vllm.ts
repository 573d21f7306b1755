/** `vram-ts vllm <model>`: vLLM's start-up on one GPU under vLLM's own flag names (and SGLang's pool beside it). */
import { formatBytes, GPUS, gpu, sglangEngine, vllmEngine, VramError, type ModuleLayer, type VllmEngine, type VllmOptions } from '../lib.js';
import { gpuBudget, listOf } from '../args.js';
import { ENGINE_FLAGS } from '../engine-flags.js';
import { CliError, usage } from '../errors.js';
import { DEFAULTS, type Values } from '../flags.js';
import { VLLM_HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { choice, count, formatOf } from '../values.js';
import { flagOrigin, readVllmConfig, withVllmConfig } from '../vllm-config.js';
import type { ModelCommand, Outcome } from './command.js';

/** The GPU as vLLM reads it: a catalog GPU whose torch-reported total is recorded, or a size. */
export function engineGpu(value: string | undefined): { readonly gpu: string } | { readonly totalBytes: number } {
  if (value === undefined)
    usage('--gpu', "vLLM takes a fraction of the GPU's total memory: give the GPU", {
      expected: `a size as torch reports it (torch.cuda.mem_get_info()[1], e.g. 79.15GiB) or one of ${listOf(
        GPUS.filter((g) => g.torchTotal !== undefined).map((g) => g.name),
      )}`,
    });
  let named: ReturnType<typeof gpu> | undefined;
  try {
    named = gpu(value!);
  } catch {
    named = undefined;
  }
  if (named === undefined) return { totalBytes: gpuBudget(value!) };
  if (named.torchTotal === undefined)
    usage('--gpu', `the total PyTorch reports for ${named.name} is not recorded (its nvidia-smi size is not what vLLM reads)`, {
      expected: `the size torch.cuda.mem_get_info()[1] gives, e.g. --gpu 79.15GiB, or one of ${listOf(
        GPUS.filter((g) => g.torchTotal !== undefined).map((g) => g.name),
      )}`,
      received: JSON.stringify(value),
    });
  return { gpu: named.name };
}

/** vLLM's engine arguments from its flags (shared with rl). */
export function vllmArgs(values: Values): Omit<VllmOptions, 'gpu' | 'totalBytes'> {
  const num = (flag: 'max-model-len' | 'max-num-seqs' | 'max-num-batched-tokens' | 'tensor-parallel-size' | 'block-size') =>
    values[flag] === undefined ? undefined : count(values, flag, 1);
  const read = (flag: string) => (values[flag] === undefined ? undefined : (FLAG_READERS[flag]!(values[flag] as string) as number));
  const measured = {
    weightsBytes: read('weights-memory'),
    activationPeakBytes: read('activation-memory'),
    nonTorchBytes: read('non-torch-memory'),
    cudaGraphBytes: read('cuda-graph-memory'),
  };
  const picked = {
    gpuMemoryUtilization: read('gpu-memory-utilization'),
    maxModelLen: num('max-model-len'),
    maxNumSeqs: num('max-num-seqs'),
    maxNumBatchedTokens: num('max-num-batched-tokens'),
    tensorParallelSize: num('tensor-parallel-size'),
    blockSize: num('block-size'),
    kvCacheDtype: choice(values, 'kv-cache-dtype'),
    kvCacheMemoryBytes: read('kv-cache-memory'),
    enforceEager: values['enforce-eager'] === true ? true : undefined,
    cpuOffloadGb: read('cpu-offload-gb'),
    entrypoint: choice(values, 'entrypoint'),
    release: values['vllm-release'] as string | undefined,
    dtype: choice(values, 'dtype') as VllmOptions['dtype'],
    measured: Object.fromEntries(Object.entries(measured).filter(([, v]) => v !== undefined)),
  };
  return Object.fromEntries(Object.entries(picked).filter(([k, v]) => v !== undefined && !(k === 'measured' && Object.keys(v as object).length === 0))) as Omit<
    VllmOptions,
    'gpu' | 'totalBytes'
  >;
}

const FLAG_READERS: Readonly<Record<string, (value: string) => unknown>> = Object.fromEntries(
  Object.entries(ENGINE_FLAGS).flatMap(([flag, spec]) => ('read' in spec ? [[flag, spec.read]] : [])),
);

/** The flag a library path names (`gpuMemoryUtilization` → `--gpu-memory-utilization`). */
export function engineFlagOf(path: readonly (string | number)[]): string {
  // rlJob's rollout options are vllmEngine's, one level down.
  if (path[0] === 'rollout' && path.length > 1) return engineFlagOf(path.slice(1));
  const [head, field] = path;
  if (head === 'gpu' || head === 'totalBytes') return '--gpu';
  if (head === 'release') return '--vllm-release';
  if (head === 'measured')
    return (
      {
        weightsBytes: '--weights-memory',
        activationPeakBytes: '--activation-memory',
        nonTorchBytes: '--non-torch-memory',
        cudaGraphBytes: '--cuda-graph-memory',
      }[String(field)] ?? '--non-torch-memory'
    );
  if (head === 'model') return 'model';
  if (head === 'kvCacheMemoryBytes') return '--kv-cache-memory';
  return `--${String(head).replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
}

/** Runs the library; its VramError becomes one line naming the flag (or, through `name`, the file's key that set it). */
export function withFlags<T>(run: () => T, name: (flag: string) => string = (flag) => flag): T {
  try {
    return run();
  } catch (error) {
    if (!(error instanceof VramError)) throw error;
    const issue = error.issues[0]!;
    throw new CliError(name(engineFlagOf(issue.path)), issue.message, { expected: issue.expected, received: issue.received, more: error.issues.length - 1 });
  }
}

const row = (label: string, bytes: number, why: string) => `  ${label.padEnd(16)} ${formatBytes(bytes).padStart(11)}  ${why}\n`;

/** The engine as a table: the budget's parts with their rules, the pool, the log lines vLLM would print. */
export function engineTable(name: string, gpuName: string, e: VllmEngine): string {
  const s = e.settings;
  let text = `vLLM ${e.release} start-up of ${name} on ${gpuName} (${formatBytes(e.totalBytes)} as torch reports it)${s.tensorParallelSize > 1 ? `, one rank of TP ${s.tensorParallelSize}` : ''}\n`;
  text += row('budget', e.requested, `ceil(total × ${s.gpuMemoryUtilization})`);
  text += row('weights', e.weights, e.sources.weights);
  text += row('activation peak', e.activationPeak, e.sources.activationPeak);
  text += row('non-torch', e.nonTorch, e.sources.nonTorch);
  text += row('CUDA graphs', e.cudaGraphs, e.sources.cudaGraphs);
  text += row(
    'KV cache',
    Math.max(0, e.kvCache.bytes),
    `${e.kvCache.tokens.toLocaleString('en-US')} tokens: ${e.kvCache.blocks.toLocaleString('en-US')} blocks of ${s.blockSize}, ${e.kvCache.bytesPerToken.toLocaleString('en-US')} B per token`,
  );
  text += `  max concurrency  ${e.maxConcurrency.toFixed(2)}x requests of ${s.maxModelLen.toLocaleString('en-US')} tokens\n`;
  text += `Settings: max_num_seqs ${s.maxNumSeqs}, max_num_batched_tokens ${s.maxNumBatchedTokens} (${s.entrypoint}), kv ${s.kvCacheDtype}${s.enforceEager ? ', eager' : ''}\n`;
  if (e.cpuOffloaded > 0) text += `CPU offload: ${formatBytes(e.cpuOffloaded)} of weights in pinned CPU memory\n`;
  text += e.assumed.map((a) => `Not counted: ${a}\n`).join('');
  text += `vLLM would log:\n${e.log.map((l) => `  ${l}\n`).join('')}`;
  text += e.starts ? `Starts: it holds ${formatBytes(e.footprint)} of the GPU while it generates.\n` : `Does not start: ${e.error}\n`;
  return text;
}

function runVllm(ref: ModelRef, flags: Values): Outcome {
  const format = formatOf(flags, 'vllm', DEFAULTS.format);
  // --config: vLLM's own config file, under the flags (the command line wins, as in vLLM).
  const config = flags.config === undefined ? undefined : readVllmConfig(flags.config);
  if (config?.revision !== undefined && ref.repo !== undefined && config.revision !== (flags.revision ?? 'main'))
    usage(`${config.file}: revision`, 'is not the revision <model> is read at: give it as --revision', {
      expected: JSON.stringify(flags.revision ?? 'main'),
      received: JSON.stringify(config.revision),
    });
  const values = withVllmConfig(flags, config);
  const name = (flag: string) => flagOrigin(flag, flags, config);
  const device = engineGpu(values.gpu);
  const model = buildModel(ref, values) as ModuleLayer;
  const e = withFlags(() => vllmEngine(model, { ...device, ...vllmArgs(values) }), name);
  const fraction = values['mem-fraction-static'];
  const sglang =
    fraction === undefined
      ? undefined
      : withFlags(() =>
          sglangEngine(model, {
            totalBytes: e.totalBytes,
            memFractionStatic: FLAG_READERS['mem-fraction-static']!(fraction) as number,
            tensorParallelSize: e.settings.tensorParallelSize,
          }),
        );
  const code = values.check && !e.starts ? 1 : 0;
  if (format === 'json') return { stdout: `${JSON.stringify({ vllm: e, ...(sglang !== undefined ? { sglang } : {}) }, null, 2)}\n`, code };
  let text = engineTable(ref.name, 'gpu' in device ? device.gpu : values.gpu!, e);
  if (sglang !== undefined)
    text += `SGLang (mem_fraction_static ${fraction}): ${sglang.tokens.toLocaleString('en-US')} tokens, ${formatBytes(Math.max(0, sglang.restBytes))} of KV, weights + pool ${formatBytes(sglang.footprint)}${sglang.starts ? '' : `; ${sglang.error}`}\n`;
  return { stdout: text, code };
}

/** vLLM's engine at start-up: its budget, weights, profiling peak, KV pool and concurrency. */
export const vllmCommand: ModelCommand<'vllm'> = {
  name: 'vllm',
  summary: "vLLM's KV pool and concurrency at start-up",
  named: 'vllm',
  help: VLLM_HELP,
  words: 1,
  model: true,
  run: runVllm,
};
