/**
 * Hostile arguments of runtimeLines and replayAllocator (issue 23): a VramError with the
 * argument's path, never a TypeError, NaN bytes or a replay of junk.
 */
import { describe, expect, it } from 'vitest';
import { formatSize, parseAllocConf, replayAllocator, roundSize, runtimeLines } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const issues = (f: () => unknown) => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);

describe('runtimeLines', () => {
  it('options that are no object, unknown keys, bad values and unknown families are VramErrors at their paths', () => {
    for (const bad of [undefined, null, 3, 'cublas', []])
      expect(
        issues(() => runtimeLines(bad as never, 'ampere')),
        String(bad),
      ).toEqual(['runtimeLines.options:bad-option']);
    expect(issues(() => runtimeLines({ contxt: true } as never, 'ampere'))).toEqual(['runtimeLines.options.contxt:unknown-option']);
    expect(errorOf(() => runtimeLines({ contxt: true } as never, 'ampere')).message).toMatch(/did you mean "context"/);
    expect(issues(() => runtimeLines({ context: -5 }, 'ampere'))).toEqual(['runtimeLines.options.context:bad-option']);
    expect(issues(() => runtimeLines({ cublas: Number.NaN }, 'ampere'))).toEqual(['runtimeLines.options.cublas:bad-option']);
    expect(issues(() => runtimeLines({ cudnnWorkspace: 1.5 }, 'ampere'))).toEqual(['runtimeLines.options.cudnnWorkspace:bad-option']);
    for (const bad of [undefined, 'pascal', 'toString', 3])
      expect(
        issues(() => runtimeLines({ context: true }, bad as never)),
        String(bad),
      ).toEqual(['runtimeLines.family:bad-option']);
  });

  it('workspaces past 2^53 bytes together are an overflow, not an inexact figure', () => {
    expect(issues(() => runtimeLines({ cublas: 2 ** 52, cublasHandles: 4 }, 'hopper'))).toEqual(['runtimeLines.options.cublas:overflow']);
    expect(runtimeLines({ cublas: 2 ** 20, cublasHandles: 0 }, 'hopper')[0]!.bytes).toBe(0);
  });
});

describe('replayAllocator', () => {
  it('a log that is no list of entries is a VramError at replayAllocator.log', () => {
    for (const bad of [undefined, null, 3, 'log', { length: 1 }])
      expect(
        issues(() => replayAllocator(bad as never)),
        String(bad),
      ).toEqual(['replayAllocator.log:bad-argument']);
    expect(issues(() => replayAllocator(new Array(50_000_001)))).toEqual(['replayAllocator.log:bad-argument']);
  });

  it('an entry that is no allocation [id, bytes] or free [-1 - id] is a VramError at its index', () => {
    const bad: unknown[] = [null, [], [0], [0, -1], [0, 1.5], [0, Number.NaN], [0, '8'], ['0', 8], [1.5, 8], [-1, 8], [0, 8, 9], [Number.POSITIVE_INFINITY, 8]];
    for (const entry of bad)
      expect(
        issues(() => replayAllocator([[5, 100], entry] as never)),
        JSON.stringify(entry),
      ).toEqual(['replayAllocator.log.1:bad-argument']);
    const holes: (readonly number[])[] = [[0, 100]];
    holes[2] = [-1];
    expect(issues(() => replayAllocator(holes))).toEqual(['replayAllocator.log.1:bad-argument']);
  });

  it('an id allocated again before its free is refused; after its free it is reused', () => {
    expect(
      issues(() =>
        replayAllocator([
          [0, 100],
          [0, 200],
        ]),
      ),
    ).toEqual(['replayAllocator.log.1:bad-argument']);
    expect(replayAllocator([[0, 100], [-1], [0, 200]]).maxAllocated).toBe(512);
  });

  it('reserved bytes past 2^53 are an overflow', () => {
    expect(
      issues(() =>
        replayAllocator([
          [0, 2 ** 52],
          [1, 2 ** 52],
          [2, 2 ** 52],
        ]),
      ),
    ).toEqual(['replayAllocator.log:overflow']);
  });

  it('roundSize and formatSize take byte counts; roundSize a checked conf', () => {
    for (const bad of [undefined, -1, 1.5, Number.NaN, 2 ** 60, '512', {}]) {
      expect(issues(() => roundSize(bad as never))).toEqual(['roundSize.size:bad-argument']);
      expect(issues(() => formatSize(bad as never))).toEqual(['formatSize.bytes:bad-argument']);
    }
    expect(issues(() => roundSize(Number.MAX_SAFE_INTEGER))).toEqual(['roundSize.size:overflow']);
    expect(issues(() => roundSize(1024, { maxSplitSize: 5 } as never))).toEqual(['roundSize.conf.maxSplitSize:bad-option']);
    expect(roundSize(1200 * 2 ** 20, parseAllocConf('roundup_power2_divisions:4'))).toBe(1280 * 2 ** 20);
    expect(formatSize(20 * 2 ** 20)).toBe('20.00 MiB');
  });
});
