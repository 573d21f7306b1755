/**
 * graph()'s builder is user code: each callback checks its arguments where they enter, so a
 * wrong one is a VramError at the graph's module path (plus the callback's name), never a
 * TypeError inside the tracer and never a tensor read from another trace.
 */
import { describe, expect, it } from 'vitest';
import { estimate, graph, linear, matmulOp, module, relu, seq, type GraphBuilder, type Layer, type TensorRef } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

/** The first issue when a graph module `g` runs `body`. */
function issueWhen(body: (g: GraphBuilder, x: TensorRef) => unknown) {
  const model = seq(
    module(
      'g',
      'G',
      graph((g, [x]) => body(g, x!) as TensorRef),
    ),
  );
  return errorOf(() => estimate(model, { input: [2, 4], loss: 'none' })).issues[0]!;
}

const forged = { id: 9999, shape: [2, 4], dtype: 'float32' } as unknown as TensorRef;

describe("graph()'s callbacks check their arguments", () => {
  it('apply and applyAll: a layer (walked and checked like the model) and tensors of this trace', () => {
    expect(issueWhen((g) => g.apply(null as unknown as Layer))).toMatchObject({ path: ['g', 'apply'], code: 'bad-layer' });
    expect(issueWhen((g, x) => g.applyAll({ kind: 'seq', className: 'S', isSequential: true, children: [7] } as unknown as Layer, x))).toMatchObject({
      path: ['g', 'applyAll', 'children', 0],
    });
    expect(issueWhen((g) => g.apply(relu(), forged))).toMatchObject({ path: ['g', 'apply', 0], code: 'bad-tensor' });
    expect(issueWhen((g) => g.apply(relu(), null as unknown as TensorRef))).toMatchObject({ path: ['g', 'apply', 0], code: 'bad-tensor' });
  });

  it('call: an op rule and tensors of this trace; a same-id ref with another shape is not this trace', () => {
    expect(issueWhen((g, x) => g.call(null as never, [x], {}))).toMatchObject({ path: ['g', 'call'], code: 'bad-option' });
    expect(issueWhen((g, x) => g.call({ name: 'm' } as never, [x], {}))).toMatchObject({ path: ['g', 'call'] });
    expect(issueWhen((g, x) => g.call(matmulOp, x as never, {}))).toMatchObject({ path: ['g', 'call'], code: 'bad-tensor' });
    expect(issueWhen((g, x) => g.call(matmulOp, [x, forged], {}))).toMatchObject({ path: ['g', 'call', 1], code: 'bad-tensor' });
    expect(issueWhen((g, x) => g.call(matmulOp, [x, { ...x, shape: [4, 2] }], {}))).toMatchObject({ path: ['g', 'call', 1], code: 'bad-tensor' });
  });

  it('hold, touch and require check theirs; the build must return tensors', () => {
    expect(issueWhen((g) => g.hold(forged))).toMatchObject({ path: ['g', 'hold'], code: 'bad-tensor' });
    expect(issueWhen((g, x) => g.hold(x, 'forever' as never))).toMatchObject({ path: ['g', 'hold'] });
    expect(issueWhen((g) => g.touch(undefined as never))).toMatchObject({ path: ['g', 'touch'] });
    expect(issueWhen((g) => g.require('7' as never, 'n'))).toMatchObject({ path: ['g', 'require'] });
    expect(issueWhen((g) => g.require(Number.NaN, 'n'))).toMatchObject({ path: ['g', 'require'] });
    expect(issueWhen(() => 42)).toMatchObject({ path: ['g', 'build'], code: 'bad-tensor' });
    expect(issueWhen((_g, x) => [x, null])).toMatchObject({ path: ['g', 'build', 1], code: 'bad-tensor' });
  });

  it('refs kept from another trace are refused', () => {
    let kept: TensorRef | undefined;
    const keep = graph((g, [x]) => {
      kept = g.apply(linear({ out: 4 }), x!);
      return kept;
    });
    estimate(module('k', 'K', keep), { input: [2, 4], loss: 'none' });
    const reuse = seq(
      module(
        'r',
        'R',
        graph((g) => g.apply(relu(), kept!)),
      ),
    );
    expect(errorOf(() => estimate(reuse, { input: [2, 4], loss: 'none' })).issues[0]).toMatchObject({ path: ['r', 'apply', 0], code: 'bad-tensor' });
  });

  it('g.path is the module the graph runs in, frozen; empty at the root', () => {
    const seen: (readonly string[])[] = [];
    const look = graph((g, [x]) => {
      seen.push(g.path);
      return x!;
    });
    estimate(seq(module('outer', 'O', seq(module('inner', 'I', look)))), { input: [2, 4], loss: 'none' });
    estimate(look, { input: [2, 4], loss: 'none' });
    expect(seen).toEqual([['outer', 'inner'], []]);
    expect(Object.isFrozen(seen[0])).toBe(true);
  });

  it('well-formed graphs are unchanged', () => {
    const product = module(
      'g',
      'G',
      graph((g, [x]) => g.call(matmulOp, [g.apply(linear({ out: 4 }), x!), g.apply(linear({ out: 3 }), x!)], {})[0]!),
    );
    expect(estimate(product, { input: [4, 4], loss: 'none' }).modules[0]?.outputShape).toEqual([4, 3]);
    const fine = module(
      'g',
      'G',
      graph((g, [x]) => g.apply(relu(), g.apply(linear({ out: 4 }), x!))),
    );
    expect(estimate(fine, { input: [2, 4], loss: 'none' }).params.total).toBe(20);
  });
});
