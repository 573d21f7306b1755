/**
 * The `vram-ts` command: a thin shell over the library, for people and for scripts. This file
 * dispatches: parse the line, check its usage, resolve the `<model>` (reading a Hugging Face
 * Hub model first, in runAsync), then run the command once; each command is one file under
 * ./commands, each flag one entry of ./flags.ts.
 *
 * Exit codes: 0 done (with --check: it fits); 1 does not fit (only with --check); 2 usage or
 * input error, with exactly one line on stderr and nothing on stdout. stdout holds exactly the
 * asked format (json always parses), written only once everything, --svg included, succeeded.
 * An error nobody expected prints `vram-ts: internal error: …` and exits 2 (VRAM_TS_DEBUG
 * rethrows it instead, for the stack).
 */
import { LLMS, VramError } from '../index.js';
import { COMMAND_SPECS, type ModelCommand, type Outcome } from './commands/index.js';
import { CliError, errorLine, fromVramError, fsReason, internalErrorLine } from './errors.js';
import type { Values } from './flags.js';
import { hubLookup, type HubEnv } from './hub.js';
import { resolveModel, type ModelRef } from './model.js';
import { parse } from './parse.js';
import { checkUsage } from './usage.js';
import { checkKind, checkValues, count } from './values.js';

/** How long a Hub lookup (a few small requests) may take by default. */
const HUB_TIMEOUT_S = 60;

export { HELP } from './help.js';
export { SCOPE, type Command, type Flag } from './flags.js';

/** A model command whose usage is checked and whose `<model>` is resolved, not yet built. */
interface Ready {
  readonly spec: ModelCommand;
  readonly values: Values;
  readonly positionals: readonly string[];
  readonly ref: ModelRef;
}

/** Everything that needs no model (help, usage, the commands without one), or the model command ready to run. */
function prepare(argv: readonly string[]): { readonly done: Outcome } | { readonly ready: Ready } {
  const { command, values, positionals } = parse(argv);
  const spec = COMMAND_SPECS[command];
  if (values.help) return { done: { stdout: spec.help, code: 0 } };
  checkUsage(spec, values, positionals);
  if (!spec.model) return { done: spec.run(values, positionals.slice(spec.words)) };
  return { ready: { spec, values, positionals, ref: resolveModel(positionals[spec.words]!, values) } };
}

/** The model command, run once with its model resolved (a Hub model read). */
function finish({ spec, values, positionals }: Ready, ref: ModelRef): Outcome {
  checkKind(spec.name, ref.kind, ref.name, values);
  checkValues(values);
  return spec.run(ref, values, positionals);
}

/** Whether VRAM_TS_DEBUG asks for internal errors to propagate (with their stack). */
function debugging(): boolean {
  return typeof process !== 'undefined' && process.env.VRAM_TS_DEBUG !== undefined;
}

/** An error as its one line on stderr; exit code 2. */
function report(error: unknown, err: (text: string) => void): number {
  if (error instanceof CliError) err(errorLine(error));
  else if (error instanceof VramError) err(errorLine(fromVramError(error)));
  else if (debugging()) throw error;
  else err(internalErrorLine(error));
  return 2;
}

/**
 * Runs the command; returns the exit code (0 done or fits, 1 does not fit with --check, 2 usage
 * or input error). stdout text goes to `out` in one piece once everything succeeded; an error
 * is one line to `err` and nothing to `out`. It makes no requests: a Hub model is refused (runAsync reads it).
 */
export function run(argv: readonly string[], out: (text: string) => void, err: (text: string) => void): number {
  try {
    const prepared = prepare(argv);
    if ('done' in prepared) return write(prepared.done, out);
    const { ref } = prepared.ready;
    if (ref.repo !== undefined)
      return report(new CliError('model', `${ref.repo} is a Hugging Face Hub repository: runAsync reads it (run() makes no requests)`), err);
    return write(finish(prepared.ready, ref), out);
  } catch (error) {
    return report(error, err);
  }
}

function write({ stdout, code }: Outcome, out: (text: string) => void): number {
  out(stdout);
  return code;
}

/**
 * {@link run}, and a model named `<org>/<name>` (not a file here) is read from the Hugging Face Hub
 * first: config.json and the safetensors headers (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE as
 * huggingface_hub reads them; `--revision`), cached on disk so that a second call asks at most
 * one conditional request. The bin runs this.
 */
export async function runAsync(argv: readonly string[], out: (text: string) => void, err: (text: string) => void, env: HubEnv = process.env): Promise<number> {
  try {
    const prepared = prepare(argv);
    if ('done' in prepared) return write(prepared.done, out);
    const { ref, values } = prepared.ready;
    const loaded = ref.repo === undefined ? ref : await withHub(ref, ref.repo, values.revision, env, count(values, 'timeout', HUB_TIMEOUT_S));
    return write(finish(prepared.ready, loaded), out);
  } catch (error) {
    return report(error, err);
  }
}

/** The Hub model read (the disk cache first); its failures one line naming the repository. */
async function withHub(ref: ModelRef, repo: string, revision: string | undefined, env: HubEnv, timeoutS: number): Promise<ModelRef> {
  try {
    return { ...ref, hub: await hubLookup(repo, revision, env, timeoutS * 1000) };
  } catch (failure) {
    if (!(failure instanceof VramError)) throw failure;
    const line = fromVramError(failure, repo);
    const catalog = LLMS.find((e) => e.repo.toLowerCase() === repo.toLowerCase());
    const hint =
      catalog !== undefined && ['hub-auth', 'hub-offline'].includes(failure.issues[0]?.code ?? '') ? `; the built-in ${catalog.id} needs no network` : '';
    throw new CliError(line.path, `${line.message}${hint}`, { expected: line.expected, received: line.received, more: line.more });
  }
}

/**
 * What the bin does when writing to stdout fails: a reader that went away (`| head -1`, EPIPE)
 * ends the command quietly with the exit code it already has; any other failure is one line and 2.
 */
export function stdoutFailure(error: unknown, exitCode: number): { exitCode: number; line: string | undefined } {
  const code = typeof error === 'object' && error !== null && 'code' in error ? String((error as { code: unknown }).code) : '';
  if (code === 'EPIPE' || code === 'ERR_STREAM_DESTROYED') return { exitCode, line: undefined };
  return { exitCode: 2, line: `vram-ts: stdout: cannot write (${fsReason(error)})\n` };
}
