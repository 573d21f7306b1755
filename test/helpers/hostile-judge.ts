/**
 * The rule of test/properties/hostile.test.ts for one call of an export: it throws a
 * VramError whose every issue has an array path and a code, or it returns a result that
 * meets the export's invariants, the same twice, within 2 s. Anything else is a failure,
 * described by a signature (kind, exception type, message with its numbers and quoted values
 * blanked, top src frame) so that many runs of one bug count as one.
 */
import { VramError, estimate } from '../../src/index.js';
import type { EstimateOptions, Layer } from '../../src/index.js';
import { InvariantError, type Spec, exactCount } from './hostile-specs.js';

export const TIME_BOX_MS = 2000;

export interface Failure {
  readonly signature: string;
  readonly kind: string;
  readonly error: string;
  readonly message: string;
  readonly frame: string;
}

type Outcome = { readonly ok: true; readonly value: unknown; readonly ms: number } | { readonly ok: false; readonly error: unknown; readonly ms: number };

/** The first frame of the stack inside src/, as `src/file.ts:line`. */
export function srcFrame(error: unknown): string {
  const stack = error instanceof Error && typeof error.stack === 'string' ? error.stack : '';
  for (const line of stack.split('\n').slice(1)) {
    const m = /(src\/[^\s:()]+):(\d+)/.exec(line);
    if (m !== null) return `${m[1]}:${m[2]}`;
  }
  return '(no src frame)';
}

const normalize = (message: string): string =>
  (message.split('\n')[0] ?? '')
    .replace(/"[^"]*"|'[^']*'|`[^`]*`/g, '…')
    .replace(/-?\d+(\.\d+)?(e[+-]?\d+)?/gi, 'N')
    .slice(0, 120);

function failure(kind: string, error: unknown, message?: string): Failure {
  const name = error instanceof Error ? error.constructor.name : typeof error;
  let text: string;
  try {
    text = message ?? (error instanceof Error ? error.message : String(error));
  } catch {
    text = '(unprintable)';
  }
  const frame = kind === 'invariant' || kind === 'slow' || kind === 'nondeterministic' ? kind : srcFrame(error);
  return { signature: `${kind} | ${name} | ${normalize(text)} | ${frame}`, kind, error: name, message: text.slice(0, 400), frame };
}

/** Undefined for a well-formed VramError; a failure for a malformed one or any other exception. */
export function judgeError(error: unknown, where: string): Failure | undefined {
  if (error instanceof InvariantError) return failure('invariant', error, `${where}: ${error.message}`);
  if (error instanceof VramError) {
    const issues = (error as { issues?: unknown }).issues;
    const good =
      Array.isArray(issues) &&
      issues.length > 0 &&
      issues.every(
        (i) =>
          typeof i === 'object' &&
          i !== null &&
          Array.isArray(i.path) &&
          i.path.every((p: unknown) => typeof p === 'string' || typeof p === 'number') &&
          typeof i.code === 'string' &&
          i.code !== '' &&
          typeof i.message === 'string',
      );
    return good ? undefined : failure('malformed-vram-error', error, `${where}: issues ${safeJson(issues)}`);
  }
  return failure(`${where}-threw`, error);
}

function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v)?.slice(0, 200) ?? String(v);
  } catch {
    return '(unserialisable)';
  }
}

/** The issues of a VramError as `path:code` lines (what determinism compares). */
function issueKey(error: unknown): string {
  if (!(error instanceof VramError)) return `not a VramError: ${error instanceof Error ? error.constructor.name : typeof error}`;
  return error.issues.map((i) => `${i.path.join('.')}:${i.code}`).join(' ');
}

/** Structural equality: functions equal functions, NaN equals NaN; at most `budget` nodes compared. */
export function same(a: unknown, b: unknown, budget = { n: 100_000 }, seen = new Map<object, object>()): boolean {
  if (budget.n-- <= 0) return true;
  if (Object.is(a, b)) return true;
  if (typeof a === 'function' && typeof b === 'function') return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (seen.get(a) === b) return true;
  seen.set(a, b);
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (a instanceof Map || a instanceof Set) return same([...(a as Map<unknown, unknown>)], [...(b as Map<unknown, unknown>)], budget, seen);
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (const k of ka) {
    if (!Object.hasOwn(b, k)) return false;
    if (!same((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], budget, seen)) return false;
  }
  return true;
}

/** The path to a NaN inside `value` (undefined when none), at most `budget` nodes visited. */
function findNaN(value: unknown, path = '', budget = { n: 20_000 }, seen = new Set<object>()): string | undefined {
  if (budget.n-- <= 0) return undefined;
  if (typeof value === 'number') return Number.isNaN(value) ? path || '(result)' : undefined;
  if (typeof value !== 'object' || value === null || seen.has(value)) return undefined;
  seen.add(value);
  for (const key of Object.keys(value)) {
    const found = findNaN((value as Record<string, unknown>)[key], `${path}.${key}`, budget, seen);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** The path to the first part of a layer that is not frozen plain data (op rules and callbacks skipped). */
function unfrozen(value: unknown, path = '', seen = new Set<object>()): string | undefined {
  if (typeof value !== 'object' || value === null || seen.has(value)) return undefined;
  seen.add(value);
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== Array.prototype && proto !== null)
    return `${path || '(layer)'} is a ${proto?.constructor?.name ?? '?'}, not plain data`;
  if (!Object.isFrozen(value)) return `${path || '(layer)'} is not frozen`;
  for (const key of Object.keys(value)) {
    if (key === 'rule') continue;
    const found = unfrozen((value as Record<string, unknown>)[key], `${path}.${key}`, seen);
    if (found !== undefined) return found;
  }
  return undefined;
}

function time(f: () => unknown): Outcome {
  const start = performance.now();
  try {
    const value = f();
    return { ok: true, value, ms: performance.now() - start };
  } catch (error) {
    return { ok: false, error, ms: performance.now() - start };
  }
}

const TIMEOUT = Symbol('timeout');

async function timeAsync(f: () => unknown): Promise<Outcome> {
  const start = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const value = await Promise.race([
      Promise.resolve().then(f),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve(TIMEOUT), TIME_BOX_MS);
      }),
    ]);
    return { ok: true, value, ms: value === TIMEOUT ? Number.POSITIVE_INFINITY : performance.now() - start };
  } catch (error) {
    return { ok: false, error, ms: performance.now() - start };
  } finally {
    clearTimeout(timer);
  }
}

function invoke(fn: (...a: unknown[]) => unknown, spec: Spec, args: readonly unknown[]): unknown {
  return spec.construct === true ? new (fn as unknown as new (...a: unknown[]) => unknown)(...args) : fn(...args);
}

/** The checks on a returned value: the export's invariants, no NaN, and for a layer, frozen plain data that estimates. */
function judgeResult(spec: Spec, value: unknown, args: readonly unknown[]): Failure | undefined {
  // A layer holds what it was given; estimating it (below) judges its numbers.
  const nan = spec.layer === undefined ? findNaN(value) : undefined;
  if (nan !== undefined) return failure('invariant', new InvariantError(''), `result holds NaN at ${nan}`);
  if (spec.check !== undefined) {
    const checked = time(() => spec.check!(value, args));
    if (!checked.ok) return judgeError(checked.error, 'check');
  }
  if (spec.layer !== undefined) {
    for (const options of spec.layer) {
      const e = time(() => estimate(value as Layer, options as EstimateOptions & { input: number[] }));
      if (e.ms > TIME_BOX_MS) return failure('slow', new Error(''), `estimate of the built layer took ${Math.round(e.ms)} ms`);
      if (!e.ok) {
        const f = judgeError(e.error, 'estimate');
        if (f !== undefined) return f;
        continue;
      }
      const r = e.value as { params: { total: unknown; trainable: unknown }; bytes: Record<string, unknown> };
      const checked = time(() => {
        exactCount(r.params.total, 'params.total');
        exactCount(r.params.trainable, 'params.trainable');
        for (const [key, b] of Object.entries(r.bytes)) exactCount(b, `bytes.${key}`);
      });
      if (!checked.ok) return judgeError(checked.error, 'estimate-check');
    }
    // Last, so that a crash or a wrong number is what a case reports first.
    const bad = unfrozen(value);
    if (bad !== undefined) return failure('invariant', new InvariantError(''), `built layer: ${bad}`);
  }
  return undefined;
}

function compare(first: Outcome, second: Outcome): Failure | undefined {
  if (first.ok !== second.ok)
    return failure('nondeterministic', new Error(''), `first call ${first.ok ? 'returned' : 'threw'}, second ${second.ok ? 'returned' : 'threw'}`);
  if (!first.ok && !second.ok) {
    const a = issueKey(first.error);
    const b = issueKey(second.error);
    return a === b ? undefined : failure('nondeterministic', new Error(''), `issues differ: ${a} vs ${b}`);
  }
  if (first.ok && second.ok && !same(first.value, second.value)) return failure('nondeterministic', new Error(''), 'two calls gave different results');
  return undefined;
}

/** One synchronous call judged (called twice for determinism). */
export function judgeSync(fn: (...a: unknown[]) => unknown, spec: Spec, args: readonly unknown[]): Failure | undefined {
  const first = time(() => invoke(fn, spec, args));
  if (first.ms > TIME_BOX_MS) return failure('slow', new Error(''), `call took ${Math.round(first.ms)} ms`);
  if (!first.ok) {
    const f = judgeError(first.error, 'call');
    if (f !== undefined) return f;
  }
  const second = time(() => invoke(fn, spec, args));
  const diff = compare(first, second);
  if (diff !== undefined) return diff;
  return first.ok ? judgeResult(spec, first.value, args) : undefined;
}

/** One asynchronous call judged: raced with the time box, called twice for determinism. */
export async function judgeAsync(fn: (...a: unknown[]) => unknown, spec: Spec, args: readonly unknown[]): Promise<Failure | undefined> {
  const first = await timeAsync(() => invoke(fn, spec, args));
  if (first.ms > TIME_BOX_MS) return failure('slow', new Error(''), `no answer within ${TIME_BOX_MS} ms`);
  if (!first.ok) {
    const f = judgeError(first.error, 'call');
    if (f !== undefined) return f;
  }
  const second = await timeAsync(() => invoke(fn, spec, args));
  const diff = compare(first, second);
  if (diff !== undefined) return diff;
  return first.ok ? judgeResult(spec, first.value, args) : undefined;
}
