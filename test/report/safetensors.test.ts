/**
 * safetensorsSummary validates a header as the safetensors library does (safetensors/src/tensor.rs:
 * `Metadata::validate` after sorting by offsets, `read_metadata`'s buffer check, `__metadata__` a
 * map of strings): every refusal a VramError with the entry's path.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { safetensorsSummary } from '../../src/index.js';
import { duplicateKeyPath } from '../../src/report/safetensors.js';
import { cli, scratch } from '../helpers/cli.js';
import { errorOf } from '../helpers/errors.js';

type Entry = { dtype: string; shape: number[]; data_offsets: [number, number] };

/** A valid header: F32 tensors of the given element counts, tiled from 0 in order. */
function tiled(counts: readonly number[]): Record<string, Entry> {
  const header: Record<string, Entry> = {};
  let at = 0;
  counts.forEach((n, i) => {
    header[`t${i}`] = { dtype: 'F32', shape: [n], data_offsets: [at, at + 4 * n] };
    at += 4 * n;
  });
  return header;
}

const counts = fc.array(fc.integer({ min: 1, max: 64 }), { minLength: 2, maxLength: 8 });

describe('safetensorsSummary: the library’s header checks', () => {
  it('a tiled header in any key order is read; its data ends where the file does', () => {
    fc.assert(
      fc.property(counts, fc.integer(), (ns, seed) => {
        const entries = Object.entries(tiled(ns));
        const shuffled = Object.fromEntries(
          [...entries].sort((a, b) => ((a[0].length * 31 + seed) % 7) - ((b[0].length * 31 + seed) % 7) || a[0].localeCompare(b[0])),
        );
        const total = ns.reduce((a, b) => a + b, 0);
        expect(safetensorsSummary(shuffled, { dataBytes: 4 * total }).params).toBe(total);
      }),
    );
  });

  it('a gap or an overlap between tensors is refused, naming the tensor', () => {
    fc.assert(
      fc.property(counts, fc.integer({ min: 1, max: 3 }), fc.boolean(), (ns, shift, gap) => {
        const header = tiled(ns);
        const last = header[`t${ns.length - 1}`]!;
        // An overlap keeps the last tensor starting after the one before it (an equal start would name that one).
        const before = ns.length >= 2 ? 4 * ns[ns.length - 2]! - 4 : 0;
        const d = gap ? shift * 4 : -Math.min(shift * 4, before);
        if (d === 0) return;
        last.data_offsets = [last.data_offsets[0] + d, last.data_offsets[1] + d];
        const error = errorOf(() => safetensorsSummary(header));
        expect(error.issues[0]?.path).toEqual(['header', `t${ns.length - 1}`, 'data_offsets']);
        expect(error.issues[0]?.message).toMatch(gap ? /gap/ : /overlap/);
      }),
    );
  });

  it('data past the last tensor, or a file ending inside it, is refused', () => {
    const header = tiled([4, 4]);
    expect(errorOf(() => safetensorsSummary(header, { dataBytes: 33 })).issues[0]?.message).toMatch(/data past its last tensor/);
    expect(errorOf(() => safetensorsSummary(header, { dataBytes: 31 })).issues[0]?.path).toEqual(['header', 't1', 'data_offsets']);
  });

  it('a tensor that is not whole bytes (F4 × 3) is refused', () => {
    const error = errorOf(() => safetensorsSummary({ w: { dtype: 'F4', shape: [3], data_offsets: [0, 2] } }));
    expect(error.issues[0]?.path).toEqual(['header', 'w', 'shape']);
  });

  it('__metadata__ must be an object of strings', () => {
    expect(errorOf(() => safetensorsSummary({ __metadata__: 'pt' })).issues[0]?.path).toEqual(['header', '__metadata__']);
    expect(errorOf(() => safetensorsSummary({ __metadata__: [] })).issues[0]?.path).toEqual(['header', '__metadata__']);
    expect(errorOf(() => safetensorsSummary({ __metadata__: { format: 1 } })).issues[0]?.path).toEqual(['header', '__metadata__', 'format']);
    expect(safetensorsSummary({ __metadata__: { format: 'pt' } }).tensors).toBe(0);
  });
});

describe('a tensor named twice: JSON.parse keeps the last, the header is refused', () => {
  const w = '{"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}';
  const v = '{"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}';

  it('safetensorsSummary with the text names the tensor', () => {
    const hidden = '{"dtype": "BF16", "shape": [1000], "data_offsets": [0, 2000]}';
    const text = `{"w": ${hidden}, "v": ${v}, "w": ${w}}`;
    // Without the text the parsed object looks fine: the first w is gone.
    expect(safetensorsSummary(JSON.parse(text), { dataBytes: 32 }).tensors).toBe(2);
    const error = errorOf(() => safetensorsSummary(JSON.parse(text), { text, dataBytes: 32 }));
    expect(error.issues[0]).toMatchObject({ code: 'bad-safetensors', path: ['header', 'w'] });
    expect(error.issues[0]?.message).toMatch(/names the tensor "w" twice/);
    expect(safetensorsSummary(JSON.parse(`{"w": ${w}, "v": ${v}}`), { text: `{"w": ${w}, "v": ${v}}`, dataBytes: 32 }).tensors).toBe(2);
  });

  it('keys compare unescaped; a key inside a string value is no key; a field twice in one entry is named too', () => {
    expect(duplicateKeyPath(`{"w": ${w}, "\\u0077": ${v}}`)).toEqual(['w']);
    expect(duplicateKeyPath(`{"__metadata__": {"note": "{\\"w\\": 1, \\"w\\": 2}"}, "w": ${w}}`)).toBeUndefined();
    expect(duplicateKeyPath('{"a\\\\": 1, "a\\"": 2, "a": 3}')).toBeUndefined();
    expect(duplicateKeyPath('{"w": {"dtype": "F32", "dtype": "BF16"}}')).toEqual(['w', 'dtype']);
    expect(duplicateKeyPath('{"w": {"shape": [1, {"k": 1, "k": 2}]}}')).toEqual(['w', 'shape', 1, 'k']);
    // The same key in two different objects is no duplicate.
    expect(duplicateKeyPath('{"a": {"k": 1}, "b": {"k": 1}, "c": [{"k": 1}, {"k": 2}]}')).toBeUndefined();
    const error = errorOf(() => safetensorsSummary({ w: { dtype: 'BF16' } }, { text: '{"w": {"dtype": "F32", "dtype": "BF16"}}' }));
    expect(error.issues[0]?.path).toEqual(['header', 'w', 'dtype']);
  });

  it('agrees with a reference over random objects with repeated keys', () => {
    const key = fc.constantFrom('a', 'b', 'w', 'a"b', 'é', '\\', '{', ',');
    fc.assert(
      fc.property(fc.array(fc.tuple(key, fc.oneof(fc.integer(), fc.string(), fc.array(key))), { maxLength: 6 }), (pairs) => {
        const text = `{${pairs.map(([k, value]) => `${JSON.stringify(k)}: ${JSON.stringify(value)}`).join(', ')}}`;
        const seen = new Set<string>();
        const first = pairs.find(([k]) => seen.has(k) || !seen.add(k));
        expect(duplicateKeyPath(text)).toEqual(first === undefined ? undefined : [first[0]]);
      }),
    );
  });

  it('deep nesting and long headers: linear, no recursion', () => {
    const depth = 100_000;
    expect(duplicateKeyPath(`${'['.repeat(depth)}${']'.repeat(depth)}`)).toBeUndefined();
    expect(duplicateKeyPath(`${'{"a":'.repeat(depth)}{"k": 1, "k": 2}${'}'.repeat(depth)}`)?.length).toBe(depth + 1);
    const many = Object.fromEntries(Array.from({ length: 200_000 }, (_, i) => [`t${i}`, { dtype: 'F32', shape: [1], data_offsets: [4 * i, 4 * i + 4] }]));
    const text = JSON.stringify(many);
    const start = performance.now();
    expect(duplicateKeyPath(`${text.slice(0, -1)}, "t7": {}}`)).toEqual(['t7']);
    expect(performance.now() - start).toBeLessThan(2000);
  });

  it('vram-ts --safetensors refuses a tensor named twice, naming it', () => {
    const { file } = scratch('safetensors-duplicates');
    const text = new TextEncoder().encode(`{"w": ${w}, "w": ${w}}`);
    const bytes = new Uint8Array(8 + text.length + 16);
    new DataView(bytes.buffer).setBigUint64(0, BigInt(text.length), true);
    bytes.set(text, 8);
    const r = cli('--safetensors', file('twice.safetensors', bytes));
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toMatch(/^vram-ts: .*twice\.safetensors: header\.w: the header names the tensor "w" twice/);
  });
});
