/**
 * The house's shape, measured by scripts/structure.ts: no import circles (at run time, nor with
 * type-only imports), no runtime import up a floor, every src file on a floor, and the budgets
 * (files of at most 600 lines, functions of at most 100).
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { allImports, fileLengths, floorOf, FLOORS, functionLengths, importCircles, runtimeImports, upwardImports } from '../scripts/structure.js';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('imports', () => {
  it('make no circle at run time', () => {
    expect(importCircles(runtimeImports(root))).toEqual([]);
  });

  it('make no circle with type-only imports counted too', () => {
    expect(importCircles(allImports(root))).toEqual([]);
  });

  it('put every src file on a floor', () => {
    expect([...runtimeImports(root).keys()].filter((file) => floorOf(file) === undefined)).toEqual([]);
  });

  it('never go up a floor at run time', () => {
    expect(upwardImports(runtimeImports(root))).toEqual([]);
  });

  it('are measured: a circle and an upward import are found where they are', () => {
    const graph = new Map([
      ['src/sym/a.ts', ['src/sym/b.ts']],
      ['src/sym/b.ts', ['src/sym/a.ts', 'src/estimate.ts']],
      ['src/estimate.ts', []],
    ]);
    expect(importCircles(graph)).toEqual([['src/sym/a.ts', 'src/sym/b.ts']]);
    expect(upwardImports(graph)).toEqual(['src/sym/b.ts -> src/estimate.ts (sym -> estimate)']);
    expect(FLOORS.map((f) => f.floor)).toEqual([
      'base',
      'sym',
      'tensor',
      'options',
      'ops',
      'nn',
      'catalog',
      'trace',
      'memory',
      'parallel',
      'estimate',
      'scenarios',
      'rollout',
      'trainers',
      'jobs',
      'config',
      'report',
      'index',
      'cli',
    ]);
  });
});

describe('budgets', () => {
  it('no src file is over 600 lines', () => {
    expect(fileLengths(root).filter((f) => f.lines > 600)).toEqual([]);
  });

  it('no function is over 100 lines', () => {
    expect(
      functionLengths(root)
        .filter((u) => u.lines > 100)
        .map((u) => `${u.file}:${u.line} ${u.name} (${u.lines})`),
    ).toEqual([]);
  });
});
