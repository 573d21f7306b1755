import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { VramError, add, bounds, ceilDiv, evaluate, floorDiv, formatDim, max, mul, product, sub, substitute, sum, sym } from '../../src/index.js';

const B = sym('B');
const H = sym('H');
const W = sym('W');

describe('sym', () => {
  it('prints a canonical polynomial a person can read', () => {
    expect(String(add(mul(mul(mul(B, H), W), 1536), 4096))).toBe('1536·B·H·W + 4096');
    expect(String(sub(H, 2))).toBe('H - 2');
    expect(formatDim(mul(sym('S'), sym('S')))).toBe('S²');
  });

  it('is canonical: equal polynomials have equal keys whatever the order of construction', () => {
    const a = add(mul(B, H), mul(H, B));
    const b = mul(2, mul(H, B));
    expect(typeof a === 'object' && typeof b === 'object' && a.key === b.key).toBe(true);
    expect(sub(mul(B, H), mul(H, B))).toBe(0);
  });

  it('collapses chains of stride-2 convolutions into one floor', () => {
    let h: ReturnType<typeof add> = H;
    for (let i = 0; i < 5; i += 1) h = add(floorDiv(sub(h, 1), 2), 1); // k=3, p=1, s=2
    expect(String(h)).toBe('⌊(H + 31)/32⌋');
    expect(evaluate(h, { H: 4000 })).toBe(125);
  });

  it('keeps exact integers and refuses results past 2^53', () => {
    expect(evaluate(mul(B, 2 ** 40), { B: 4096 })).toBe(2 ** 52);
    expect(() => evaluate(mul(B, 2 ** 40), { B: 2 ** 14 })).toThrow(VramError);
    expect(() => mul(2 ** 40, 2 ** 20)).toThrow(VramError);
  });

  it('checks assumptions and missing symbols when evaluating', () => {
    const S = sym('S', { min: 16, max: 4096, multipleOf: 16 });
    expect(evaluate(mul(S, 2), { S: 32 })).toBe(64);
    expect(() => evaluate(S, { S: 8 })).toThrow(VramError);
    expect(() => evaluate(S, { S: 33 })).toThrow(/multiple of 16/);
    expect(() => evaluate(S, {})).toThrow(/no value for symbol S/);
    expect(bounds(S)).toEqual({ min: 16, max: 4096 });
  });

  it('rejects bad names and assumptions', () => {
    expect(() => sym('1x')).toThrow(VramError);
    expect(() => sym('B', { min: 0 })).toThrow(VramError);
    expect(() => floorDiv(B, 0)).toThrow(VramError);
  });

  it('drops dominated arguments of max', () => {
    expect(String(max(mul(B, 3), mul(B, 2), 3))).toBe('3·B');
    expect(String(max(H, W))).toBe('max(H, W)');
    expect(evaluate(max(H, W), { H: 3, W: 9 })).toBe(9);
  });

  it('substitutes some symbols and re-canonicalises', () => {
    expect(String(substitute(mul(B, add(H, 1)), { H: 4 }))).toBe('5·B');
    expect(substitute(floorDiv(H, 4), { H: 9 })).toBe(2);
  });
});

const dims = fc.record({ B: fc.integer({ min: 1, max: 64 }), H: fc.integer({ min: 1, max: 5000 }), W: fc.integer({ min: 1, max: 5000 }) });

/** Random expressions together with their meaning as a JS function. */
type Gen = { expr: ReturnType<typeof add>; value: (e: { B: number; H: number; W: number }) => number };
const leaf = fc.oneof(
  fc.constantFrom<Gen>({ expr: B, value: (e) => e.B }, { expr: H, value: (e) => e.H }, { expr: W, value: (e) => e.W }),
  fc.integer({ min: -20, max: 20 }).map((n): Gen => ({ expr: n, value: () => n })),
);
const { expr: exprArb } = fc.letrec<{ expr: Gen }>((tie) => ({
  expr: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.tuple(tie('expr'), tie('expr')).map(([a, b]): Gen => ({ expr: add(a.expr, b.expr), value: (e) => a.value(e) + b.value(e) })),
    fc.tuple(tie('expr'), leaf).map(([a, b]): Gen => ({ expr: mul(a.expr, b.expr), value: (e) => a.value(e) * b.value(e) })),
    fc.tuple(tie('expr'), fc.integer({ min: 1, max: 7 })).map(([a, k]): Gen => ({ expr: floorDiv(a.expr, k), value: (e) => Math.floor(a.value(e) / k) })),
    fc.tuple(tie('expr'), fc.integer({ min: 1, max: 7 })).map(([a, k]): Gen => ({ expr: ceilDiv(a.expr, k), value: (e) => Math.ceil(a.value(e) / k) })),
    fc.tuple(tie('expr'), tie('expr')).map(([a, b]): Gen => ({ expr: max(a.expr, b.expr), value: (e) => Math.max(a.value(e), b.value(e)) })),
  ),
}));

describe('sym laws', () => {
  it('evaluate agrees with plain arithmetic for any expression built from the operations', () => {
    fc.assert(fc.property(exprArb, dims, (g, env) => evaluate(g.expr, env) === g.value(env)));
  });

  it('bounds contain every value', () => {
    fc.assert(
      fc.property(exprArb, dims, (g, env) => {
        const { min, max: hi } = bounds(g.expr);
        const v = evaluate(g.expr, env);
        return v >= min && v <= hi;
      }),
    );
  });

  it('substituting all symbols gives the evaluated number', () => {
    fc.assert(fc.property(exprArb, dims, (g, env) => substitute(g.expr, env) === evaluate(g.expr, env)));
  });

  it('sum and product agree with folding add and mul', () => {
    const small = fc.record({ B: fc.integer({ min: 1, max: 8 }), H: fc.integer({ min: 1, max: 40 }), W: fc.integer({ min: 1, max: 40 }) });
    fc.assert(
      fc.property(fc.array(exprArb, { maxLength: 3 }), small, (gs, env) => {
        const s = sum(gs.map((g) => g.expr));
        const p = product(gs.map((g) => g.expr));
        return evaluate(s, env) === gs.reduce((a, g) => a + g.value(env), 0) && evaluate(p, env) === gs.reduce((a, g) => a * g.value(env), 1);
      }),
    );
  });
});
