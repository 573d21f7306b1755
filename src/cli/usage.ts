/**
 * The usage rules every command shares: flags outside their scope, extra or missing arguments,
 * and flags that contradict each other; a command's own rules run after them (its `rules`).
 */
import { nearest } from './args.js';
import { COMMAND_SPECS, SUBCOMMANDS, type CommandSpec } from './commands/index.js';
import { usage } from './errors.js';
import { checkDecided } from './config-flags.js';
import { scopeOf, specOf, type Command, type Values } from './flags.js';
import { MODEL_NAMES } from './model.js';

function listAnd(items: readonly string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}

/** Refuses every flag the command does not take, saying which commands take it (and why not this one). */
function checkScope(command: Command, values: Values): void {
  const named = (c: Command) => COMMAND_SPECS[c].named;
  for (const flag of Object.keys(values)) {
    if (values[flag] === undefined || scopeOf(flag).includes(command)) continue;
    const why = specOf(flag).why?.[command];
    const where = listAnd(scopeOf(flag).map(named));
    if (command === 'safetensors') usage(`--${flag}`, '--safetensors FILE takes no other option');
    if (flag === 'safetensors') usage('--safetensors', `works on its own (vram-ts --safetensors FILE), not with ${named(command)}`);
    // A flag no command takes any more (grpo's before the trainers' fields) says what replaced it.
    if (scopeOf(flag).length === 0) usage(`--${flag}`, `is no longer an option${why !== undefined ? `: ${why}` : ''}`);
    usage(`--${flag}`, `applies to ${where} only, not to ${named(command)}${why !== undefined ? `: ${why}` : ''}`);
  }
}

/** The arguments after the command's words: one `<model>`, or none. */
function checkArguments(spec: CommandSpec, positionals: readonly string[]): void {
  spec.checkWords?.(positionals);
  const args = positionals.slice(spec.words);
  const wanted = spec.model || spec.file === true ? 1 : 0;
  if (args.length > wanted) {
    const near = spec.name === 'estimate' ? nearest(args[0]!, SUBCOMMANDS) : undefined;
    if (near !== undefined) usage(args[0]!, `unknown command; did you mean ${near}?`, { expected: SUBCOMMANDS.join(', ') });
    if (wanted === 0) usage(args[0]!, `unexpected argument: ${spec.named} takes no <model>`);
    usage(args[1]!, 'unexpected argument', { expected: spec.model ? 'one <model>' : 'one FILE' });
  }
  if (args.length < wanted && !spec.model) usage('FILE', 'no file given', { expected: `${spec.named} FILE` });
  if (args.length < wanted) usage('model', 'no model given', { expected: `${MODEL_NAMES.join(', ')} or the path of a config.json` });
}

/** Whether a data-parallel size > 1 was given. */
const manyGpus = (values: Values) => values.gpus !== undefined && values.gpus !== '1';

/** Training-only and inference rules. */
function checkMode(values: Values): void {
  if (values.train && values.infer) usage('--train, --infer', 'pick one: a training step (--train, the default) or an inference forward (--infer)');
  if (values.infer && values.optimizer !== undefined) usage('--optimizer', 'applies to training; --infer runs no optimizer');
  if (values.infer && values.checkpointing) usage('--checkpointing', 'applies to training; --infer keeps nothing for backward');
  if (values.infer && (values.gpus !== undefined || values.engine !== undefined || values.fsdp || values.rank !== undefined || values.zero !== undefined))
    usage(
      values.gpus !== undefined
        ? '--gpus'
        : values.fsdp
          ? '--fsdp'
          : values.engine !== undefined
            ? '--engine'
            : values.zero !== undefined
              ? '--zero'
              : '--rank',
      'data-parallel ranks are estimated for training; --infer is one GPU',
    );
}

/** The parallel layout's flags: engines, ZeRO, ranks, pipelines and the sizes that need --gpus. */
function checkLayout(command: Command, values: Values): void {
  if (values.fsdp && values.engine !== undefined && values.engine !== 'fsdp2') usage('--fsdp', `not with --engine ${values.engine}: --fsdp is --engine fsdp2`);
  if (values.fsdp && values.zero !== undefined) usage('--zero', 'is a DeepSpeed ZeRO stage: not with --fsdp');
  if (values.engine === 'deepspeed' && values.zero === undefined && command !== 'plan')
    usage('--engine', 'deepspeed needs the ZeRO stage', { expected: '--zero 1, 2 or 3' });
  if (values.zero !== undefined && command !== 'plan' && !manyGpus(values)) usage('--zero', 'needs --gpus N (N > 1): ZeRO partitions over data-parallel ranks');
  if (values['all-ranks'] && !manyGpus(values)) usage('--all-ranks', 'needs --gpus N (N > 1): one GPU is one rank');
  for (const flag of ['stage', 'schedule', 'virtual-stages', 'no-return-outputs'] as const)
    if (values[flag] !== undefined && values.pp === undefined) usage(`--${flag}`, 'applies to a pipeline: give --pp N');
  const ranked = command === 'estimate' || command === 'fit';
  if (ranked && values.pp !== undefined && values.gpus === undefined) usage('--pp', 'needs --gpus (pp × the data-parallel ranks of each stage)');
  if (ranked && values.tp !== undefined && values.gpus === undefined) usage('--tp', 'needs --gpus (tp × pp × the data-parallel ranks)');
  if (ranked && values.cp !== undefined && values.gpus === undefined) usage('--cp', 'needs --gpus (tp × pp × cp × the data-parallel ranks)');
  if (ranked && values.ep !== undefined && values.gpus === undefined) usage('--ep', 'needs --gpus (ep × the data-parallel ranks)');
  if (values.infer && (values.pp !== undefined || values.offload !== undefined || values['micro-batches'] !== undefined))
    usage(values.pp !== undefined ? '--pp' : values.offload !== undefined ? '--offload' : '--micro-batches', 'applies to training; --infer is one forward');
  if (values.offload !== undefined && !manyGpus(values)) usage('--offload', 'needs --gpus N with --zero or --fsdp: offloading is an engine feature');
  if (values['all-ranks'] && values.rank !== undefined) usage('--all-ranks', 'lists every rank: leave out --rank');
  if (values['all-ranks'] && values.stage !== undefined) usage('--all-ranks', 'lists every stage: leave out --stage');
}

/** Refuses flags the command does not take, extra or missing arguments, and flags that contradict each other. */
export function checkUsage(spec: CommandSpec, values: Values, positionals: readonly string[]): void {
  checkScope(spec.name, values);
  checkArguments(spec, positionals);
  checkDecided(values);
  checkMode(values);
  checkLayout(spec.name, values);
  if (values.qlora && values['lora-rank'] === undefined) usage('--qlora', 'needs --lora-rank: QLoRA trains LoRA adapters over the 4-bit base');
  if (values.dtype !== undefined && values.precision !== undefined)
    usage('--dtype', `not with --precision, which sets the weights' dtype too`, { received: `--dtype ${values.dtype} --precision ${values.precision}` });
  spec.rules?.(values);
  if (values.check && values.gpu === undefined && spec.name !== 'fit') usage('--check', 'needs --gpu, the GPU to check against');
}
