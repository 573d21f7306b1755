/** `vram-ts plan <model> --gpu <gpu> --gpus N --global-batch G`: which layouts fit, and the fewest GPUs. */
import { GPUS, VramError, decoderMeta, formatBytes, gpusOf, plan, type Layer, type Layout, type PlanOptions, type PlanResult } from '../lib.js';
import { listOf } from '../args.js';
import { usage } from '../errors.js';
import { DEFAULTS, type Values } from '../flags.js';
import { PLAN_HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { estimateOptions, zeroStage } from '../options.js';
import { choice, count, formatOf } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';

/** The options of one GPU without checkpointing: what a plan varies itself. */
function withoutParallel(values: Values): Values {
  const { gpus: _gpus, engine: _engine, zero: _zero, pp: _pp, tp: _tp, cp: _cp, ep: _ep, checkpointing: _checkpointing, ...rest } = values;
  return rest;
}

/** The layouts a plan tried, fewest GPUs first, and the one it picks. */
function formatPlan(result: PlanResult, title: string): string {
  const order = [...result.layouts].sort(
    (a, b) =>
      gpusOf(a) - gpusOf(b) ||
      a.tp - b.tp ||
      a.cp - b.cp ||
      a.pp - b.pp ||
      Number(b.fits) - Number(a.fits) ||
      a.accumulation - b.accumulation ||
      a.peak - b.peak,
  );
  const piped = result.layouts.some((l) => l.pp > 1);
  const split = result.layouts.some((l) => l.tp > 1);
  const context = result.layouts.some((l) => l.cp > 1);
  const head = [
    'gpus',
    ...(split ? ['tp'] : []),
    ...(context ? ['cp'] : []),
    ...(piped ? ['pp'] : []),
    'engine',
    'micro-batch',
    piped ? 'micro-batches' : 'accumulation',
    'checkpointing',
    'peak (highest rank)',
    '',
  ];
  const engineOf = (l: Layout) => (l.zero !== null ? `${l.engine} ZeRO-${l.zero}` : l.engine === 'single' && (l.pp > 1 || l.tp > 1) ? 'none' : l.engine);
  const rows = order.map((l) => [
    String(gpusOf(l)),
    ...(split ? [String(l.tp)] : []),
    ...(context ? [String(l.cp)] : []),
    ...(piped ? [String(l.pp)] : []),
    engineOf(l),
    l.fits ? String(l.microBatch) : '-',
    l.fits ? String(l.accumulation) : '-',
    l.checkpointing ? 'yes' : 'no',
    `${formatBytes(l.peak)}${l.dp * l.pp * l.cp > 1 ? ` (rank ${l.rank})` : ''}`,
    l.fits ? 'fits' : 'not even 1 sample per forward fits',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => cell.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  const best = result.fewest;
  const verdict =
    best === undefined
      ? 'No layout fits.'
      : `Fewest GPUs: ${gpusOf(best)} (${best.tp > 1 ? `tensor parallel ${best.tp}${best.dp > 1 ? ` × ${best.dp} data-parallel (fsdp2)` : ''}` : best.cp > 1 ? `context parallel ${best.cp} × ${best.dp} data-parallel (${engineOf(best)} over ${best.dp * best.cp} ranks)` : best.pp > 1 ? `${best.pp} pipeline stages, ${best.dp} data-parallel (${engineOf(best)})` : best.engine === 'single' ? 'one GPU' : engineOf(best)}, micro-batch ${best.microBatch} × ${best.accumulation} accumulation step${best.accumulation === 1 ? '' : 's'}${best.checkpointing ? ', checkpointing' : ''}): ${formatBytes(best.peak)} of ${formatBytes(result.budget)}.`;
  return [
    `Layouts of ${title} (${formatBytes(result.budget)} each):`,
    line(head),
    ...rows.map(line),
    '',
    verdict,
    [
      piped ? 'Pipelines run 1F1B.' : '--pp N also tries pipelines.',
      split ? 'Tensor-parallel replicas run under FSDP2 (2-D).' : '--tp N also tries tensor parallelism.',
      context ? 'Context-parallel ranks share each sample; their engine spans dp × cp ranks.' : '--cp N also tries context parallelism.',
    ].join(' '),
    '',
  ].join('\n');
}

/** --tp N: the tensor-parallel sizes DTensor's plan can cut this decoder by, and the rank's model of each. */
function tensorParallelSearch(ref: ModelRef, values: Values, model: Layer) {
  const maxTp = values.tp === undefined ? 1 : count(values, 'tp', 1);
  if (maxTp > 1 && ref.kind !== 'llm') usage('--tp', `tensor parallelism splits a decoder's heads; ${ref.name} is a CNN`);
  // The sizes DTensor's plan can cut this decoder by (heads, KV heads and the MLP divide).
  const meta = ref.kind === 'llm' ? decoderMeta(model) : undefined;
  const cuts = (t: number) => meta !== undefined && meta.heads % t === 0 && meta.kvHeads % t === 0 && meta.intermediate % t === 0;
  return maxTp > 1
    ? {
        sizes: Array.from({ length: maxTp }, (_, i) => i + 1).filter(cuts),
        model: (size: number) => (size === 1 ? model : buildModel(ref, values, { tensorParallel: { size } })),
      }
    : undefined;
}

/** --cp N: context-parallel sizes 2 .. N and the rank's model of each. */
function contextParallelSearch(ref: ModelRef, values: Values) {
  const maxCp = values.cp === undefined ? 1 : count(values, 'cp', 1);
  if (maxCp > 1 && ref.kind !== 'llm') usage('--cp', `context parallelism cuts a decoder's sequence; ${ref.name} is a CNN`);
  // Ring attention runs on sdpa: the CP ranks' model uses it unless --attention says otherwise.
  return maxCp > 1
    ? {
        sizes: Array.from({ length: maxCp - 1 }, (_, i) => i + 2),
        model: (size: number) =>
          buildModel(ref, values, { contextParallel: { size }, ...(values.attention === undefined ? { attention: 'sdpa' as const } : {}) }),
      }
    : undefined;
}

/** The job's options that are flags, by the path plan reports them at. */
const FLAG_OF: Readonly<Record<string, string>> = { gpus: '--gpus', globalBatch: '--global-batch', pipelines: '--pp' };

/** The plan, a refusal of the job's size (too many GPUs or ranks to weigh) being its flag's error. */
function planOf(model: Layer, options: PlanOptions): PlanResult {
  try {
    return plan(model, options);
  } catch (error) {
    const issue = error instanceof VramError ? error.issues[0] : undefined;
    const flag = issue === undefined ? undefined : FLAG_OF[String(issue.path[0])];
    if (issue !== undefined && flag !== undefined) usage(flag, issue.message, { expected: issue.expected, received: issue.received });
    throw error;
  }
}

function runPlan(ref: ModelRef, values: Values): Outcome {
  const format = formatOf(values, 'plan', DEFAULTS.format);
  const model = buildModel(ref, values);
  const { input, parallel: _parallel, checkpoint, ...options } = estimateOptions(withoutParallel(values), ref, model);
  const zero = zeroStage(values);
  const engine = choice(values, 'engine');
  const engines = zero !== undefined ? (['deepspeed'] as const) : engine === undefined ? undefined : [engine];
  const tryCheckpoint = values.checkpointing ? estimateOptions(values, ref, model).checkpoint : undefined;
  const job = { gpu: values.gpu!, gpus: count(values, 'gpus', 1), globalBatch: count(values, 'global-batch', 1) };
  const maxPp = values.pp === undefined ? 1 : count(values, 'pp', 1);
  const pipelines = Array.from({ length: maxPp }, (_, i) => i + 1);
  const tensorParallel = tensorParallelSearch(ref, values, model);
  const contextParallel = contextParallelSearch(ref, values);
  const result = planOf(model, {
    ...options,
    ...job,
    sample: (input as readonly number[]).slice(1),
    ...(engines !== undefined ? { engines } : {}),
    ...(zero !== undefined ? { zero } : {}),
    ...(maxPp > 1 ? { pipelines } : {}),
    ...(tensorParallel !== undefined ? { tensorParallel } : {}),
    ...(contextParallel !== undefined ? { contextParallel } : {}),
    ...(tryCheckpoint !== undefined ? { checkpoint: tryCheckpoint } : {}),
    ...(values.fewest === true ? { fewestOnly: true } : {}),
  });
  const code = values.check && result.fewest === undefined ? 1 : 0;
  if (format === 'json')
    return { stdout: `${JSON.stringify({ ...job, budget: result.budget, fewest: result.fewest ?? null, layouts: result.layouts }, null, 2)}\n`, code };
  const what =
    ref.kind === 'llm' ? `${job.globalBatch} × ${(input as number[])[1]} tokens` : `${job.globalBatch} images of ${(input as number[]).slice(1).join('×')}`;
  return { stdout: formatPlan(result, `${ref.name}, ${what} per optimizer step, on up to ${job.gpus} × ${job.gpu}`), code };
}

const GPU_NAMES = () =>
  `a size like 24GB or one of ${listOf(
    GPUS.map((g) => g.name),
    4,
  )}`;

/** Which data-parallel layouts fit, and the fewest GPUs. */
export const planCommand: ModelCommand<'plan'> = {
  name: 'plan',
  summary: 'which data-parallel layouts fit, and the fewest GPUs',
  named: 'plan',
  help: PLAN_HELP,
  words: 1,
  model: true,
  rules: (values) => {
    if (values.gpu === undefined) usage('--gpu', 'plan needs the GPU each rank runs on', { expected: GPU_NAMES() });
    if (values.gpus === undefined) usage('--gpus', 'plan needs the most GPUs it may use', { expected: 'a whole number N: layouts on 1 .. N GPUs are tried' });
    if (values['global-batch'] === undefined) usage('--global-batch', 'plan needs the samples of one optimizer step over all GPUs');
    if (values.infer) usage('--infer', 'plan lays out training steps');
  },
  run: runPlan,
};
