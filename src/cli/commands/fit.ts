/** `vram-ts fit <model> --gpu <gpu>`: the largest batch, sequence length or image side that fits. */
import { GPUS, maxFitting } from '../lib.js';
import { listOf } from '../args.js';
import { usage } from '../errors.js';
import { DEFAULTS, type Values } from '../flags.js';
import { FIT_HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { estimateOptions, tensorParallelOf } from '../options.js';
import { choice } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';

function runFit(ref: ModelRef, values: Values): Outcome {
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
