/**
 * Whole RL jobs on one GPU (one rank of each): the trainer and the rollout engine placed as TRL,
 * verl and OpenRLHF place them, phase by phase — weight sync, rollout, log-probabilities, update —
 * with what each framework keeps on the GPU in each phase under its sleep / free / offload rules.
 *
 * The frameworks' defaults, with their sources (research notes: ../shared/research/rl-engines.md;
 * TRL re-read in trl 1.13.0):
 * - TRL 1.13 GRPOTrainer, `use_vllm=True`: colocate mode builds `LLM(...)` in the trainer's process
 *   (vllm_generation.py l.347-366), util `vllm_gpu_memory_utilization` (0.3), no sleep unless
 *   `vllm_enable_sleep_mode` (then level 2 outside generation); trainers/grpo.ts holds the phases.
 * - verl (b178a3c, v0.7.0-125) hybrid engine: rollout.yaml `gpu_memory_utilization: 0.5`,
 *   `max_num_batched_tokens: 8192`, `max_num_seqs: 256` (the yaml users run; rollout.py's dataclass
 *   falls back to 1024 only without it), `enforce_eager: false`,
 *   `free_cache_engine: true`, `tensor_model_parallel_size: 2`; the engine sleeps at level 2
 *   after each rollout (vllm_async_server.py l.563-573) and its workers live in the FSDP worker's
 *   process; the actor (FSDP, fp32 master weights) keeps its parameters and Adam state unless
 *   `param_offload` / `optimizer_offload`.
 * - OpenRLHF (3c3be62, v0.11.0): `--vllm.gpu_memory_utilization 0.95`, engines on GPUs of their own
 *   unless `--train.colocate_all`; with `--vllm.enable_sleep` the engines sleep at level 1 after
 *   generation; each engine is a Ray actor (another process).
 */
import { fail } from '../errors.js';
import { estimate } from '../estimate.js';
import type { EstimateOptions } from '../estimate-types.js';
import { gpu as gpuSpec } from '../gpus/catalog.js';
import { usableMemory } from '../fit.js';
import type { RuntimeLine } from '../memory/runtime.js';
import type { ModuleLayer } from '../nn/types.js';
import { VLLM_ENGINE_FIELDS, vllmEngine, type VllmEngine, type VllmOptions } from '../rollout/vllm.js';
import type { TrainerArgs } from '../trainers/args.js';
import { grpoStep, type GrpoStepEstimate } from '../trainers/grpo.js';
import { decoderModel, optionsObject } from '../catalog/decoder-check.js';
import { loraOrNull } from '../trainers/args.js';
import { anything, boolean, type Check, integer, number, object, oneOf, show, string, validate } from '../validate.js';

/** The RL frameworks whose placement rules are read. */
export type RlFramework = 'trl' | 'verl' | 'openrlhf';

/** vLLM's engine arguments for the rollout, over the framework's defaults; and its sleep rule. */
export type RlRollout = Omit<VllmOptions, 'gpu' | 'totalBytes' | 'freeBytes'> & {
  /** Whether the engine sleeps outside rollout (TRL `vllm_enable_sleep_mode`, verl `free_cache_engine`, OpenRLHF `--vllm.enable_sleep`). */
  readonly sleep?: boolean;
  /** OpenRLHF `--train.colocate_all`: engines on the trainer's GPUs (default false: GPUs of their own). */
  readonly colocate?: boolean;
  /** OpenRLHF `--vllm.num_engines` when not colocated. */
  readonly engines?: number;
};

/** The trainer of a TRL job: GRPOConfig's fields and the prompt length (grpoStep's inputs). */
export interface RlTrlTrainer {
  readonly config: TrainerArgs;
  readonly prompt: number;
  readonly peft?: Readonly<Record<string, unknown>> | null;
}

/**
 * The trainer of a verl or OpenRLHF job, as estimates of one rank: the update micro-step (a
 * training estimate, with `parallel` for FSDP/ZeRO ranks) and the no-grad log-probability pass of
 * the actor (an inference estimate of the same model); a reference model's pass when the job has one.
 */
export interface RlEngineTrainer {
  readonly update: EstimateOptions;
  readonly logProbs: EstimateOptions;
  readonly reference?: EstimateOptions;
  /** verl `actor.fsdp_config.param_offload` / OpenRLHF `--ds.enable_sleep`: parameters on the CPU outside the update. */
  readonly paramOffload?: boolean;
  /** verl `optimizer_offload`: the optimizer state on the CPU outside the update. */
  readonly optimizerOffload?: boolean;
}

/** Options of {@link rlJob}. */
export interface RlJobOptions {
  readonly framework: RlFramework;
  /** A catalog GPU whose torch-reported total is recorded; or `totalBytes`. */
  readonly gpu?: string;
  readonly totalBytes?: number;
  /** GPUs the trainer runs on (data-parallel ranks; default 1). */
  readonly gpus?: number;
  readonly rollout?: RlRollout;
  readonly trainer: RlTrlTrainer | RlEngineTrainer;
}

/** One phase of an RL step on one GPU. */
export interface RlPhase {
  readonly name: string;
  /** The trainer's live bytes at the phase's highest point. */
  readonly trainer: number;
  /** What the rollout engine holds then. */
  readonly engine: number;
  readonly peak: number;
  readonly detail: string;
}

/** An RL job as the framework places it. */
export interface RlJob {
  readonly framework: RlFramework;
  readonly totalBytes: number;
  /** The rollout engine at start-up (on the trainer's GPU when colocated). */
  readonly engine: VllmEngine;
  readonly colocated: boolean;
  readonly phases: readonly RlPhase[];
  readonly peak: number;
  readonly peakPhase: string;
  /**
   * The trainer process's runtime lines on its GPU, outside the caching allocator and vLLM's
   * budget (the CUDA context, two cuBLAS workspaces: {@link usableMemory}).
   */
  readonly runtime: readonly RuntimeLine[];
  /** totalBytes − the runtime lines: what the trainer's phases (and a colocated engine) can hold. */
  readonly usable: number;
  /**
   * Whether the highest phase stays within `usable` (and an engine on GPUs of its own within
   * totalBytes). Allocated bytes: the phases are not replayed through the caching allocator,
   * whose fragmentation comes on top.
   */
  readonly fits: boolean;
  /** GPUs the job needs: the trainer's, the rollout engines' own (0 when colocated), and their sum. */
  readonly gpus: { readonly trainer: number; readonly rollout: number; readonly total: number };
  /** The framework defaults applied, each with its source. */
  readonly defaults: readonly string[];
  /** The TRL trainer's step, for a TRL job. */
  readonly trl?: GrpoStepEstimate;
}

const rolloutShape = object({ fields: { ...VLLM_ENGINE_FIELDS, sleep: boolean, colocate: boolean, engines: integer(1) } });

const shape = object({
  fields: {
    framework: oneOf(['trl', 'verl', 'openrlhf'], 'framework'),
    gpu: string,
    totalBytes: number(1),
    gpus: integer(1),
    rollout: rolloutShape,
    trainer: anything,
  },
  required: ['framework', 'trainer'],
});

/** A plain-object argument another check reads further (an estimate's options, GRPOConfig's fields). */
const record: Check = (value, path, issues) => {
  const proto = typeof value === 'object' && value !== null && !Array.isArray(value) ? Object.getPrototypeOf(value) : undefined;
  if (proto !== Object.prototype && proto !== null)
    issues.push({ path, code: 'bad-option', message: 'must be an object', expected: 'object', received: show(value) });
};

/** The trainer of each framework's job. */
const TRAINERS = {
  trl: object({ fields: { config: record, prompt: integer(1), peft: loraOrNull }, required: ['config', 'prompt'] }),
  engine: object({
    fields: { update: record, logProbs: record, reference: record, paramOffload: boolean, optimizerOffload: boolean },
    required: ['update', 'logProbs'],
  }),
};

function totalOf(o: RlJobOptions): number {
  if (o.gpu !== undefined && o.totalBytes !== undefined)
    fail('bad-option', 'give the GPU or its total bytes, not both', { path: ['totalBytes'], received: show(o.totalBytes) });
  if (o.gpu !== undefined)
    return (
      gpuSpec(o.gpu).torchTotal?.bytes ??
      fail('not-modelled', `the total PyTorch reports for ${o.gpu} is not recorded: give totalBytes (torch.cuda.mem_get_info()[1])`, { path: ['gpu'] })
    );
  return o.totalBytes ?? fail('missing-option', "the rollout engine sizes itself from the GPU's total: give gpu or totalBytes", { path: ['totalBytes'] });
}

/** TRL: grpoStep's phases (the engine in the trainer's process), one GPU per data-parallel rank. */
function trlJob(model: ModuleLayer, o: RlJobOptions, total: number): RlJob {
  const t = validate(o.trainer, TRAINERS.trl, ['trainer']) as RlTrlTrainer;
  const r = o.rollout ?? {};
  const { sleep, colocate, engines, ...engineArgs } = r;
  if (colocate === false || engines !== undefined)
    fail('bad-option', "TRL's colocate mode runs the engine in the trainer's process (server mode puts it elsewhere: use_vllm with vllm_mode='server')", {
      path: ['rollout', colocate === false ? 'colocate' : 'engines'],
    });
  // TRL builds LLM(...) itself (vllm_generation.py l.347-362): only these reach it, through GRPOConfig's fields.
  const TRL_TAKES = ['gpuMemoryUtilization', 'maxModelLen', 'release', 'measured'];
  const other = Object.keys(engineArgs).find((key) => !TRL_TAKES.includes(key));
  if (other !== undefined)
    fail('bad-option', "TRL's LLM(...) sets this itself (max_num_seqs, max_num_batched_tokens 4096) or does not pass it", {
      path: ['rollout', other],
      expected: TRL_TAKES.join(' | '),
    });
  const config = {
    ...t.config,
    use_vllm: true,
    vllm_mode: 'colocate',
    ...(r.gpuMemoryUtilization !== undefined ? { vllm_gpu_memory_utilization: r.gpuMemoryUtilization } : {}),
    ...(r.maxModelLen !== undefined ? { vllm_max_model_length: r.maxModelLen } : {}),
    ...(sleep !== undefined ? { vllm_enable_sleep_mode: sleep } : {}),
  };
  const { gpuMemoryUtilization: _u, maxModelLen: _l, ...vllm } = engineArgs;
  const step = grpoStep(model, config, { prompt: t.prompt, gpuTotalBytes: total, vllm, ...(t.peft !== undefined ? { peft: t.peft } : {}) });
  const engine = step.engine!;
  const phases = step.phases.map((p) => {
    const held =
      p.name === 'rollout'
        ? engine.footprint
        : p.name === 'weight_sync' && step.args.grpo!.vllm!.sleepMode
          ? engine.resident.asleep + engine.weights
          : (step.resident.rollout ?? 0);
    return { name: p.name, trainer: p.peak - held, engine: held, peak: p.peak, detail: p.detail };
  });
  const gpus = o.gpus ?? 1;
  return finish('trl', total, o.gpu, engine, true, phases, { trainer: gpus, rollout: 0, total: gpus }, trlDefaults(step), step);
}

function trlDefaults(step: GrpoStepEstimate): string[] {
  const v = step.args.grpo!.vllm!;
  return [
    `vllm_gpu_memory_utilization ${v.gpuMemoryUtilization} (GRPOConfig default 0.3, trl 1.13 grpo_config.py)`,
    `max_num_seqs ${step.engine!.settings.maxNumSeqs} = per_device_train_batch_size × vllm_tensor_parallel_size × steps_per_generation (grpo_trainer.py l.1108-1110)`,
    'max_num_batched_tokens 4096 (vllm_generation.py l.359)',
    `sleep mode ${v.sleepMode ? 'on: level 2 outside generation (vllm_generation.py l.365-366, l.750-751)' : 'off (vllm_enable_sleep_mode default False): weights and KV stay through the update'}`,
  ];
}

/** The rollout engine verl or OpenRLHF builds, from the framework's defaults and the caller's overrides. */
function frameworkEngine(model: ModuleLayer, framework: 'verl' | 'openrlhf', r: RlRollout, total: number, defaults: string[]): VllmEngine {
  const { sleep: _s, colocate: _c, engines: _e, ...args } = r;
  const base: VllmOptions =
    framework === 'verl'
      ? { totalBytes: total, gpuMemoryUtilization: 0.5, maxNumBatchedTokens: 8192, maxNumSeqs: 256, tensorParallelSize: 2, enforceEager: false }
      : { totalBytes: total, gpuMemoryUtilization: 0.95, tensorParallelSize: 1, enforceEager: false };
  if (framework === 'verl')
    defaults.push(
      'gpu_memory_utilization 0.5, enforce_eager false, tensor_model_parallel_size 2, max_num_batched_tokens 8192, max_num_seqs 256 (verl trainer/config/rollout/rollout.yaml l.32-68)',
    );
  else defaults.push('--vllm.gpu_memory_utilization 0.95, --vllm.tensor_parallel_size 1, --vllm.enforce_eager false (openrlhf cli/train_ppo_ray.py l.243-254)');
  const engine = vllmEngine(model, { ...base, ...args, entrypoint: 'llm' });
  return engine;
}

function peakAbove(e: ReturnType<typeof estimate>): number {
  return (e.peak.bytes as number) - (e.bytes.parameters as number) - (e.bytes.buffers as number);
}

/** verl / OpenRLHF: the actor's estimates and the engine's residency by the framework's rules. */
function engineJob(model: ModuleLayer, o: RlJobOptions, total: number): RlJob {
  const framework = o.framework as 'verl' | 'openrlhf';
  const t = validate(o.trainer, TRAINERS.engine, ['trainer']) as RlEngineTrainer;
  const r = o.rollout ?? {};
  const defaults: string[] = [];
  const engine = frameworkEngine(model, framework, r, total, defaults);
  if (framework === 'verl' && (o.gpus ?? 1) < engine.settings.tensorParallelSize)
    fail(
      'bad-option',
      `verl's rollout spans tensor_model_parallel_size ${engine.settings.tensorParallelSize} GPUs (default 2): give gpus ≥ that or rollout.tensorParallelSize`,
      {
        path: ['gpus'],
        received: show(o.gpus ?? 1),
      },
    );
  const colocated = framework === 'verl' || r.colocate === true;
  const sleep = r.sleep ?? framework === 'verl';
  defaults.push(
    framework === 'verl'
      ? `free_cache_engine ${sleep}: ${sleep ? 'sleep(level=2) after each rollout, weights re-synced on wake' : 'the engine never sleeps'} (verl vllm_async_server.py l.563-573)`
      : `--train.colocate_all ${colocated}, --vllm.enable_sleep ${sleep}${sleep ? ': sleep(level=1) after generation (vllm_engine.py l.138)' : ''}`,
  );
  if (framework === 'openrlhf' && !colocated && sleep)
    fail('bad-option', 'OpenRLHF forces sleep off when the engines are not colocated (train_ppo_ray.py l.663-665)', { path: ['rollout', 'sleep'] });
  const update = estimate(model, { ...t.update, mode: t.update.mode ?? 'train' });
  // The no-grad pass of one rank: its activations from a single-device inference estimate (FSDP's
  // per-layer all-gather of the shards during that forward is not counted, and the detail says so).
  const { parallel: sharded, ...single } = t.logProbs;
  const logProbs = estimate(model, { ...single, mode: 'inference' });
  const reference = t.reference !== undefined ? estimate(model, { ...t.reference, mode: 'inference' }) : undefined;
  const params = (update.bytes.parameters as number) + (update.bytes.buffers as number);
  const optimizer = update.bytes.optimizer as number;
  const refParams = reference !== undefined ? (reference.bytes.parameters as number) + (reference.bytes.buffers as number) : 0;
  const state = t.optimizerOffload === true ? 0 : optimizer;
  // Outside the passes that need them, offloaded parameters are on the CPU.
  const outside = (t.paramOffload === true ? 0 : params) + state + refParams;
  // Another process (OpenRLHF's Ray actor) keeps its freed activation blocks reserved; verl's workers share the trainer's allocator.
  const cached = framework === 'openrlhf' ? engine.resident.cachedActivations : 0;
  const awake = engine.resident.idle + cached;
  const between = !colocated ? 0 : sleep ? engine.resident.asleep : awake;
  const phases: RlPhase[] = [
    {
      name: 'weight_sync',
      trainer: params + state + refParams,
      engine: !colocated ? 0 : sleep ? engine.resident.asleep + engine.weights : awake,
      peak: 0,
      detail: `the actor's weights pushed into the engine${sleep ? ' (its weights woken first)' : ''}`,
    },
    {
      name: 'rollout',
      trainer: outside,
      engine: colocated ? engine.footprint : 0,
      peak: 0,
      detail: `vLLM generates: ceil(${engine.settings.gpuMemoryUtilization} × ${(total / 2 ** 30).toFixed(2)} GiB)${colocated ? '' : ' on GPUs of its own'}`,
    },
    {
      name: 'old_logps',
      trainer: params + state + refParams + peakAbove(logProbs),
      engine: between,
      peak: 0,
      detail: `the actor's no-grad log-probabilities${sharded !== undefined ? " (FSDP's gathered layer during the forward not counted)" : ''}`,
    },
  ];
  if (reference !== undefined)
    phases.push({
      name: 'ref_logps',
      trainer: outside + peakAbove(reference),
      engine: between,
      peak: 0,
      detail: "the reference model's no-grad log-probabilities",
    });
  phases.push({
    name: 'update',
    trainer: (update.peak.bytes as number) + refParams,
    engine: between,
    peak: 0,
    detail: "the actor's update (one micro-step's estimate, optimizer step included)",
  });
  const withPeaks = phases.map((p) => ({ ...p, peak: p.trainer + p.engine }));
  const trainerGpus = o.gpus ?? 1;
  const rolloutGpus = colocated
    ? 0
    : (r.engines ??
        fail('missing-option', "OpenRLHF's engines on GPUs of their own: give rollout.engines (--vllm.num_engines)", { path: ['rollout', 'engines'] })) *
      engine.settings.tensorParallelSize;
  return finish(
    framework,
    total,
    o.gpu,
    engine,
    colocated,
    withPeaks,
    { trainer: trainerGpus, rollout: rolloutGpus, total: trainerGpus + rolloutGpus },
    defaults,
  );
}

/** The runtime lines of the trainer's process on a GPU of `total` bytes (its catalog name where given). */
function runtimeLinesOf(gpuName: string | undefined, total: number): readonly RuntimeLine[] {
  const u = usableMemory({ gpu: gpuName ?? total });
  return u.runtime;
}

function finish(
  framework: RlFramework,
  total: number,
  gpuName: string | undefined,
  engine: VllmEngine,
  colocated: boolean,
  phases: readonly RlPhase[],
  gpus: RlJob['gpus'],
  defaults: readonly string[],
  trl?: GrpoStepEstimate,
): RlJob {
  let best = phases[0]!;
  for (const p of phases) if (p.peak > best.peak) best = p;
  // A rollout engine on GPUs of its own sets those GPUs' peak: its footprint.
  const peak = colocated ? best.peak : Math.max(best.peak, engine.footprint);
  // The trainer's process: its context and cuBLAS workspaces (vLLM's budget, util × total, holds the engine's own).
  const runtimeBytes = runtimeLinesOf(gpuName, total);
  const usable = total - runtimeBytes.reduce((s, l) => s + l.bytes, 0);
  return {
    framework,
    totalBytes: total,
    runtime: runtimeBytes,
    usable,
    engine,
    colocated,
    phases,
    peak,
    peakPhase: peak === best.peak ? best.name : 'rollout (engine GPUs)',
    fits: best.peak <= usable && (colocated || engine.footprint <= total),
    gpus,
    defaults,
    ...(trl !== undefined ? { trl } : {}),
  };
}

/**
 * An RL job on one GPU (one rank) as `framework` places it: the rollout engine (vllmEngine with
 * the framework's defaults), the trainer's phases, what each framework keeps resident in each
 * phase, the peak and the phase that sets it, whether it fits, and the GPUs the job needs.
 *
 * @example
 * ```ts
 * import { llm, rlJob } from 'vram-ts';
 * const job = rlJob(llm('qwen2.5-0.5b'), {
 *   framework: 'trl',
 *   gpu: 'H100-80GB',
 *   trainer: { config: { per_device_train_batch_size: 8, max_completion_length: 512 }, prompt: 256 },
 * });
 * console.log(job.phases[1]!.name, job.engine.settings.gpuMemoryUtilization); // rollout 0.3
 * ```
 */
export function rlJob(model: ModuleLayer, options: RlJobOptions): RlJob {
  decoderModel(model, ['model'], 'rlJob');
  validate(optionsObject(options, ['options']), shape);
  const total = totalOf(options);
  return options.framework === 'trl' ? trlJob(model, options, total) : engineJob(model, options, total);
}
