/**
 * The checks of a trainer's dataclass fields (TrainingArguments, SFTConfig, GRPOConfig,
 * LoraConfig) as args.ts reads them: each problem an issue with the field's path, so that one
 * VramError names them all; and the arguments' own shapes (the trainer, the release, the options).
 */
import { fail, type VramIssue as Issue } from '../errors.js';
import { oneOf, show } from '../validate.js';

export type Path = readonly (string | number)[];

/** Which trainer: transformers' `Trainer`, TRL's `SFTTrainer` or `GRPOTrainer`. */
export const trainerKind = oneOf(['trainer', 'sft', 'grpo'], 'trainer');

/**
 * Whether a value given for a field is its default, compared as JSON data (what the dataclass
 * default is): numbers, strings, booleans, null, lists and plain objects, key order aside. Any
 * other value (a bigint, a function, a Map, a cycle deeper than the default) is not the default.
 */
export function sameValue(a: unknown, b: unknown, depth = 0): boolean {
  if (a === b) return true;
  if (depth > 32 || typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b))
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameValue(x, b[i], depth + 1));
  if (!plain(a) || !plain(b)) return false;
  const keys = Object.keys(a);
  return (
    keys.length === Object.keys(b).length &&
    keys.every((k) => Object.hasOwn(b, k) && sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], depth + 1))
  );
}

/** A plain object (`{ … }`, or one without a prototype): what a dataclass's fields or a config are given as. */
export function plain(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A trainer's fields (`args`, `config`, `peft_config`) as a plain object, else a VramError at `path`. */
export function fieldsObject(value: unknown, className: string, path: Path): Readonly<Record<string, unknown>> {
  if (!plain(value)) fail('bad-option', `${className} fields as an object`, { path, expected: `{ field: value } of ${className}`, received: show(value) });
  return value;
}

export function positiveInt(v: Record<string, unknown>, name: string, path: Path, issues: Issue[], allowNull = false): number | null {
  const value = v[name];
  if (allowNull && value === null) return null;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    issues.push({
      path: [...path, name],
      code: 'bad-option',
      message: 'must be a positive integer',
      expected: allowNull ? 'an integer ≥ 1 or null' : 'an integer ≥ 1',
      received: show(value),
    });
    return 1;
  }
  return value;
}

export function nonNegative(v: Record<string, unknown>, name: string, path: Path, issues: Issue[]): number {
  const value = v[name] ?? 0;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    issues.push({ path: [...path, name], code: 'bad-option', message: 'must be a finite number ≥ 0', expected: 'a number ≥ 0', received: show(value) });
    return 0;
  }
  return value;
}

export function flag(v: Record<string, unknown>, name: string, path: Path, issues: Issue[]): boolean {
  const value = v[name];
  if (typeof value !== 'boolean') {
    issues.push({ path: [...path, name], code: 'bad-option', message: 'must be true or false', expected: 'a boolean', received: show(value) });
    return false;
  }
  return value;
}

export function choice<T extends string>(v: Record<string, unknown>, name: string, values: readonly T[], path: Path, issues: Issue[]): T {
  const value = v[name];
  if (typeof value !== 'string' || !values.includes(value as T)) {
    issues.push({
      path: [...path, name],
      code: 'not-modelled',
      message: `${name} ${show(value)} is not modelled`,
      expected: values.join(', '),
      received: show(value),
    });
    return values[0]!;
  }
  return value as T;
}

/** A copy of JSON data (plain objects and lists, to a depth), so that freezing a reading leaves the caller's objects alone (`__proto__` kept as a plain key). */
export function copyData(value: unknown, depth = 0): unknown {
  if (depth > 32) return value;
  if (Array.isArray(value)) return value.map((v) => copyData(v, depth + 1));
  if (!plain(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value))
    Object.defineProperty(out, k, { value: copyData(v, depth + 1), enumerable: true, writable: true, configurable: true });
  return out;
}

/** A value a parsed JSON or YAML file can hold (strings, numbers, booleans, null, lists, mappings), else an issue at its path; `what` names the file. */
export function jsonData(value: unknown, path: Path, issues: Issue[], what: string, depth = 0): void {
  if (value === null || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return;
  if (depth < 32 && Array.isArray(value)) for (let i = 0; i < value.length; i++) jsonData(value[i], [...path, i], issues, what, depth + 1);
  else if (depth < 32 && plain(value)) for (const [k, v] of Object.entries(value)) jsonData(v, [...path, k], issues, what, depth + 1);
  else
    issues.push({
      path,
      code: 'bad-option',
      message: `not JSON data: ${what} holds strings, numbers, booleans, null, lists and mappings`,
      received: show(value),
    });
}
