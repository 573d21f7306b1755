/** Hostile arguments of gpu and memoryBudget (issue 23): a VramError at gpu, never a TypeError from printing the value. */
import { describe, expect, it } from 'vitest';
import { gpu, memoryBudget } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const issues = (f: () => unknown) => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);

/** Values whose String() throws. */
const UNPRINTABLE: readonly unknown[] = [{ toString: 1, valueOf: 'x' }, Object.create(null), Symbol('gpu')];

describe('gpu and memoryBudget', () => {
  it('a value no String() prints is a VramError at gpu', () => {
    for (const bad of UNPRINTABLE) {
      expect(issues(() => gpu(bad as never))).toEqual(['gpu:unknown-gpu']);
      expect(issues(() => memoryBudget(bad as never))).toEqual(['gpu:bad-option']);
    }
  });

  it('an unknown name says the closest one, and a long one is cut in the error', () => {
    expect(errorOf(() => gpu('a100-80gv')).message).toMatch(/did you mean "A100-80GB"\?/);
    expect(errorOf(() => gpu('h10')).message).toMatch(/did you mean "H100-80GB"\?/);
    expect(errorOf(() => memoryBudget('x'.repeat(100_000))).issues[0]!.received!.length).toBeLessThan(100);
    expect(memoryBudget(' 24 GiB ')).toBe(24 * 2 ** 30);
  });
});
