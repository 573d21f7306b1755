/**
 * Hostile values for the property suite of test/properties/hostile.test.ts: fully random
 * values (fast-check's `anything` and a list of values that break naive code), and
 * near-valid values: a valid argument list with one field, deep inside it, replaced by a
 * hostile value, deleted, or joined by an unknown or misspelt key.
 */
import fc from 'fast-check';

/** Values that break code which trusts its input: each made fresh, so no call can change another's. */
const HOSTILE: readonly (() => unknown)[] = [
  () => null,
  () => undefined,
  () => Number.NaN,
  () => Number.POSITIVE_INFINITY,
  () => Number.NEGATIVE_INFINITY,
  () => -1,
  () => 0,
  () => -0,
  () => 1.5,
  () => 2 ** 60,
  () => Number.MAX_SAFE_INTEGER,
  () => 1e308,
  () => '',
  () => '2',
  () => 'bogus',
  () => 'NaN',
  () => true,
  () => false,
  () => 'false',
  () => ({}),
  () => [],
  () => [null],
  () => [[]],
  () => [1, 2, 3],
  () => [-1],
  () => ['a'],
  () => ({ a: { b: { c: { d: {} } } } }),
  () => JSON.parse('{"__proto__": {"polluted": 1}}') as unknown,
  () => ({ constructor: 1 }),
  () => ({ toString: 1, valueOf: 'x' }),
  () => Object.create(null) as unknown,
  () => () => undefined,
  () => () => 1,
  () => Symbol('hostile'),
  () => 1n,
  () => new Date(Number.NaN),
  () => /x/,
  () => new Map([['a', 1]]),
  () => new Uint8Array(2),
  () => 'constructor',
  () => 'toString',
  () => '__proto__',
  () => 'hasOwnProperty',
  () => ({ length: -1 }),
  () => ({ kind: 'op' }),
  () => ({ kind: 'seq', children: null }),
];

export const hostileConstant: fc.Arbitrary<unknown> = fc.integer({ min: 0, max: HOSTILE.length - 1 }).map((i) => HOSTILE[i]!());

const specialKey = fc.constantFrom('__proto__', 'constructor', 'toString', 'name', 'kind', 'size', 'out', 'input', 'length', '0');

/** fast-check's any value: boxed values, maps, sets, typed arrays, sparse arrays, null prototypes and odd keys included. */
export const anyValue: fc.Arbitrary<unknown> = fc.anything({
  maxDepth: 2,
  maxKeys: 4,
  depthSize: 'small',
  key: fc.oneof(fc.string({ maxLength: 4 }), specialKey),
  withBigInt: true,
  withBoxedValues: true,
  withDate: true,
  withMap: true,
  withSet: true,
  withNullPrototype: true,
  withObjectString: true,
  withSparseArray: true,
  withTypedArray: true,
});

/** One hostile value: a listed one, a random one, or a number or string of any kind. */
export const junk: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: hostileConstant },
  { weight: 3, arbitrary: anyValue },
  { weight: 1, arbitrary: fc.integer({ min: -3, max: 70 }) },
  { weight: 1, arbitrary: fc.double() },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
);

/** A list of up to `n` hostile values: fully random arguments. */
export const junkArgs = (n: number): fc.Arbitrary<unknown[]> => fc.array(junk, { maxLength: n });

interface Edit {
  readonly kind: 'set' | 'delete' | 'add';
  /** Child choices from the root: the edit lands where they run out or reach a leaf. */
  readonly picks: readonly number[];
  readonly value: unknown;
  readonly key: { readonly typo: boolean; readonly special: string; readonly n: number };
}

const edit: fc.Arbitrary<Edit> = fc.record({
  kind: fc.constantFrom('set', 'set', 'set', 'delete', 'add'),
  picks: fc.array(fc.nat({ max: 1000 }), { minLength: 1, maxLength: 5 }),
  value: junk,
  key: fc.record({ typo: fc.boolean(), special: specialKey, n: fc.nat({ max: 1000 }) }),
});

function isContainer(value: unknown): value is Record<string, unknown> | unknown[] {
  if (Array.isArray(value)) return true;
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A misspelling of one of `keys`: a letter doubled, dropped or swapped, or a case changed. */
function typoOf(keys: readonly string[], n: number): string {
  const key = keys[n % keys.length] ?? 'name';
  const i = Math.floor(n / 7) % Math.max(1, key.length);
  switch (n % 4) {
    case 0:
      return key.slice(0, i + 1) + key.slice(i);
    case 1:
      return key.length > 1 ? key.slice(0, i) + key.slice(i + 1) : `${key}s`;
    case 2:
      return key.length > 1 && i + 1 < key.length ? key.slice(0, i) + key[i + 1] + key[i] + key.slice(i + 2) : `${key}_`;
    default:
      return key.toUpperCase() === key ? key.toLowerCase() : key.toUpperCase();
  }
}

function copyOf(value: Record<string, unknown> | unknown[]): Record<string, unknown> | unknown[] {
  if (Array.isArray(value)) return value.slice();
  const copy = Object.create(Object.getPrototypeOf(value)) as Record<string, unknown>;
  for (const key of Object.keys(value)) Object.defineProperty(copy, key, { value: value[key], enumerable: true, writable: true, configurable: true });
  return copy;
}

function setOwn(target: Record<string, unknown> | unknown[], key: string | number, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** `value` with one edit applied, copying only the containers on the edit's path (the rest is shared and never written). */
export function applyEdit(value: unknown, e: Edit, depth = 0): unknown {
  if (!isContainer(value)) return e.kind === 'delete' ? undefined : e.value;
  const keys = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
  const pick = e.picks[depth];
  const copy = copyOf(value);
  if (pick !== undefined && keys.length > 0 && depth + 1 < e.picks.length) {
    const key = keys[pick % keys.length]!;
    const child = (value as Record<string | number, unknown>)[key];
    if (isContainer(child)) {
      setOwn(copy, key, applyEdit(child, e, depth + 1));
      return copy;
    }
  }
  // The edit lands here.
  const at = keys.length > 0 ? keys[(pick ?? 0) % keys.length]! : undefined;
  if (e.kind === 'set' && at !== undefined) setOwn(copy, at, e.value);
  else if (e.kind === 'delete' && at !== undefined) {
    if (Array.isArray(copy)) copy.splice(at as number, 1);
    else delete copy[at as string];
  } else if (Array.isArray(copy)) copy.push(e.value);
  else {
    const named = keys.filter((k): k is string => typeof k === 'string');
    setOwn(copy, e.key.typo && named.length > 0 ? typoOf(named, e.key.n) : e.key.special, e.value);
  }
  return copy;
}

/** One of `bases` (argument lists) with one or two edits applied anywhere inside. */
export function nearValid(bases: readonly (readonly unknown[])[]): fc.Arbitrary<unknown[]> {
  return fc
    .record({ base: fc.nat({ max: 10_000 }), edits: fc.array(edit, { minLength: 1, maxLength: 2 }) })
    .map(({ base, edits }) => edits.reduce<unknown>((v, e) => applyEdit(v, e), bases[base % bases.length]!) as unknown[]);
}
