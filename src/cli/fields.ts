/**
 * The trainers' own fields as flags: every field of TrainingArguments, SFTConfig and GRPOConfig
 * is `--<field with _ → ->`, taken by the commands whose config class has it, and read by the
 * JSON type of its defaults (a boolean, a number, a string, a list; a field whose default is
 * null in every class takes any scalar). ./flags.ts adds these entries to its table.
 */
import { trainerFields, type TrainerKind } from '../index.js';
import { numberOf } from './args.js';
import { usage } from './errors.js';

/** How a field's value is read from the command line. */
export type FieldKind = 'boolean' | 'number' | 'string' | 'list' | 'any';

/** One generated flag: the field it sets, the commands that take it, how its value reads. */
export interface FieldFlagSpec {
  readonly field: string;
  readonly scope: readonly ('grpo' | 'sft' | 'rl')[];
  readonly kind: FieldKind;
  /** Whether some class's default is null (a string field then takes `null` / `none` as None too). */
  readonly nullable: boolean;
}

/** The commands that take trainer fields, and the trainer each one runs. */
export const FIELD_COMMANDS = { grpo: 'grpo', sft: 'sft' } as const satisfies Record<string, TrainerKind>;

/** A field's flag name: `per_device_train_batch_size` → `per-device-train-batch-size`. */
export const kebab = (field: string): string => field.replace(/_/g, '-');

/** The JSON type of one default. */
function typeOf(value: unknown): 'null' | 'boolean' | 'number' | 'string' | 'list' | 'object' {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'list';
  const t = typeof value;
  return t === 'boolean' || t === 'number' || t === 'string' ? t : 'object';
}

/** The kind of a field from the types of its defaults in every class (TrainingArguments' bf16 is a boolean, SFTConfig's null). */
function kindOf(types: ReadonlySet<string>): FieldKind {
  const known = [...types].filter((t) => t !== 'null');
  if (known.length === 1 && known[0] !== 'object') return known[0] as FieldKind;
  return 'any';
}

/**
 * The flag of every field of the trainers' config classes in the default TRL release, minus the
 * names in `taken` (a command flag of the same name wins; the field is still a --config key).
 */
export function fieldFlags(taken: ReadonlySet<string>): Readonly<Record<string, FieldFlagSpec>> {
  const seen = new Map<string, { scope: Set<'grpo' | 'sft'>; types: Set<string> }>();
  const classes: readonly ['grpo' | 'sft', TrainerKind][] = [...(Object.entries(FIELD_COMMANDS) as ['grpo' | 'sft', TrainerKind][]), ['sft', 'trainer']];
  for (const [command, trainer] of classes) {
    for (const [field, value] of Object.entries(trainerFields(trainer).defaults)) {
      const entry = seen.get(field) ?? { scope: new Set(), types: new Set() };
      if (trainer !== 'trainer') entry.scope.add(command);
      entry.types.add(typeOf(value));
      seen.set(field, entry);
    }
  }
  const out: Record<string, FieldFlagSpec> = {};
  for (const [field, { scope, types }] of seen) {
    if (taken.has(kebab(field)) || scope.size === 0) continue;
    // rl --framework trl runs a GRPOTrainer: it takes GRPOConfig's fields too.
    const commands: ('grpo' | 'sft' | 'rl')[] = [...scope].sort();
    if (scope.has('grpo')) commands.push('rl');
    out[kebab(field)] = { field, scope: commands, kind: kindOf(types), nullable: types.has('null') };
  }
  return out;
}

/** A value after its flag as the field's kind reads it; a bad one is a CliError naming the flag. */
export function readField(spec: FieldFlagSpec, text: string): unknown {
  const flag = `--${kebab(spec.field)}`;
  // A number or a boolean is never spelt null: there `null` is the Python None (`int | None` fields); a string field takes it only where its default is null.
  const nullable = spec.nullable || spec.kind === 'number' || spec.kind === 'boolean';
  if (nullable && /^(?:null|none|None)$/.test(text)) return null;
  if ((spec.kind === 'boolean' || spec.kind === 'any') && /^(?:true|false|True|False)$/.test(text)) return text.toLowerCase() === 'true';
  if ((spec.kind === 'any' || spec.kind === 'list') && /^[[{]/.test(text)) return jsonOf(text, flag);
  const n = numberOf(text);
  if ((spec.kind === 'number' || spec.kind === 'any') && n !== undefined) return n;
  if (spec.kind === 'string' || spec.kind === 'any') return text;
  if (spec.kind === 'list') return text === '' ? [] : text.split(',');
  const expected = spec.kind === 'boolean' ? 'true or false' : 'a number (8, 0.04, 1e-6)';
  return usage(flag, `${spec.field} is ${spec.kind === 'boolean' ? 'true or false' : 'a number'}`, {
    expected: `${expected} or null`,
    received: JSON.stringify(text),
  });
}

function jsonOf(text: string, flag: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    return usage(flag, 'a value starting with [ or { is read as JSON, and this is not valid JSON', {
      received: error instanceof Error ? error.message : undefined,
    });
  }
}

/**
 * The command line with the boolean fields' forms made one: `--flag` alone and `--no-flag` become
 * `--flag=true` / `--flag=false`, and `--flag true|false` becomes `--flag=true|false`, so that node's
 * parser reads every field flag as a string.
 */
export function normalizeBooleans(argv: readonly string[], flags: Readonly<Record<string, FieldFlagSpec>>): string[] {
  const out: string[] = [];
  const boolean = (name: string) => flags[name]?.kind === 'boolean';
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      out.push(...argv.slice(i));
      break;
    }
    const name = arg.startsWith('--') && !arg.includes('=') ? arg.slice(2) : '';
    if (name.startsWith('no-') && boolean(name.slice(3)) && flags[name] === undefined) out.push(`--${name.slice(3)}=false`);
    else if (boolean(name)) {
      const next = argv[i + 1];
      const value = next !== undefined && /^(?:true|false|True|False)$/.test(next) ? next : undefined;
      out.push(`--${name}=${value ?? 'true'}`);
      if (value !== undefined) i++;
    } else out.push(arg);
  }
  return out;
}
