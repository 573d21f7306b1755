/**
 * Kernel steps the engine replays: `releaseInput` (an input let go mid-kernel when the op is its last
 * use: a Python name rebound mid-function) and `aliasInput` (an in-place op writing into an input
 * other than the first: an expert loop's `index_add_` into the running sum).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, graph } from '../../src/index.js';
import { mulScalarOp } from '../../src/internals.js';
import type { KernelStep, OpRule } from '../../src/ops/types.js';
import { tensor } from '../../src/tensor/spec.js';

/** x [n] float32 → y [n], with temporaries of t1 and t2 elements around an optional early release of x. */
const stepsOp = (release: boolean): OpRule<{ t1: number; t2: number }> => ({
  name: 'test_steps',
  arity: 1,
  apply([x], { t1, t2 }) {
    const steps: KernelStep[] = [
      { alloc: 't1', bytes: 4 * t1 },
      ...(release ? [{ releaseInput: 0 } as const] : []),
      { alloc: 't2', bytes: 4 * t2 },
      { results: 'outputs' },
      { free: 't1' },
      { free: 't2' },
    ];
    return { outputs: [tensor(x!.shape, 'float32')], saves: () => [], forwardStepsUnrecorded: steps };
  },
});

const peak = (n: number, t1: number, t2: number, release: boolean, usedAfter = false) =>
  estimate(
    graph((g, [x]) => {
      const m = g.call(mulScalarOp, [x!], {})[0]!;
      const y = g.call(stepsOp(release), [m], { t1, t2 })[0]!;
      // A later op reading m keeps it past the kernel.
      return usedAfter ? g.call(mulScalarOp, [m], {})[0]! : y;
    }),
    { input: [n], mode: 'inference', device: 'cpu' },
  ).bytes.peak as number;

describe('releaseInput', () => {
  it('lets an input whose last use is this op go at that step: the peak drops by its bytes', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4096 }), fc.integer({ min: 1, max: 4096 }), fc.integer({ min: 0, max: 4096 }), (n, t1, t2) => {
        expect(peak(n, t1, t2, false) - peak(n, t1, t2, true)).toBe(4 * n);
      }),
    );
  });
  it('keeps an input a later op still reads', () => {
    expect(peak(256, 64, 64, true, true)).toBe(peak(256, 64, 64, false, true));
  });
});

describe('aliasInput', () => {
  /** (a, b) → a + b written into b in place when `inplace`, else a new tensor. */
  const addInto = (inplace: boolean): OpRule<Record<string, never>> => ({
    name: 'test_add_into',
    arity: 2,
    apply([a]) {
      return { outputs: [tensor(a!.shape, 'float32')], saves: () => [], ...(inplace ? { alias: 'inplace' as const, aliasInput: 1 } : {}) };
    },
  });
  const run = (inplace: boolean) =>
    estimate(
      graph((g, [x]) => {
        const a = g.call(mulScalarOp, [x!], {})[0]!;
        const b = g.call(mulScalarOp, [x!], {})[0]!;
        return g.call(addInto(inplace), [a, b], {})[0]!;
      }),
      { input: [1000], mode: 'inference', device: 'cpu' },
    ).bytes.peak as number;
  it("writes output 0 into the named input's storage: no new tensor", () => {
    expect(run(false) - run(true)).toBe(4000);
  });
});
