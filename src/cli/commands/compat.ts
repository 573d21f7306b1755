/** `vram-ts compat zero-paper|deepspeed|megatron <model>`: a published formula next to vram-ts's rank. */
import { decoderMeta } from '../lib.js';
import { oneOf } from '../args.js';
import { COMPATS, compatText, type Compat } from '../compat.js';
import { usage } from '../errors.js';
import { DEFAULTS, type Values } from '../flags.js';
import { COMPAT_HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { count } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';

function runCompat(ref: ModelRef, values: Values, positionals: readonly string[]): Outcome {
  const which = positionals[1] as Compat;
  if (ref.kind !== 'llm') usage('model', `compat compares decoder LLMs; ${ref.name} is a CNN`);
  const model = buildModel(ref, values);
  const tp = count(values, 'tp', 1);
  const pp = count(values, 'pp', 1);
  const gpus = count(values, 'gpus', 8);
  if (which !== 'megatron' && (tp > 1 || pp > 1)) usage(tp > 1 ? '--tp' : '--pp', 'applies to compat megatron only');
  const nodes = count(values, 'nodes', 1);
  if (which !== 'deepspeed' && nodes > 1) usage('--nodes', 'applies to compat deepspeed only');
  if (gpus % (tp * pp) !== 0) usage('--gpus', `must be a multiple of --tp × --pp = ${tp * pp}`, { received: String(gpus) });
  const job = { name: ref.name, gpus, nodes, seq: count(values, 'seq', DEFAULTS.seq), batch: count(values, 'batch', DEFAULTS.batch), tp, pp };
  const rebuild = (tensorParallel: { readonly size: number; readonly sequenceParallel: boolean }) =>
    decoderMeta(model).family === 'gpt2' ? undefined : buildModel(ref, values, { tensorParallel });
  return { stdout: compatText(which, model, decoderMeta(model), job, rebuild), code: 0 };
}

/** A published closed form beside vram-ts's simulation of the same rank. */
export const compatCommand: ModelCommand<'compat'> = {
  name: 'compat',
  summary: "a published formula next to vram-ts's rank, and why they differ",
  named: 'compat',
  help: COMPAT_HELP,
  words: 2,
  checkWords: (positionals) => {
    const which = positionals[1];
    if (which === undefined) usage('compat', 'which closed form?', { expected: COMPATS.join(', ') });
    oneOf(which, 'compat', COMPATS);
  },
  model: true,
  run: runCompat,
};
