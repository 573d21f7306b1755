/**
 * Hostile inputs everywhere (issue 23): each example the issue lists, one test apiece. Each
 * call must throw a VramError (never a TypeError, never a silently built layer) with an issue
 * at the expected path: the builder's name, then the option.
 */
import { describe, expect, it } from 'vitest';
import {
  VramError,
  attention,
  branch,
  conv2d,
  dropout,
  estimate,
  gatedMlp,
  graph,
  identity,
  linear,
  maxPool2d,
  relu,
  repeat,
  residual,
  rmsNorm,
  seq,
  upsample,
  type GraphBuilder,
  type Layer,
  type TensorRef,
} from '../../src/index.js';
import { activationOp } from '../../src/internals.js';

/** The VramError `f` throws; fails on any other throw, or none. Every issue has an array path and a code. */
function vramError(f: () => unknown): VramError {
  let thrown: unknown;
  let returned: unknown;
  try {
    returned = f();
  } catch (error) {
    thrown = error;
  }
  if (thrown === undefined)
    expect.fail(`no error; returned ${JSON.stringify(returned, (_, v) => (typeof v === 'function' ? '[function]' : v))?.slice(0, 300)}`);
  if (!(thrown instanceof VramError))
    expect.fail(`not a VramError: ${thrown instanceof Error ? `${thrown.constructor.name}: ${thrown.message}` : String(thrown)}`);
  expect(thrown.issues.length).toBeGreaterThan(0);
  for (const issue of thrown.issues) {
    expect(Array.isArray(issue.path)).toBe(true);
    expect(typeof issue.code).toBe('string');
  }
  return thrown;
}

/** The paths of the issues `f`'s VramError holds, and a check that one starts with `prefix`. */
function expectIssueAt(f: () => unknown, prefix: readonly (string | number)[]): void {
  const paths = vramError(f).issues.map((i) => [...i.path]);
  expect(
    paths.some((p) => prefix.every((part, i) => p[i] === part)),
    `no issue at ${prefix.join('.')}; paths: ${paths.map((p) => p.join('.')).join(', ')}`,
  ).toBe(true);
}

const estimateOn = (layer: Layer, input: readonly number[]) => estimate(layer, { input, loss: 'none' });
const graphOn = (build: (g: GraphBuilder, inputs: readonly TensorRef[]) => unknown) => estimateOn(graph(build as never), [1, 8]);

describe('the examples of issue 23: a VramError with a path, never a TypeError or a silent layer', () => {
  it('seq(null)', () => expectIssueAt(() => seq(null as never), ['seq']));
  it('residual(null)', () => expectIssueAt(() => residual(null as never), ['residual']));
  it("repeat(3, 'x')", () => expectIssueAt(() => repeat(3, 'x' as never), ['repeat', 'make']));
  it('rmsNorm({})', () => expectIssueAt(() => rmsNorm({} as never), ['rmsNorm', 'size']));
  it('attention({ heads: true })', () => expectIssueAt(() => attention({ hidden: 64, heads: true } as never), ['attention', 'heads']));
  it('gatedMlp({ intermediate: true })', () => expectIssueAt(() => gatedMlp({ hidden: 64, intermediate: true } as never), ['gatedMlp', 'intermediate']));
  it("linear({ quant: 'bogus' })", () => expectIssueAt(() => linear({ out: 8, quant: 'bogus' } as never), ['linear', 'quant']));
  it("upsample({ scaleFactor: '2' })", () => expectIssueAt(() => upsample({ scaleFactor: '2' } as never), ['upsample', 'scaleFactor']));
  it("conv2d({ bias: 'false' }) is an error, not a bias", () => expectIssueAt(() => conv2d({ out: 8, kernel: 3, bias: 'false' } as never), ['conv2d', 'bias']));
  it("branch(paths, { merge: 'xor' })", () => expectIssueAt(() => branch([relu(), identity()], { merge: 'xor' } as never), ['branch', 'merge']));
  it("attention({ impl: 'bogus' })", () => expectIssueAt(() => attention({ hidden: 64, heads: 4, impl: 'bogus' } as never), ['attention', 'impl']));
  it('dropout({ p: 1.5 })', () => expectIssueAt(() => dropout({ p: 1.5 }), ['dropout', 'p']));
  it('maxPool2d({ kernel: 2, padding: 5 }): PyTorch wants pad at most half the effective kernel', () =>
    expectIssueAt(() => maxPool2d({ kernel: 2, padding: 5 }), ['maxPool2d', 'padding']));

  it('rmsNorm({ size: 7 }) on 8 features: an error at estimate time naming the size', () => {
    const layer = rmsNorm({ size: 7 });
    const error = vramError(() => estimateOn(layer, [1, 4, 8]));
    expect(
      error.issues.some((i) => i.path.includes('size') || /\bsize\b/.test(i.message) || /\b7\b/.test(`${i.message} ${i.expected ?? ''} ${i.received ?? ''}`)),
      error.message,
    ).toBe(true);
  });

  describe('graph() callbacks given junk', () => {
    it('g.apply(null)', () => expectIssueAt(() => graphOn((g, [x]) => g.apply(null as never, x!)), []));
    it('g.call(null, [], {})', () => expectIssueAt(() => graphOn((g) => g.call(null as never, [], {})), []));
    it("g.call(reluRule, [{ id: 9999, shape: [], dtype: 'float32' }], {})", () =>
      expectIssueAt(() => graphOn((g) => g.call(activationOp('relu') as never, [{ id: 9999, shape: [], dtype: 'float32' } as never], {})), []));
    it('a build returning a non-tensor', () => {
      for (const value of [null, 42, 'x', {}, [null], [{ id: 9999 }]]) expectIssueAt(() => graphOn(() => value), []);
    });
    it('the junk calls name where they went wrong', () => {
      const paths = (f: () => unknown) => vramError(f).issues.map((i) => i.path.join('.'));
      expect(paths(() => graphOn((g, [x]) => g.apply(null as never, x!))).join(' ')).toMatch(/apply/);
      expect(paths(() => graphOn((g) => g.call(null as never, [], {}))).join(' ')).toMatch(/call/);
    });
  });
});
