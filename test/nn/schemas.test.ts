/**
 * One schema per builder (issue "Hostile inputs everywhere"): strict keys, types, enums, ranges
 * and required keys as torch's constructors check them, each a VramError at the exact path; the
 * sizes a builder declares (`in`, `size`, `channels`) checked against the traced input; and the
 * op rules graph() calls (`g.call(rule, inputs, attrs)`) checking their attributes first.
 */
import { describe, expect, it } from 'vitest';
import {
  adaptiveAvgPool2d,
  adaptiveMaxPool2d,
  addOp,
  addScalarOp,
  avgPool2d,
  bn,
  catOp,
  conv1d,
  conv2d,
  convTranspose2d,
  copyOp,
  dropout,
  embedding,
  estimate,
  expandOp,
  flatten,
  functional,
  gelu,
  graph,
  groupNorm,
  hardsigmoid,
  hardswish,
  hfActivation,
  identity,
  interpolate,
  layerNorm,
  layerNorm2d,
  linear,
  matmulOp,
  maxPool2d,
  module,
  mulOp,
  mulScalarOp,
  parameter,
  permuteOp,
  relu,
  relu6,
  rmsNorm,
  selectOp,
  seq,
  sigmoid,
  silu,
  sliceOp,
  softmaxOp,
  stochasticDepth,
  sym,
  tanh,
  transposeOp,
  upsample,
  viewOp,
} from '../../src/index.js';
import type { OpRule } from '../../src/internals.js';
import { errorOf } from '../helpers/errors.js';

/** The paths of every issue of the VramError a call throws. */
const paths = (f: () => unknown) => errorOf(f).issues.map((i) => i.path);
const hostile = (f: (options: never) => unknown, options: unknown) => () => f(options as never);

type Case = readonly [what: string, call: () => unknown, path: readonly (string | number)[]];

const IMAGE = { input: [1, 4, 8, 8], loss: 'none' } as const;
const SEQ = { input: [2, 5, 8], loss: 'none' } as const;

const cases: Readonly<Record<string, readonly Case[]>> = {
  conv1d: [
    ['wrong type', hostile(conv1d, { out: 4, kernel: [3, 3] }), ['conv1d', 'kernel']],
    ['truthy non-boolean', hostile(conv1d, { out: 4, kernel: 3, bias: 1 }), ['conv1d', 'bias']],
    ['unknown enum', hostile(conv1d, { out: 4, kernel: 3, padding: 'full' }), ['conv1d', 'padding']],
    ['out of range', hostile(conv1d, { out: 4, kernel: 0 }), ['conv1d', 'kernel']],
    ['missing required', hostile(conv1d, { kernel: 3 }), ['conv1d', 'out']],
    ['groups must divide out', hostile(conv1d, { out: 5, kernel: 3, groups: 2 }), ['conv1d', 'groups']],
    ["'same' with a stride", hostile(conv1d, { out: 4, kernel: 3, stride: 2, padding: 'same' }), ['conv1d', 'padding']],
    ['declared in vs input', () => estimate(conv1d({ out: 4, kernel: 3, in: 5 }), { input: [1, 3, 16], loss: 'none' }), ['conv1d', 'in']],
  ],
  conv2d: [
    ['wrong type', hostile(conv2d, { out: '8', kernel: 3 }), ['conv2d', 'out']],
    ['truthy non-boolean (the issue)', hostile(conv2d, { out: 16, kernel: 3, bias: 'false' }), ['conv2d', 'bias']],
    ['unknown enum', hostile(conv2d, { out: 8, kernel: 3, padding: 'sme' }), ['conv2d', 'padding']],
    ['out of range', hostile(conv2d, { out: 8, kernel: 3, padding: -1 }), ['conv2d', 'padding']],
    ['out of range (pair)', hostile(conv2d, { out: 8, kernel: [3, 0] }), ['conv2d', 'kernel']],
    ['missing required', hostile(conv2d, { out: 8 }), ['conv2d', 'kernel']],
    ['unknown key', hostile(conv2d, { out: 8, kernel: 3, stirde: 2 }), ['conv2d', 'stirde']],
    ['groups must divide out', hostile(conv2d, { out: 6, kernel: 1, groups: 4 }), ['conv2d', 'groups']],
    ["'same' with a stride", hostile(conv2d, { out: 6, kernel: 3, stride: 2, padding: 'same' }), ['conv2d', 'padding']],
    ['declared in vs input', () => estimate(conv2d({ out: 8, kernel: 1, in: 3 }), IMAGE), ['conv2d', 'in']],
  ],
  convTranspose2d: [
    ['wrong type', hostile(convTranspose2d, { out: 4, kernel: '2' }), ['convTranspose2d', 'kernel']],
    ['truthy non-boolean', hostile(convTranspose2d, { out: 4, kernel: 2, bias: 'no' }), ['convTranspose2d', 'bias']],
    ['out of range', hostile(convTranspose2d, { out: 4, kernel: 2, stride: 0 }), ['convTranspose2d', 'stride']],
    ['missing required', hostile(convTranspose2d, { kernel: 2 }), ['convTranspose2d', 'out']],
    [
      'outputPadding below stride or dilation',
      hostile(convTranspose2d, { out: 4, kernel: 2, stride: 2, outputPadding: 2 }),
      ['convTranspose2d', 'outputPadding'],
    ],
    ['groups must divide out', hostile(convTranspose2d, { out: 3, kernel: 2, groups: 2 }), ['convTranspose2d', 'groups']],
  ],
  bn: [
    ['wrong type', hostile(bn, { eps: '1e-5' }), ['bn', 'eps']],
    ['truthy non-boolean', hostile(bn, { affine: 'false' }), ['bn', 'affine']],
    ['out of range', hostile(bn, { momentum: 1.5 }), ['bn', 'momentum']],
    ['unknown key', hostile(bn, { num_features: 4 }), ['bn', 'num_features']],
    ['declared channels vs input', () => estimate(bn({ channels: 5 }), IMAGE), ['batch_norm', 'channels']],
  ],
  groupNorm: [
    ['wrong type', hostile(groupNorm, { groups: '2' }), ['groupNorm', 'groups']],
    ['truthy non-boolean', hostile(groupNorm, { groups: 2, affine: 0 }), ['groupNorm', 'affine']],
    ['out of range', hostile(groupNorm, { groups: 0 }), ['groupNorm', 'groups']],
    ['missing required', hostile(groupNorm, {}), ['groupNorm', 'groups']],
    ['groups must divide channels', hostile(groupNorm, { groups: 3, channels: 8 }), ['groupNorm', 'groups']],
    ['declared channels vs input', () => estimate(groupNorm({ groups: 2, channels: 6 }), IMAGE), ['group_norm', 'channels']],
    ['groups vs the input channels', () => estimate(groupNorm({ groups: 3 }), IMAGE), ['group_norm', 'groups']],
  ],
  layerNorm: [
    ['wrong type', hostile(layerNorm, { size: [8] }), ['layerNorm', 'size']],
    ['truthy non-boolean', hostile(layerNorm, { elementwiseAffine: 'yes' }), ['layerNorm', 'elementwiseAffine']],
    ['out of range', hostile(layerNorm, { eps: -1 }), ['layerNorm', 'eps']],
    ['declared size vs input', () => estimate(layerNorm({ size: 7 }), SEQ), ['layer_norm', 'size']],
  ],
  layerNorm2d: [
    ['wrong type', hostile(layerNorm2d, { channels: '4' }), ['layerNorm2d', 'channels']],
    ['truthy non-boolean', hostile(layerNorm2d, { channelsLast: 1 }), ['layerNorm2d', 'channelsLast']],
    ['out of range', hostile(layerNorm2d, { channels: 0 }), ['layerNorm2d', 'channels']],
    ['declared channels vs input', () => estimate(layerNorm2d({ channels: 3 }), IMAGE), ['layer_norm', 'channels']],
  ],
  rmsNorm: [
    ['missing required (the issue)', hostile(rmsNorm, {}), ['rmsNorm', 'size']],
    ['wrong type', hostile(rmsNorm, { size: '8' }), ['rmsNorm', 'size']],
    ['truthy non-boolean', hostile(rmsNorm, { size: 8, offset: 'true' }), ['rmsNorm', 'offset']],
    ['out of range', hostile(rmsNorm, { size: 8, eps: Number.NaN }), ['rmsNorm', 'eps']],
    ['wrong type (className)', hostile(rmsNorm, { size: 8, className: '' }), ['rmsNorm', 'className']],
    // the issue: rmsNorm({ size: 7 }) on 8 features gave a number; its weight's size is named
    ['declared size vs input (the issue)', () => estimate(seq(linear({ out: 8 }), rmsNorm({ size: 7 })), SEQ), ['1', 'scale', 'size']],
    ['declared size vs input (Gemma offset)', () => estimate(rmsNorm({ size: 7, offset: true }), SEQ), ['offset_scale', 'size']],
  ],
  linear: [
    ['unknown enum (the issue)', hostile(linear, { out: 4, quant: 'bogus' }), ['linear', 'quant']],
    ['unknown quantization method', hostile(linear, { out: 4, quant: { method: 'gguf' } }), ['linear', 'quant', 'method']],
    ['out of range (GPTQ bits)', hostile(linear, { out: 4, quant: { method: 'gptq', bits: 5, groupSize: 128 } }), ['linear', 'quant', 'bits']],
    ['missing required (GPTQ group size)', hostile(linear, { out: 4, quant: { method: 'gptq', bits: 4 } }), ['linear', 'quant', 'groupSize']],
    ['wrong type', hostile(linear, { out: 4, in: '8' }), ['linear', 'in']],
    ['truthy non-boolean', hostile(linear, { out: 4, bias: 'false' }), ['linear', 'bias']],
    ['out of range', hostile(linear, { out: 0 }), ['linear', 'out']],
    ['missing required', hostile(linear, {}), ['linear', 'out']],
    ['storageRows below out', hostile(linear, { out: 8, storageRows: 4 }), ['linear', 'storageRows']],
    ['a tied weight is not quantized', hostile(linear, { out: 8, tiedWeight: 'wte.weight', quant: 'nf4' }), ['linear', 'quant']],
    ['declared in vs input', () => estimate(linear({ out: 4, in: 7 }), SEQ), ['linear', 'in']],
  ],
  embedding: [
    ['wrong type', hostile(embedding, { num: 10, dim: '4' }), ['embedding', 'dim']],
    ['out of range', hostile(embedding, { num: 0, dim: 4 }), ['embedding', 'num']],
    ['missing required', hostile(embedding, { num: 10 }), ['embedding', 'dim']],
    ['wrong type (tiedWeight)', hostile(embedding, { num: 10, dim: 4, tiedWeight: 1 }), ['embedding', 'tiedWeight']],
  ],
  dropout: [
    ['out of range (the issue)', hostile(dropout, { p: 1.5 }), ['dropout', 'p']],
    ['wrong type', hostile(dropout, { p: '0.1' }), ['dropout', 'p']],
    ['truthy non-boolean', hostile(dropout, { inplace: 'false' }), ['dropout', 'inplace']],
    ['unknown key', hostile(dropout, { rate: 0.1 }), ['dropout', 'rate']],
  ],
  stochasticDepth: [
    ['unknown enum', hostile(stochasticDepth, { p: 0.1, mode: 'rows' }), ['stochasticDepth', 'mode']],
    ['out of range', hostile(stochasticDepth, { p: -0.1 }), ['stochasticDepth', 'p']],
    ['missing required', hostile(stochasticDepth, {}), ['stochasticDepth', 'p']],
    ['wrong type', hostile(stochasticDepth, { p: null }), ['stochasticDepth', 'p']],
  ],
  maxPool2d: [
    ['pad at most half the kernel (the issue)', hostile(maxPool2d, { kernel: 2, padding: 5 }), ['maxPool2d', 'padding']],
    ['wrong type', hostile(maxPool2d, { kernel: '2' }), ['maxPool2d', 'kernel']],
    ['truthy non-boolean', hostile(maxPool2d, { kernel: 2, ceilMode: 'true' }), ['maxPool2d', 'ceilMode']],
    ['out of range', hostile(maxPool2d, { kernel: 2, stride: 0 }), ['maxPool2d', 'stride']],
    ['missing required', hostile(maxPool2d, {}), ['maxPool2d', 'kernel']],
  ],
  avgPool2d: [
    ['pad at most half the kernel', hostile(avgPool2d, { kernel: 3, padding: 2 }), ['avgPool2d', 'padding']],
    ['unknown key (no dilation in torch)', hostile(avgPool2d, { kernel: 2, dilation: 2 }), ['avgPool2d', 'dilation']],
    ['truthy non-boolean', hostile(avgPool2d, { kernel: 2, ceilMode: 1 }), ['avgPool2d', 'ceilMode']],
    ['missing required', hostile(avgPool2d, {}), ['avgPool2d', 'kernel']],
  ],
  adaptiveAvgPool2d: [
    ['wrong type', hostile(adaptiveAvgPool2d, { output: '1' }), ['adaptiveAvgPool2d', 'output']],
    ['out of range', hostile(adaptiveAvgPool2d, { output: [1, 0] }), ['adaptiveAvgPool2d', 'output']],
  ],
  adaptiveMaxPool2d: [
    ['wrong type', hostile(adaptiveMaxPool2d, { output: [1, 2, 3] }), ['adaptiveMaxPool2d', 'output']],
    ['out of range', hostile(adaptiveMaxPool2d, { output: 0 }), ['adaptiveMaxPool2d', 'output']],
  ],
  upsample: [
    ['wrong type (the issue)', hostile(upsample, { scaleFactor: '2' }), ['upsample', 'scaleFactor']],
    ['unknown enum', hostile(upsample, { scaleFactor: 2, mode: 'bicubic' }), ['upsample', 'mode']],
    ['truthy non-boolean', hostile(upsample, { scaleFactor: 2, mode: 'bilinear', alignCorners: 'yes' }), ['upsample', 'alignCorners']],
    ['out of range', hostile(upsample, { size: 0 }), ['upsample', 'size']],
    ['missing required (size or scaleFactor)', hostile(upsample, {}), ['upsample', 'size']],
    ['only one of size and scaleFactor', hostile(upsample, { size: 4, scaleFactor: 2 }), ['upsample', 'scaleFactor']],
    ['alignCorners only with bilinear', hostile(upsample, { scaleFactor: 2, alignCorners: true }), ['upsample', 'alignCorners']],
    ['interpolate: wrong type', hostile(interpolate, { size: [2, '2'] }), ['interpolate', 'size']],
  ],
  flatten: [
    ['wrong type', hostile(flatten, { startDim: '1' }), ['flatten', 'startDim']],
    ['start after end', hostile(flatten, { startDim: 2, endDim: 1 }), ['flatten', 'startDim']],
    ['dims vs the input rank', () => estimate(flatten({ startDim: 5 }), IMAGE), ['flatten']],
  ],
  activations: [
    ['relu: truthy non-boolean', hostile(relu, { inplace: 'false' }), ['relu', 'inplace']],
    ['relu6: truthy non-boolean', hostile(relu6, { inplace: 1 }), ['relu6', 'inplace']],
    ['silu: truthy non-boolean', hostile(silu, { inplace: 'true' }), ['silu', 'inplace']],
    ['hardswish: truthy non-boolean', hostile(hardswish, { inplace: [] }), ['hardswish', 'inplace']],
    ['hardsigmoid: truthy non-boolean', hostile(hardsigmoid, { inplace: {} }), ['hardsigmoid', 'inplace']],
    ['gelu: unknown enum', hostile(gelu, { approximate: 'erf' }), ['gelu', 'approximate']],
    ['tanh: unknown key', hostile(tanh, { inplace: true }), ['tanh', 'inplace']],
    ['sigmoid: not an object', hostile(sigmoid, 'fast'), ['sigmoid']],
    ['identity: unknown key', hostile(identity, { size: 3 }), ['identity', 'size']],
  ],
  parameter: [
    ['wrong type', hostile(parameter, { name: 'p', shape: '1,2', combine: 'add' }), ['parameter', 'shape']],
    ['unknown enum', hostile(parameter, { name: 'p', shape: [8], combine: 'concat' }), ['parameter', 'combine']],
    ['out of range', hostile(parameter, { name: 'p', shape: [0], combine: 'add' }), ['parameter', 'shape', 0]],
    ['missing required', hostile(parameter, { shape: [8], combine: 'add' }), ['parameter', 'name']],
    ['a dotted name', hostile(parameter, { name: 'a.b', shape: [8], combine: 'add' }), ['parameter', 'name']],
    ['prepend takes [1, T, D]', hostile(parameter, { name: 'token', shape: [2, 1, 8], combine: 'prepend' }), ['parameter', 'shape']],
  ],
  functional: [
    ['not a layer', () => functional(null as never), ['functional', 'layer']],
    ['a module', () => functional(seq(relu()) as never), ['functional', 'layer']],
  ],
  hfActivation: [
    ['unknown enum', () => hfActivation('swiglu', 'act'), ['hidden_act']],
    ['wrong type', () => hfActivation(1 as never, 'act'), ['hidden_act']],
    ['wrong type (name)', () => hfActivation('silu', 3 as never), ['hfActivation', 'name']],
  ],
};

describe('builder schemas', () => {
  for (const [builder, list] of Object.entries(cases)) {
    describe(builder, () => {
      for (const [what, call, path] of list) {
        it(`${what}: a VramError at ${path.join('.')}`, () => {
          expect(paths(call)).toContainEqual(path);
        });
      }
    });
  }

  it('reports every problem at once', () => {
    expect(paths(hostile(conv2d, { out: -1, kernel: 'x', bias: 'false' }))).toEqual([
      ['conv2d', 'out'],
      ['conv2d', 'kernel'],
      ['conv2d', 'bias'],
    ]);
  });

  it('the issue: the valid calls still build, and the declared sizes that match pass', () => {
    expect(estimate(seq(conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }), bn(), hardswish()), { input: [1, 3, 224, 224] }).params.total).toBe(
      464,
    );
    expect(estimate(seq(linear({ out: 8, in: 8 }), rmsNorm({ size: 8 }), layerNorm({ size: 8 })), SEQ).params.total).toBe(72 + 8 + 16);
    expect(estimate(maxPool2d({ kernel: 3, stride: 1, padding: 1 }), IMAGE).modules[0]?.outputShape).toEqual([1, 4, 8, 8]);
    expect(estimate(upsample({ scaleFactor: [2, 1] }), IMAGE).modules[0]?.outputShape).toEqual([1, 4, 16, 8]);
  });

  it('a symbolic dimension passes the declared-size checks it cannot decide', () => {
    // rmsNorm's size against a symbolic hidden size: nothing to compare, no error
    const model = graph((g, [x]) => g.apply(rmsNorm({ size: 8 }), g.call(viewOp, [x!], { shape: [sym('B'), 8] })[0]!));
    expect(estimate(model, { input: [sym('B'), 8], loss: 'none' }).params.total).toBe(8);
  });

  it('built layers are frozen, and never share the caller’s arrays', () => {
    const kernel: [number, number] = [3, 1];
    const layer = conv2d({ out: 4, kernel });
    expect(Object.isFrozen(layer.attrs)).toBe(true);
    expect(Object.isFrozen(kernel)).toBe(false);
    expect(layer.attrs.kernel).toEqual([3, 1]);
  });
});

/** The first issue's path when a graph calls `rule` with `attrs` on an input of `shape`. */
function callPath<A>(rule: OpRule<A>, attrs: unknown, shape: readonly number[] = [2, 3, 4], inputs = 1): readonly (string | number)[] {
  const model = graph(
    (g, [x]) =>
      g.call(
        rule,
        Array.from({ length: inputs }, () => x!),
        attrs as A,
      )[0]!,
  );
  return errorOf(() => estimate(model, { input: shape, loss: 'none' })).issues[0]!.path;
}

describe("graph()'s op rules check their attributes", () => {
  const junk: readonly [string, OpRule<never>, unknown, readonly (string | number)[], number?][] = [
    ['view: null', viewOp, null, ['view']],
    ['view: a string shape', viewOp, { shape: 'x' }, ['view', 'shape']],
    ['view: a shape of junk', viewOp, { shape: [2, Number.NaN, 4] }, ['view', 'shape', 1]],
    ['view: missing shape', viewOp, {}, ['view', 'shape']],
    ['expand: unknown key', expandOp, { shape: [2, 3, 4], size: 1 }, ['expand', 'size']],
    ['permute: dims of junk', permuteOp, { dims: 'x' }, ['permute', 'dims']],
    ['permute: dims out of range', permuteOp, { dims: [0, 1, 5] }, ['permute']],
    ['transpose: dim Infinity', transposeOp, { dim0: Number.POSITIVE_INFINITY, dim1: 0 }, ['transpose', 'dim0']],
    ['select: an index as a string', selectOp, { dim: 1, index: '0' }, ['select', 'index']],
    ['select: index out of range', selectOp, { dim: 1, index: 3 }, ['select', 'index']],
    ['slice: missing end', sliceOp, { dim: 1, start: 0 }, ['slice', 'end']],
    ['slice: end past the dimension', sliceOp, { dim: 1, start: 0, end: 9 }, ['slice', 'end']],
    ['copy: when 2', copyOp, { when: 2 }, ['copy', 'when']],
    ['matmul: unknown key', matmulOp, { transpose: true }, ['matmul', 'transpose'], 2],
    ['add_scalar: an array', addScalarOp, [], ['add_scalar']],
    ['mul_scalar: unknown dtype', mulScalarOp, { scalarDtype: 'double' }, ['mul_scalar', 'scalarDtype']],
    ['softmax: dim Infinity', softmaxOp, { dim: Number.POSITIVE_INFINITY }, ['softmax', 'dim']],
    ['softmax: dim out of range', softmaxOp, { dim: 3 }, ['softmax']],
    ['add: truthy inplace', addOp, { inplace: 'yes' }, ['add', 'inplace'], 2],
    ['mul: null', mulOp, null, ['mul'], 2],
    ['cat: dim as a string', catOp, { dim: 'x' }, ['cat', 'dim'], 2],
  ];
  for (const [what, rule, attrs, path, inputs] of junk) {
    it(`${what}: a VramError at ${path.join('.')}`, () => {
      expect(callPath(rule, attrs, [2, 3, 4], inputs ?? 1)).toEqual(path);
    });
  }

  it('the issue: g.call(viewOp, [x], null) inside a module names the module', () => {
    const model = seq(
      module(
        'blk',
        'Block',
        graph((g, [x]) => g.call(viewOp, [x!], null as never)[0]!),
      ),
    );
    expect(errorOf(() => estimate(model, { input: [2, 3], loss: 'none' })).issues[0]!.path).toEqual(['blk', 'view']);
  });

  it('valid attributes still trace, the same ones again and again', () => {
    const model = graph((g, [x]) => {
      const t = g.call(transposeOp, [x!], { dim0: 1, dim1: 2 })[0]!;
      const p = g.call(permuteOp, [t], { dims: [0, 2, 1] })[0]!;
      const v = g.call(viewOp, [p], { shape: [2, 12] })[0]!;
      return g.call(softmaxOp, [v], { dim: -1 })[0]!;
    });
    for (let i = 0; i < 3; i += 1) expect(estimate(model, { input: [2, 3, 4], loss: 'none' }).modules[0]?.outputShape).toEqual([2, 12]);
  });
});
