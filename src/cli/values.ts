/**
 * The flags' values read as the table (./flags.ts) says: counts within their limits, one of the
 * accepted values, or the table's own reader (the --gpu budget, the --transformers release); and
 * the refusals that the table decides alone (a flag of the other model kind).
 */
import { oneOf, wholeNumber } from './args.js';
import { usage } from './errors.js';
import { FLAGS, specOf, type Command, type Flag, type Values } from './flags.js';

type Spec<F extends Flag> = (typeof FLAGS)[F];

/** The flags that are counts (a `max` in the table). */
export type CountFlag = { [F in Flag]: Spec<F> extends { readonly max: number } ? F : never }[Flag];

/** The flags with one list of accepted values, and those values. */
export type ChoiceFlag = { [F in Flag]: Spec<F> extends { readonly values: readonly string[] } ? F : never }[Flag];
/** The accepted values of a choice flag, as a union. */
export type ChoiceOf<F extends ChoiceFlag> = Spec<F> extends { readonly values: readonly (infer T)[] } ? T : never;

/** A count flag's value, or `fallback` when it is left out; refused outside 1 .. its limit. */
export function count(values: Values, flag: CountFlag, fallback: number): number {
  const value = values[flag];
  return value === undefined ? fallback : wholeNumber(value, `--${flag}`, 1, FLAGS[flag].max);
}

/** A flag's value among the accepted ones, or undefined when it is left out. */
export function choice<F extends ChoiceFlag>(values: Values, flag: F): ChoiceOf<F> | undefined {
  const value = values[flag] as string | undefined;
  return value === undefined ? undefined : (oneOf(value, `--${flag}`, FLAGS[flag].values) as ChoiceOf<F>);
}

/** --format among the command's formats, the table's default when it is left out. */
export function formatOf<C extends keyof (typeof FLAGS)['format']['values']>(
  values: Values,
  command: C,
  fallback: string,
): (typeof FLAGS)['format']['values'][C][number] {
  return oneOf(values.format ?? fallback, '--format', FLAGS.format.values[command]);
}

/** The values checked before the model is built (they need none), in this order (--framework's values are the command's: read where it is used). */
const UP_FRONT = ['optimizer', 'precision', 'device', 'attention', 'dtype', 'transformers', 'gpu'] as const satisfies readonly Flag[];

/** Values that need no model: enumerations, the release, the GPU. */
export function checkValues(values: Values): void {
  for (const flag of UP_FRONT) {
    const value = values[flag];
    if (value === undefined) continue;
    const read = specOf(flag).read;
    if (read !== undefined) read(value as string);
    else choice(values, flag as ChoiceFlag);
  }
}

/** Model-kind rules: LLM flags on a CNN, CNN flags on an LLM. */
export function checkKind(command: Command, kind: 'cnn' | 'llm', name: string, values: Values): void {
  if (kind === 'cnn' && (command === 'grpo' || command === 'sft')) usage('model', `${command} needs an LLM; ${name} is a CNN`);
  for (const flag of Object.keys(FLAGS) as Flag[]) {
    const only = specOf(flag).only;
    if (only === undefined || only.kind === kind || values[flag] === undefined) continue;
    const says = only.says ?? (only.kind === 'llm' ? 'applies to LLMs' : 'applies to CNNs');
    usage(`--${flag}`, `${says}; ${name} is ${kind === 'cnn' ? 'a CNN' : 'an LLM'}${only.hint ?? ''}`);
  }
}
