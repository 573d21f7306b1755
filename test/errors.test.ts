/** The error class never throws while being made: junk given to it becomes one issue saying so. */
import { describe, expect, it } from 'vitest';
import { VramError } from '../src/index.js';
import { show, showJson } from '../src/validate.js';

describe('VramError', () => {
  it('keeps well-formed issues as given', () => {
    const issues = [{ path: ['a', 0], code: 'c', message: 'm', expected: 'e', received: 'r' }];
    const error = new VramError(issues);
    expect(error.issues).toBe(issues);
    expect(error.message).toBe('a.0: m (expected e, received r)');
  });

  it('turns junk issues into one bad-issues issue instead of a TypeError', () => {
    for (const junk of [
      undefined,
      null,
      0,
      'x',
      [],
      [null],
      [{ path: 'a', code: 'c', message: 'm' }],
      [{ path: [{}], code: 'c', message: 'm' }],
      [new Uint8Array(2)],
    ]) {
      const error = new VramError(junk as never);
      expect(error).toBeInstanceOf(VramError);
      expect(error.issues).toEqual([expect.objectContaining({ path: [], code: 'bad-issues' })]);
    }
  });
});

describe('how values are shown in issues', () => {
  it('never throws on BigInts, symbols, cycles or null-prototype objects', () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    expect(showJson(1n)).toBe('1n');
    expect(showJson(Symbol('s'))).toBe('a symbol');
    expect(showJson(cycle)).toBe('an object');
    expect(showJson(Object.create(null))).toBe('{}');
    expect(showJson([1, 2])).toBe('[1,2]');
    expect(showJson('x'.repeat(500))).toHaveLength(201);
    expect(show(Symbol('s'))).toBe('a symbol');
  });
});
