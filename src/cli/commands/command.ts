/** The record each command file exports: what the dispatcher (../main.ts) needs to run it. */
import type { Command, Values } from '../flags.js';
import type { ModelRef } from '../model.js';

/** What a command prints on stdout (once everything succeeded) and its exit code. */
export interface Outcome {
  readonly stdout: string;
  readonly code: number;
}

interface CommandBase<C extends Command> {
  readonly name: C;
  /** What it does, in a line. */
  readonly summary: string;
  /** How error messages name it (`applies to fit only, not to an estimate`). */
  readonly named: string;
  /** Its --help text. */
  readonly help: string;
  /** The words before its arguments (`fit`, `compat zero-paper`); checked by `checkWords` where it has any of its own. */
  readonly words: number;
  readonly checkWords?: (positionals: readonly string[]) => void;
  /** Its own usage rules, after the rules every command shares. */
  readonly rules?: (values: Values) => void;
}

/** A command of one `<model>` (the positional after its words). */
export interface ModelCommand<C extends Command = Command> extends CommandBase<C> {
  readonly model: true;
  readonly run: (ref: ModelRef, values: Values, positionals: readonly string[]) => Outcome;
}

/** A command without a model (`file`: one FILE argument after its words instead). */
export interface PlainCommand<C extends Command = Command> extends CommandBase<C> {
  readonly model: false;
  readonly file?: true;
  readonly run: (values: Values, positionals: readonly string[]) => Outcome;
}

export type CommandSpec<C extends Command = Command> = ModelCommand<C> | PlainCommand<C>;
