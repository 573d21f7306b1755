/** fromHub's own arguments, and a user's fetch answering something that is no Response: VramErrors with paths. */
import { describe, expect, it } from 'vitest';
import { VramError, fromHub, safetensorsSummary } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

async function rejection(p: Promise<unknown>): Promise<VramError> {
  try {
    await p;
  } catch (error) {
    if (error instanceof VramError) return error;
    throw error;
  }
  throw new Error('no error');
}

describe('fromHub arguments', () => {
  it('options must be an object', async () => {
    for (const options of [null, 5, 'x', []])
      expect((await rejection(fromHub('org/name', options as never))).issues[0]).toMatchObject({ path: ['options'], code: 'bad-option' });
  });

  it('a repo id that is a BigInt or a symbol is an error, not a TypeError while writing it', async () => {
    expect((await rejection(fromHub(1n as never))).issues[0]).toMatchObject({ path: ['repo'], received: '1n' });
    expect((await rejection(fromHub(Symbol('r') as never))).issues[0]).toMatchObject({ path: ['repo'], received: 'a symbol' });
  });

  it("a fetch answering null, a plain object or a body that is no stream is refused as the file's error", async () => {
    for (const answer of [null, {}, { ok: true, status: 200 }, { ok: true, status: 200, headers: new Headers(), body: 5 }]) {
      const error = await rejection(fromHub('org/name', { fetch: async () => answer as never, timeout: 2000 }));
      expect(error.issues[0]).toMatchObject({ path: ['config.json'], code: 'hub-http' });
    }
  });
});

describe('safetensorsSummary check argument', () => {
  const header = { w: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } };
  it('is an object of dataBytes and text', () => {
    expect(errorOf(() => safetensorsSummary(header, null as never)).issues[0]).toMatchObject({ path: ['check'] });
    expect(errorOf(() => safetensorsSummary(header, { dataBytes: -1 })).issues[0]).toMatchObject({ path: ['check', 'dataBytes'] });
    expect(errorOf(() => safetensorsSummary(header, { text: 5 as never })).issues[0]).toMatchObject({ path: ['check', 'text'] });
    expect(errorOf(() => safetensorsSummary(header, { bytes: 8 } as never)).issues[0]).toMatchObject({ path: ['check', 'bytes'], code: 'unknown-option' });
    expect(safetensorsSummary(header, { dataBytes: 8 }).params).toBe(2);
  });
  it('a dtype or offsets that are BigInts or symbols are errors, not TypeErrors', () => {
    expect(errorOf(() => safetensorsSummary({ w: { dtype: 1n, shape: [2], data_offsets: [0, 8] } })).issues[0]).toMatchObject({
      path: ['header', 'w'],
      code: 'bad-safetensors',
    });
    expect(errorOf(() => safetensorsSummary({ w: { dtype: 'F32', shape: [2], data_offsets: [Symbol('x'), 8] } })).issues[0]!.path[0]).toBe('header');
  });
});
