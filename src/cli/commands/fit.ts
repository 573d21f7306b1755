/**
 * `vram-ts fit <model> --gpu <gpu>`: the largest batch, sequence length or image side that fits;
 * with --advise, what change makes the job of the flags fit.
 */
import { GPUS, advise, maxFitting } from '../lib.js';
import { adviseTable } from '../advise-format.js';
import { listOf } from '../args.js';
import { usage } from '../errors.js';
import { DEFAULTS, type Flag, type Values } from '../flags.js';
import { FIT_HELP, PARALLEL } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { estimateOptions, tensorParallelOf } from '../options.js';
import { choice, count } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';

/** The layout flags: --advise starts from one GPU and tries the engines itself. */
const LAYOUT: readonly Flag[] = PARALLEL.filter((flag) => flag !== 'gpus' && flag !== 'micro-batches');

/** fit --advise: the job of the flags on one GPU, every lever that could make it fit (--gpus N: the GPUs sharding may use). */
function runAdvise(ref: ModelRef, values: Values): Outcome {
  if (values.solve !== undefined) usage('--solve', 'is not with --advise: advise starts from the concrete job of --batch and --seq / --input');
  const layout = LAYOUT.find((flag) => values[flag] !== undefined);
  if (layout !== undefined)
    usage(`--${layout}`, 'is a layout: --advise starts from one GPU and tries the engines itself (--gpus N: the GPUs it may shard over)');
  const gpus = values.gpus === undefined ? 1 : count(values, 'gpus', 1);
  const { gpus: _gpus, ...one }: Values = values;
  const model = buildModel(ref, one, tensorParallelOf(one));
  const verdict = choice(values, 'verdict');
  const result = advise(model, { ...estimateOptions(one, ref, model), gpu: values.gpu!, gpus, ...(verdict !== undefined ? { verdict } : {}) });
  return { stdout: adviseTable(result, values.gpu!), code: values.check && !result.baseline.fits && result.best === undefined ? 1 : 0 };
}

function runFit(ref: ModelRef, values: Values): Outcome {
  if (values.advise) return runAdvise(ref, values);
  const solve = choice(values, 'solve') ?? DEFAULTS.solve;
  if (solve === 'seq' && ref.kind !== 'llm') usage('--solve', `seq needs an LLM; ${ref.name} is a CNN`, { expected: 'batch or resolution', received: 'seq' });
  if (solve === 'resolution' && ref.kind !== 'cnn')
    usage('--solve', `resolution needs a CNN; ${ref.name} is an LLM`, { expected: 'batch or seq', received: 'resolution' });
  if (solve === 'batch' && values.batch !== undefined) usage('--batch', 'is what --solve batch solves for: leave it out');
  if (solve === 'seq' && values.seq !== undefined) usage('--seq', 'is what --solve seq solves for: leave it out');
  const model = buildModel(ref, values, tensorParallelOf(values));
  const symbol = solve === 'batch' ? 'B' : solve === 'seq' ? 'S' : 'R';
  const verdict = choice(values, 'verdict');
  const best = maxFitting(model, symbol, { ...estimateOptions(values, ref, model, solve), gpu: values.gpu!, ...(verdict !== undefined ? { verdict } : {}) });
  return { stdout: `${best}\n`, code: values.check && best < 1 ? 1 : 0 };
}

/** The largest batch / context / resolution that fits. */
export const fitCommand: ModelCommand<'fit'> = {
  name: 'fit',
  summary: 'the largest batch / context / resolution that fits',
  named: 'fit',
  help: FIT_HELP,
  words: 1,
  model: true,
  rules: (values) => {
    if (values.gpu === undefined)
      usage('--gpu', 'fit needs the GPU to fit', {
        expected: `a size like 24GB or one of ${listOf(
          GPUS.map((g) => g.name),
          4,
        )}`,
      });
  },
  run: runFit,
};
