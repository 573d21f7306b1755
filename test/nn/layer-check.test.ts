/**
 * The structural builders (seq, residual, branch, module, repeat, graph) and the tracer's walk
 * take layers only: anything else is a VramError at its path, never a TypeError in trace/.
 */
import { describe, expect, it } from 'vitest';
import { branch, estimate, graph, linear, module, relu, repeat, residual, seq, type Layer } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const junk: readonly unknown[] = [
  null,
  undefined,
  0,
  'relu',
  true,
  [],
  {},
  { kind: 'bogus' },
  { kind: 'op' },
  { kind: 'seq', children: 3, className: 'S' },
  () => relu(),
];
const first = (f: () => unknown) => errorOf(f).issues[0]!;

describe('layers where layers are taken', () => {
  it('seq, residual, branch and module refuse each non-layer with its path', () => {
    for (const value of junk) {
      const v = value as Layer;
      expect(first(() => seq(relu(), v))).toMatchObject({ path: ['seq', 1], code: 'bad-layer' });
      expect(first(() => residual(v))).toMatchObject({ path: ['residual', 'body'], code: 'bad-layer' });
      // an undefined shortcut is one not given
      if (v !== undefined) expect(first(() => residual(relu(), { shortcut: v }))).toMatchObject({ path: ['residual', 'shortcut'] });
      expect(first(() => branch([relu(), v], { merge: 'add' }))).toMatchObject({ path: ['branch', 'paths', 1] });
      expect(first(() => module('m', 'M', v))).toMatchObject({ path: ['module', 'body'], code: 'bad-layer' });
    }
  });

  it('branch: paths a non-empty list, merge one of add | mul | concat and required', () => {
    expect(first(() => branch([relu()], { merge: 'xor' as never }))).toMatchObject({ path: ['branch', 'merge'], expected: 'add | mul | concat' });
    expect(first(() => branch([relu()], {} as never))).toMatchObject({ path: ['branch', 'merge'], code: 'missing-option' });
    expect(first(() => branch([], { merge: 'add' }))).toMatchObject({ path: ['branch', 'paths'] });
    expect(first(() => branch(null as never, { merge: 'add' }))).toMatchObject({ path: ['branch', 'paths'] });
    expect(first(() => branch([relu()], { merge: 'add', inline: 'yes' as never }))).toMatchObject({ path: ['branch', 'inline'] });
  });

  it('options are checked by type: booleans are booleans, names are non-empty strings', () => {
    expect(first(() => seq({ isSequential: 'false' as never }, relu()))).toMatchObject({ path: ['seq', 'isSequential'] });
    expect(first(() => seq({ className: 3 as never }, relu()))).toMatchObject({ path: ['seq', 'className'] });
    expect(first(() => residual(relu(), { inplace: 1 as never }))).toMatchObject({ path: ['residual', 'inplace'] });
    expect(first(() => relu({ name: '' }))).toMatchObject({ path: ['relu', 'name'] });
    expect(first(() => relu({ name: 'a..b' }))).toMatchObject({ path: ['relu', 'name'] });
    expect(first(() => module('', 'M', relu()))).toMatchObject({ path: ['module', 'name'] });
    expect(first(() => module('m', null as never, relu()))).toMatchObject({ path: ['module', 'className'] });
    expect(first(() => graph(null as never))).toMatchObject({ path: ['graph', 'build'] });
    expect(first(() => graph((_g, [x]) => x!, { nmae: 'g' } as never))).toMatchObject({ path: ['graph', 'nmae'], code: 'unknown-option' });
  });

  it('repeat: n a whole number within the limit, make a function returning layers', () => {
    expect(first(() => repeat(3, 'x' as never))).toMatchObject({ path: ['repeat', 'make'] });
    expect(first(() => repeat(2, ((i: number) => (i === 1 ? null : relu())) as never))).toMatchObject({ path: ['repeat', 1], code: 'bad-layer' });
    for (const n of [-1, 2.5, Number.NaN, Infinity, 1e6, '3']) expect(first(() => repeat(n as never, () => relu()))).toMatchObject({ path: ['repeat', 'n'] });
    const started = performance.now();
    expect(repeat(100_000, () => relu()).children).toHaveLength(100_000);
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('a hand-made child layer is kept as a frozen copy: changing it later changes no built model', () => {
    const handMade = { kind: 'op', rule: relu().rule, attrs: { inplace: false }, className: 'ReLU' } as unknown as Layer;
    const inner = { kind: 'seq', className: 'Sequential', isSequential: true, children: [handMade] } as unknown as Layer;
    const built = seq(inner);
    (inner as unknown as { children: unknown[] }).children.push(null);
    (handMade as unknown as { attrs: { inplace: boolean } }).attrs.inplace = true;
    const kept = built.children[0] as unknown as { children: readonly { attrs: object; rule: unknown }[] };
    expect(kept.children).toHaveLength(1);
    expect(kept.children[0]!.attrs).toEqual({ inplace: false });
    expect(Object.isFrozen(kept.children[0]!.attrs)).toBe(true);
    expect(kept.children[0]!.rule).toBe(relu().rule);
    expect(first(() => seq({ ...relu(), attrs: new Set() } as unknown as Layer))).toMatchObject({
      path: ['seq', 0],
      message: "an op layer's attrs must be a plain object",
    });
  });

  it('an inline branch at the root runs in the root module', () => {
    expect(
      estimate(branch([relu(), relu()], { merge: 'add', inline: true }), { input: [1, 4], inputRequiresGrad: true, loss: 'none' }).modules[0]?.path,
    ).toEqual([]);
  });

  it('the tracer checks every node it walks of a hand-made model, with the path in the model', () => {
    const handMade = { kind: 'seq', className: 'Sequential', isSequential: true, children: [relu(), { kind: 'residual', inplace: false }] } as unknown as Layer;
    expect(first(() => estimate(handMade, { input: [1, 4] }))).toMatchObject({ path: ['model', 'children', 1], code: 'bad-layer' });
    expect(first(() => estimate(null as never, { input: [1, 4] }))).toMatchObject({ path: ['model'], code: 'bad-model' });
    const badRule = { kind: 'op', rule: { name: 'x' }, attrs: {}, className: 'X' } as unknown as Layer;
    expect(first(() => estimate(badRule, { input: [1, 4] }))).toMatchObject({
      path: ['model'],
      message: 'an op layer needs an op rule (name, arity and apply)',
    });
    expect(first(() => seq(badRule))).toMatchObject({ path: ['seq', 0] });
    // fields a layer does not have, and fields of the wrong type, are not read past
    const extra = { ...relu(), isSequential: new Set() } as unknown as Layer;
    expect(first(() => seq(extra))).toMatchObject({ path: ['seq', 0], message: 'the op layer has no field "isSequential"' });
    const notBool = { kind: 'seq', className: 'S', isSequential: 'yes', children: [] } as unknown as Layer;
    expect(first(() => estimate(notBool, { input: [1, 4] }))).toMatchObject({ path: ['model'], code: 'bad-layer' });
    // an op rule whose apply returns no op result is a VramError at its op, not a TypeError in the tracer
    const broken = { kind: 'op', rule: { name: 'broken', arity: 1, apply: () => undefined }, attrs: {}, className: 'Broken' } as unknown as Layer;
    expect(first(() => estimate(seq(broken), { input: [1, 4] }))).toMatchObject({ code: 'bad-rule' });
    // a well-made model is untouched by the walk
    expect(estimate(seq(linear({ out: 4 }), relu()), { input: [1, 4] }).params.total).toBe(20);
  });
});
