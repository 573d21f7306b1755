/**
 * Type tests of the public API (vitest typecheck: `expectTypeOf` is checked by the compiler,
 * so a wrong signature fails `npm test`, not only at run time).
 */
import { describe, expectTypeOf, it } from 'vitest';
import {
  bn,
  conv2d,
  estimate,
  evaluate,
  fits,
  hardswish,
  kvCache,
  llm,
  maxFitting,
  mobilenetV3Small,
  seq,
  summary,
  sym,
  tensor,
  type VramError,
  type Dim,
  type DType,
  type Estimate,
  type Expr,
  type Layer,
  type SeqLayer,
  type VramIssue,
} from '../src/index.js';

const model = mobilenetV3Small({ numClasses: 3 });

describe('estimate', () => {
  it('gives numbers for an all-number input shape, no narrowing needed', () => {
    const r = estimate(model, { input: [1, 3, 224, 224] });
    expectTypeOf(r).toEqualTypeOf<Estimate<number>>();
    expectTypeOf(r.bytes.activations).toEqualTypeOf<number>();
    expectTypeOf(r.bytes.peak).toEqualTypeOf<number>();
    expectTypeOf(r.params.total).toEqualTypeOf<number>();
  });

  it('gives a Dim (number or Expr) when the input has a symbol', () => {
    const r = estimate(model, { input: [sym('B'), 3, 224, 224] });
    expectTypeOf(r.bytes.activations).toEqualTypeOf<Dim>();
    expectTypeOf(evaluate(r.bytes.activations, { B: 2 })).toEqualTypeOf<number>();
  });

  it('takes only known modes, precisions and optimizers', () => {
    // @ts-expect-error not a mode
    estimate(model, { input: [1, 3, 224, 224], mode: 'training' });
    // @ts-expect-error not a precision
    estimate(model, { input: [1, 3, 224, 224], precision: 'fp8' });
    // @ts-expect-error not an optimizer
    estimate(model, { input: [1, 3, 224, 224], optimizer: 'adamax' });
    // @ts-expect-error the input is required
    estimate(model, { mode: 'train' });
  });
});

describe('builders', () => {
  it('compose into layers', () => {
    expectTypeOf(seq(conv2d({ out: 16, kernel: 3 }), bn(), hardswish())).toEqualTypeOf<SeqLayer>();
    expectTypeOf(seq(conv2d({ out: 16, kernel: 3 }))).toMatchTypeOf<Layer>();
    // @ts-expect-error conv2d needs its output channels
    conv2d({ kernel: 3 });
  });

  it('seq takes its options as a first argument', () => {
    expectTypeOf(seq({ name: 'features', className: 'Features', isSequential: false }, bn())).toEqualTypeOf<SeqLayer>();
    // @ts-expect-error not an option of seq
    seq({ nmae: 'features' }, bn());
  });

  it('type dtypes as a closed set', () => {
    expectTypeOf<'nf4'>().toMatchTypeOf<DType>();
    expectTypeOf<'float8_e4m3'>().toMatchTypeOf<DType>();
    // @ts-expect-error not a dtype
    tensor([1, 3], 'float12');
  });
});

describe('symbols', () => {
  it('sym makes an Expr and evaluate a number', () => {
    expectTypeOf(sym('B', { min: 1, max: 64, multipleOf: 8 })).toEqualTypeOf<Expr>();
    expectTypeOf(evaluate).parameter(1).toEqualTypeOf<Readonly<Record<string, number>>>();
  });
});

describe('fitting, reports and LLMs', () => {
  it('return plain values', () => {
    expectTypeOf(maxFitting(model, 'B', { input: [sym('B'), 3, 224, 224], gpu: 'A100-80GB' })).toEqualTypeOf<number>();
    expectTypeOf(fits(model, { input: [1, 3, 224, 224], gpu: 'T4' }).fits).toEqualTypeOf<boolean>();
    expectTypeOf(summary(model, { input: [1, 3, 224, 224], format: 'torchsummary' })).toEqualTypeOf<string>();
    expectTypeOf(kvCache(llm('llama-3-8b'), { batch: 1, seq: 4096 })).toEqualTypeOf<number>();
    expectTypeOf(kvCache(llm('llama-3-8b'), { batch: 1, seq: sym('S') })).toEqualTypeOf<Dim>();
  });

  it('VramError carries issues with paths', () => {
    expectTypeOf<VramError>().toMatchTypeOf<Error>();
    expectTypeOf<VramError['issues']>().toEqualTypeOf<readonly VramIssue[]>();
    expectTypeOf<VramIssue['path']>().toEqualTypeOf<readonly (string | number)[]>();
  });
});
