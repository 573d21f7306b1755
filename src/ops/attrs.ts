// Op rules' attribute schemas: what an op accepts, checked by its builder and, cheaply, by the
// rule itself (graph()'s g.call passes attributes straight from user code).

import { VramError, type VramIssue } from '../errors.js';
import { isExpr } from '../sym/expr.js';
import { object, show, validate, type Check, type Path } from '../validate.js';
import type { OpContext } from './types.js';

/** An op rule's attribute schema: each attribute's check (validate.ts's Checks). */
export type AttrFields = Readonly<Record<string, Check>>;

/** Reports one problem across attributes, at the attribute `key`. */
export type AcrossReport = (key: string, message: string, expected: string, received: unknown) => void;

/**
 * The schema of an op rule's attributes, which its builder checks too (the path then starts at
 * the builder): each attribute's check, the required ones, and the rules across attributes that
 * run once every attribute passes (groups dividing `out`, a pad at most half the window).
 */
export interface AttrSchema {
  readonly fields: AttrFields;
  readonly required?: readonly string[];
  readonly across?: (attrs: Record<string, unknown>, report: AcrossReport) => void;
}

const NO_PATH: Path = [];
// Scratch for the quiet pass (checks never run a rule, so no two passes overlap).
const scratch: VramIssue[] = [];

/**
 * The check an op rule runs on its attributes first, so that junk given through `g.call` (null,
 * a string shape, an unknown key) is a VramError at `ctx.path` (then the attribute), never a
 * TypeError inside the rule. It is on the hot path, so it passes without allocating: one quiet
 * run of the checks (a path is made only for an error), and with `cache` an attrs object that
 * passed once (a builder's layer, traced again and again) is not checked again.
 *
 * @example
 * ```ts
 * import { estimate, graph, viewOp, VramError } from 'vram-ts';
 * const bad = graph((g, [x]) => g.call(viewOp, [x!], { shape: 'x' } as never)[0]!);
 * try {
 *   estimate(bad, { input: [2, 3] });
 * } catch (error) {
 *   if (error instanceof VramError) console.log(error.issues[0]?.path); // [ 'view', 'shape' ]
 * }
 * ```
 */
export function attrsGuard(schema: AttrSchema, cache = false): (attrs: unknown, ctx: OpContext) => void {
  const { fields, required = [], across } = schema;
  const seen = cache ? new WeakSet<object>() : null;
  const shape = object({ fields, required });
  return (attrs, ctx) => {
    if (typeof attrs === 'object' && attrs !== null && !Array.isArray(attrs)) {
      if (seen?.has(attrs)) return;
      const record = attrs as Record<string, unknown>;
      if (quietPass(record, fields, required) && (across === undefined || quietAcross(across, record))) {
        seen?.add(attrs);
        return;
      }
    }
    validate(attrs, shape, ctx.path);
    checkAcross(schema, attrs as object, ctx.path, 'bad-attribute');
  };
}

function quietPass(attrs: Record<string, unknown>, fields: AttrFields, required: readonly string[]): boolean {
  for (const key in attrs) {
    if (!Object.hasOwn(attrs, key)) continue;
    if (!Object.hasOwn(fields, key)) return false;
    const value = attrs[key];
    if (value === undefined) continue;
    fields[key]!(value, NO_PATH, scratch);
    if (scratch.length > 0) {
      scratch.length = 0;
      return false;
    }
  }
  for (const key of required) if (attrs[key] === undefined) return false;
  return true;
}

function quietAcross(across: NonNullable<AttrSchema['across']>, attrs: Record<string, unknown>): boolean {
  let ok = true;
  across(attrs, () => {
    ok = false;
  });
  return ok;
}

/**
 * A VramError listing every problem across attributes (`schema.across`), each at `[...path, key]`,
 * for attributes whose fields have passed: a builder runs it after checking its options.
 */
export function checkAcross(schema: AttrSchema, attrs: object, path: Path, code = 'bad-option'): void {
  if (schema.across === undefined) return;
  const issues: VramIssue[] = [];
  schema.across(attrs as Record<string, unknown>, (key, message, expected, received) => {
    issues.push({ path: [...path, key], code, message, expected, received: show(received) });
  });
  if (issues.length > 0) throw new VramError(issues);
}

/**
 * A frozen copy of attributes that passed their schema (plain data): arrays and objects are
 * copied, so a builder's layer never shares (nor freezes) the caller's arrays.
 */
export function frozenAttrs<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  const copy = Array.isArray(value) ? value.map(frozenAttrs) : Object.fromEntries(Object.entries(value).map(([key, v]) => [key, frozenAttrs(v)]));
  return Object.freeze(copy) as T;
}

/** An integer, or each of a pair, as [h, w] (for rules across `intOrPair` attributes). */
export function pairOf(value: unknown, fallback: number): readonly [number, number] {
  if (value === undefined) return [fallback, fallback];
  return typeof value === 'number' ? [value, value] : (value as readonly [number, number]);
}

/** A quiet test of one value, and the words for what it should have been. */
function quiet(ok: (value: unknown) => boolean, message: string, expected: string): Check {
  return (value, path, issues) => {
    if (!ok(value)) issues.push({ path, code: 'bad-attribute', message, expected, received: show(value) });
  };
}

const isInt = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value);
const isDim = (value: unknown): boolean => (typeof value === 'number' ? Number.isSafeInteger(value) && value >= 1 : isExpr(value));

/** An integer of any sign: a dimension index (negative counts from the end) or a slice bound. */
export const anyInt: Check = quiet(isInt, 'must be an integer', 'integer');

/** A size: a safe integer >= 1, or a symbolic expression. */
export const dimAttr: Check = quiet(isDim, 'must be a size (an integer >= 1 or an expression)', 'integer >= 1 | expression');

/** An offset or factor: a safe integer >= 0, or a symbolic expression. */
export const offsetAttr: Check = quiet(
  (value) => (typeof value === 'number' ? Number.isSafeInteger(value) && value >= 0 : isExpr(value)),
  'must be an integer >= 0 or an expression',
  'integer >= 0 | expression',
);

/** A list whose every element passes `ok` (no path is made unless one fails). */
function quietList(ok: (value: unknown) => boolean, what: string): Check {
  return (value, path, issues) => {
    if (!Array.isArray(value)) {
      issues.push({ path, code: 'bad-attribute', message: `must be a list of ${what}`, expected: `${what}[]`, received: show(value) });
      return;
    }
    for (let i = 0; i < value.length; i += 1) {
      if (!ok(value[i])) issues.push({ path: [...path, i], code: 'bad-attribute', message: `must be ${what}`, expected: what, received: show(value[i]) });
    }
  };
}

/** A shape: a list of sizes. */
export const shapeAttr: Check = quietList(isDim, 'sizes (integers >= 1 or expressions)');

/** A list of dimension indices. */
export const intListAttr: Check = quietList(isInt, 'integers');

/** The check of a rule that takes no attributes (`{}`): an object without keys. */
export const noAttrs = attrsGuard({ fields: {} });
