import { describe, expect, it } from 'vitest';
import {
  attention,
  bn,
  branch,
  conv2d,
  estimate,
  flatten,
  graph,
  hardswish,
  identity,
  linear,
  module,
  relu,
  repeat,
  residual,
  seq,
  sigmoid,
  squeezeExcitation,
  VramError,
  type Layer,
} from '../../src/index.js';

function ops(model: Layer, input: readonly number[]): string[] {
  const { ir } = estimate(model, { input, optimizer: null, timeline: false, loss: 'none' });
  return ir.ops.map((op) => op.op);
}

function issueOf(run: () => unknown) {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(VramError);
    return (error as VramError).issues[0]!;
  }
  throw new Error('expected a VramError');
}

describe('builders', () => {
  it('conv2d infers its input channels and computes output sizes, padding "same" included', () => {
    const r = estimate(seq(conv2d({ out: 8, kernel: 3, stride: 2, padding: 1 }), conv2d({ out: 4, kernel: 5, padding: 'same', bias: false })), {
      input: [1, 3, 31, 20],
    });
    expect(r.modules.map((m) => m.outputShape)).toEqual([
      [1, 4, 16, 10],
      [1, 8, 16, 10],
      [1, 4, 16, 10],
    ]);
    expect(r.params.total).toBe(8 * 3 * 9 + 8 + 4 * 8 * 25);
  });

  it('residual adds the input to the body (in place when asked), with an optional shortcut', () => {
    expect(ops(residual(seq(conv2d({ out: 4, kernel: 1 }))), [1, 4, 8, 8])).toEqual(['conv2d', 'add']);
    expect(ops(residual(conv2d({ out: 8, kernel: 1 }), { shortcut: conv2d({ out: 8, kernel: 1 }) }), [1, 4, 8, 8])).toEqual(['conv2d', 'conv2d', 'add']);
    const inplace = estimate(residual(conv2d({ out: 4, kernel: 1 }), { inplace: true }), { input: [1, 4, 8, 8], loss: 'none' });
    expect(inplace.ir.ops.at(-1)!.alias).toBe('inplace');
  });

  it('branch merges its paths by add, mul or concat', () => {
    const paths = [conv2d({ out: 8, kernel: 1 }), conv2d({ out: 8, kernel: 3, padding: 1 })];
    expect(estimate(branch(paths, { merge: 'concat' }), { input: [1, 4, 8, 8] }).modules[0]!.outputShape).toEqual([1, 16, 8, 8]);
    expect(estimate(branch(paths, { merge: 'add' }), { input: [1, 4, 8, 8] }).modules[0]!.outputShape).toEqual([1, 8, 8, 8]);
    expect(ops(branch([identity(), sigmoid()], { merge: 'mul' }), [2, 4])).toEqual(['identity', 'sigmoid', 'mul']);
    const mismatch = issueOf(() => estimate(branch([conv2d({ out: 8, kernel: 1 }), conv2d({ out: 4, kernel: 1 })], { merge: 'add' }), { input: [1, 4, 8, 8] }));
    expect(mismatch.path.length).toBeGreaterThan(0);
  });

  it('repeat makes n children named 0 … n-1 and refuses a count that is not a whole number', () => {
    const r = estimate(
      repeat(3, () => seq(linear({ out: 16 }), relu())),
      { input: [2, 16] },
    );
    expect(r.modules.filter((m) => m.depth === 1).map((m) => m.path)).toEqual([['0'], ['1'], ['2']]);
    expect(r.params.total).toBe(3 * (16 * 16 + 16));
    for (const n of [-1, 2.5, Number.NaN]) expect(issueOf(() => repeat(n, () => relu()))).toMatchObject({ code: 'bad-option', path: ['repeat', 'n'] });
  });

  it('checks dimension indices the way PyTorch takes them (negative from the end)', () => {
    expect(estimate(flatten({ startDim: -3 }), { input: [2, 3, 4, 5] }).modules[0]!.outputShape).toEqual([2, 60]);
    const issue = issueOf(() => estimate(flatten({ startDim: 4 }), { input: [2, 3, 4, 5] }));
    expect(issue.code).toBe('bad-attribute');
    expect(issue.path).toEqual(['flatten']);
  });

  it('module names a node of the tree with its class', () => {
    const block = module('stem', 'Conv2dNormActivation', seq(conv2d({ out: 16, kernel: 3, padding: 1, bias: false }), bn(), hardswish()));
    const r = estimate(seq(block), { input: [1, 3, 32, 32] });
    expect(r.modules.map((m) => [m.path.join('.'), m.className])).toEqual([
      ['', 'Sequential'],
      ['stem', 'Conv2dNormActivation'],
      ['stem.0', 'Conv2d'],
      ['stem.1', 'BatchNorm2d'],
      ['stem.2', 'Hardswish'],
    ]);
  });

  it('squeezeExcitation has torchvision’s parameters and gates the input', () => {
    const r = estimate(squeezeExcitation({ squeeze: 8 }), { input: [1, 16, 7, 7], loss: 'none' });
    expect(r.params.total).toBe(16 * 8 + 8 + 8 * 16 + 16);
    expect(r.ir.ops.map((op) => op.op)).toEqual(['adaptive_avg_pool2d', 'conv2d', 'relu', 'conv2d', 'sigmoid', 'mul']);
    expect(r.modules[0]!.outputShape).toEqual([1, 16, 7, 7]);
  });

  it('llama-style attention without its rotary tables is a VramError with a path, not a TypeError', () => {
    const attn = attention({ style: 'llama', hidden: 64, heads: 4, kvHeads: 4, headDim: 16 } as never);
    expect(() => estimate(attn, { input: [1, 8, 64] })).toThrowError(
      expect.objectContaining({ issues: [expect.objectContaining({ code: 'bad-layer', path: ['attention', 'inputs'] })] }),
    );
  });

  it('graph wires any dataflow and keeps op names in the tree', () => {
    const twoHeads = graph((g, [x]) => {
      const h = g.apply(linear({ out: 8, name: 'trunk' }), x!);
      return [g.apply(linear({ out: 2, name: 'head_a' }), h), g.apply(linear({ out: 3, name: 'head_b' }), h)];
    });
    const r = estimate(twoHeads, { input: [4, 16], loss: 'none' });
    expect(r.modules.map((m) => m.path.join('.'))).toEqual(['', 'trunk', 'head_a', 'head_b']);
    expect(r.params.total).toBe(16 * 8 + 8 + 8 * 2 + 2 + 8 * 3 + 3);
  });
});
