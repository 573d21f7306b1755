/** The command line read by node:util's parseArgs (strict), its errors as one line naming the flag. */
import { parseArgs } from 'node:util';
import { nearest } from './args.js';
import { COMMAND_SPECS, SUBCOMMANDS } from './commands/index.js';
import { CliError, oneLine } from './errors.js';
import { FIELD_FLAGS, OPTIONS, type Command, type Values } from './flags.js';
import { normalizeBooleans } from './fields.js';

/** The flags' values, the positional arguments and the command they name. */
export interface Parsed {
  readonly command: Command;
  readonly values: Values;
  readonly positionals: readonly string[];
}

const FLAG_NAMES = Object.keys(OPTIONS).map((f) => `--${f}`);

/** node:util parseArgs errors as one line naming the flag (and the nearest valid one). */
function parseError(error: unknown, argv: readonly string[]): CliError | undefined {
  if (!(error instanceof TypeError) || !('code' in error) || !String((error as { code: unknown }).code).startsWith('ERR_PARSE_ARGS')) return undefined;
  const code = String((error as { code: unknown }).code);
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const flag = /Unknown option '([^']+)'/.exec(error.message)?.[1] ?? '';
    const near = flag.startsWith('--') ? nearest(flag, FLAG_NAMES) : undefined;
    return new CliError(flag, near !== undefined ? `unknown option; did you mean ${near}?` : 'unknown option (see vram-ts --help)');
  }
  const flag = /'(?:-\w, )?(--[\w-]+)/.exec(error.message)?.[1];
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && flag !== undefined) {
    if (/does not take an argument/.test(error.message))
      return new CliError(flag, 'takes no value', { received: JSON.stringify(argv.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1) ?? '') });
    if (/argument missing/.test(error.message)) return new CliError(flag, 'needs a value');
    if (/ambiguous/.test(error.message)) {
      const next = argv[argv.indexOf(flag) + 1];
      return new CliError(flag, `needs a value; write ${flag}=VALUE for a value that starts with a dash`, {
        received: next !== undefined ? JSON.stringify(next) : undefined,
      });
    }
  }
  return new CliError(flag ?? '', oneLine(error.message));
}

/** The command a first word names; an estimate or --safetensors otherwise. */
function commandOf(positionals: readonly string[], values: Values): Command {
  const first = positionals[0];
  const sub = SUBCOMMANDS.find((c) => c === first);
  if (sub !== undefined) return COMMAND_SPECS[sub].name;
  return values.safetensors !== undefined ? 'safetensors' : 'estimate';
}

/** The command line, read strictly (an unknown flag or a missing value is a CliError). */
export function parse(argv: readonly string[]): Parsed {
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args: normalizeBooleans(argv, FIELD_FLAGS), allowPositionals: true, strict: true, options: OPTIONS }) as {
      values: Values;
      positionals: string[];
    };
  } catch (error) {
    throw parseError(error, argv) ?? error;
  }
  return { command: commandOf(parsed.positionals, parsed.values), values: parsed.values, positionals: parsed.positionals };
}
