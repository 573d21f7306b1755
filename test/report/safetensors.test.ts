/**
 * safetensorsSummary validates a header as the safetensors library does (safetensors/src/tensor.rs:
 * `Metadata::validate` after sorting by offsets, `read_metadata`'s buffer check, `__metadata__` a
 * map of strings): every refusal a VramError with the entry's path.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { safetensorsSummary } from '../../src/index.js';
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
        const d = gap ? shift * 4 : -Math.min(shift * 4, last.data_offsets[0]);
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
