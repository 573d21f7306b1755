/** `vram-ts rl <model> --framework trl|verl|openrlhf`: a whole RL step on one GPU, trainer and rollout engine as the framework places them. */
import { adviseRl, formatBytes, rlJob, type ModuleLayer, type RlJob, type RlJobOptions } from '../lib.js';
import { oneOf } from '../args.js';
import { usage } from '../errors.js';
import { DEFAULTS, FIELD_FLAGS, type Values } from '../flags.js';
import { RL_FRAMEWORKS } from '../engine-flags.js';
import { RL_HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { estimateOptions } from '../options.js';
import { checkScriptModel, trainerInput, withOrigins, type TrainerInput } from '../trainer.js';
import { count, formatOf } from '../values.js';
import { engineGpu, vllmArgs, withFlags } from './vllm.js';
import type { ModelCommand, Outcome } from './command.js';
import { sumLines, type SumRow } from '../verdict.js';
import { adviseRlTable } from '../advise-format.js';

/** The trainer of the job from the command line: GRPOConfig's fields for TRL, the actor's estimates otherwise. */
function trainerOf(ref: ModelRef, values: Values, model: ModuleLayer, trl?: TrainerInput): RlJobOptions['trainer'] {
  if (trl !== undefined) {
    return {
      config: trl.config,
      prompt: count(values, 'prompt', DEFAULTS.prompt),
      ...(trl.options.peft !== undefined ? { peft: trl.options.peft } : {}),
    };
  }
  // rl's --framework is the RL framework, not the torch version an estimate's --framework names.
  const { framework: _rl, ...rest } = values;
  const update = estimateOptions(rest, ref, model);
  const input = update.input as readonly number[];
  const logBatch = count(values, 'log-prob-batch', input[0]!);
  return {
    update,
    logProbs: { ...update, input: [logBatch, input[1]!], mode: 'inference' },
    ...(values['param-offload'] ? { paramOffload: true } : {}),
    ...(values['optimizer-offload'] ? { optimizerOffload: true } : {}),
  };
}

const cell = (bytes: number) => formatBytes(bytes).padStart(11);

function jobTable(name: string, gpuName: string, j: RlJob): string {
  const e = j.engine;
  const trainerPeak = Math.max(...j.phases.map((p) => p.peak));
  let text = `${j.framework} RL step of ${name} on ${gpuName} (${formatBytes(j.totalBytes)} as torch reports it), one GPU of the trainer\n`;
  text += `  ${'phase'.padEnd(12)} ${'trainer'.padStart(11)} ${'engine'.padStart(11)} ${'peak'.padStart(11)}  what runs\n`;
  for (const p of j.phases) text += `  ${p.name.padEnd(12)} ${cell(p.trainer)} ${cell(p.engine)} ${cell(p.peak)}  ${p.detail}\n`;
  text += `  ${'peak'.padEnd(12)} ${' '.repeat(23)} ${cell(j.peak)}  in ${j.peakPhase}\n`;
  text += `Rollout engine: vLLM ${e.release}, ${j.colocated ? "on the trainer's GPU" : 'on GPUs of its own'}: budget ${formatBytes(e.requested)} (weights ${formatBytes(e.weights)}, activation peak ${formatBytes(e.activationPeak)}, KV ${formatBytes(Math.max(0, e.kvCache.bytes))} = ${e.kvCache.tokens.toLocaleString('en-US')} tokens)${e.starts ? '' : `; does not start: ${e.error}`}\n`;
  text += `GPUs: ${j.gpus.trainer} for the trainer${j.gpus.rollout > 0 ? ` + ${j.gpus.rollout} for the engines` : ''} = ${j.gpus.total}\n`;
  text += j.defaults.map((d) => `Default: ${d}\n`).join('');
  text += e.assumed.map((a) => `Not counted: ${a}\n`).join('');
  text += `${j.fits ? 'Fits' : 'Does not fit'} ${gpuName} (${formatBytes(j.totalBytes)}): the highest phase needs ${formatBytes(trainerPeak + j.totalBytes - j.usable)} on the trainer's GPU.\n`;
  const rows: SumRow[] = [
    ['capacity', j.totalBytes, 'as PyTorch reports it'],
    ...j.runtime.map((line): SumRow => [`- ${line.label}`, line.bytes, line.source]),
    ['= usable', j.usable, ''],
    ['- highest phase', trainerPeak, 'allocated: the phases are not replayed through the caching allocator'],
    ['= headroom', j.usable - trainerPeak, ''],
  ];
  text += `${sumLines(rows)}\n`;
  return text;
}

function runRl(ref: ModelRef, values: Values): Outcome {
  const format = formatOf(values, 'rl', DEFAULTS.format);
  if (values.framework === undefined) usage('--framework', 'rl needs the framework whose placement to follow', { expected: RL_FRAMEWORKS.join(' | ') });
  const framework = oneOf(values.framework!, '--framework', RL_FRAMEWORKS);
  if (framework !== 'trl') {
    const field = Object.keys(FIELD_FLAGS).find((flag) => values[flag] !== undefined);
    if (field !== undefined || values.config !== undefined || values.prompt !== undefined)
      usage(
        `--${field ?? (values.config !== undefined ? 'config' : 'prompt')}`,
        `is a TRL GRPOConfig input; ${framework}'s trainer is --batch, --seq, --optimizer, --precision …`,
      );
  } else if (values.batch !== undefined || values.seq !== undefined)
    usage(
      values.batch !== undefined ? '--batch' : '--seq',
      "TRL's trainer takes GRPOConfig's fields: --per-device-train-batch-size, --prompt, --max-completion-length",
    );
  const device = engineGpu(values.gpu);
  // TRL's trainer: GRPOConfig's fields, and --config's ModelConfig (dtype, attention) for the model.
  const input = framework === 'trl' ? trainerInput(values, 'grpo') : undefined;
  if (input !== undefined) checkScriptModel(ref, input);
  const model = buildModel(ref, input?.values ?? values) as ModuleLayer;
  const trainer = trainerOf(ref, values, model, input);
  const rollout = {
    ...vllmArgs(values),
    ...(values.sleep === true ? { sleep: true } : {}),
    ...(values.colocate === true ? { colocate: true } : {}),
    ...(values.engines !== undefined ? { engines: count(values, 'engines', 1) } : {}),
  };
  const options: RlJobOptions = { framework, ...device, ...(values.gpus !== undefined ? { gpus: count(values, 'gpus', 1) } : {}), rollout, trainer };
  const within = <T>(run: () => T) => (input !== undefined ? withOrigins(input, () => withFlags(run)) : withFlags(run));
  const gpuName = 'gpu' in device ? device.gpu : values.gpu!;
  if (values.advise) {
    const advice = within(() => adviseRl(model, options));
    const failed = values.check && !advice.baseline.fits && advice.best === undefined ? 1 : 0;
    return { stdout: format === 'json' ? `${JSON.stringify(advice, null, 2)}\n` : adviseRlTable(advice, gpuName), code: failed };
  }
  const job = within(() => rlJob(model, options));
  const code = values.check && !job.fits ? 1 : 0;
  if (format === 'json') return { stdout: `${JSON.stringify(job, null, 2)}\n`, code };
  return { stdout: jobTable(ref.name, gpuName, job), code };
}

/** A whole RL step: weight sync, rollout, log-probabilities and update, with the engine's residency. */
export const rlCommand: ModelCommand<'rl'> = {
  name: 'rl',
  summary: 'an RL step with its rollout engine, as TRL, verl or OpenRLHF place them',
  named: 'rl',
  help: RL_HELP,
  words: 1,
  model: true,
  run: runRl,
};
