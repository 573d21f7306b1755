/**
 * Laws of issue 14's builder pieces (property-based): ceil-mode pooling is torch's
 * pooling_output_shape; inline residuals and branches change module paths only; a downsample
 * after the body keeps what a shortcut before it does; stochastic depth keeps one float per
 * sample; symbolic sizes evaluate to the concrete estimate (ceil mode, the strided 1×1 scratchpad).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  bn,
  branch,
  conv1d,
  conv2d,
  convTranspose2d,
  estimate,
  evaluate,
  layerNorm2d,
  maxPool2d,
  multiheadAttention,
  parameter,
  relu,
  residual,
  seq,
  stochasticDepth,
  sym,
  upsample,
  type Estimate,
  type Layer,
} from '../../src/index.js';
import { poolOutput } from '../../src/internals.js';
import { fire, mbconv, resnetBlock } from '../helpers/layer-spec.js';

/** torch's pooling_output_shape (aten/src/ATen/native/Pool.h), written as PyTorch does. */
function torchPoolOutput(size: number, kernel: number, stride: number, pad: number, dilation: number, ceil: boolean): number {
  const numerator = size + 2 * pad - dilation * (kernel - 1) - 1 + (ceil ? stride - 1 : 0);
  let out = Math.floor(numerator / stride) + 1;
  if (ceil && (out - 1) * stride >= size + pad) out -= 1;
  return out;
}

const figures = (r: Estimate) => {
  const { peak, ...bytes } = r.bytes;
  void peak;
  return { params: r.params, bytes };
};

describe('vision builder laws (property-based)', () => {
  it("ceil-mode and floor-mode pooling lengths are torch's pooling_output_shape, numeric and symbolic", () => {
    const H = sym('H');
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 7 }),
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 60 }),
        fc.boolean(),
        fc.nat(),
        (kernel, stride, dilation, extra, ceil, padSeed) => {
          const pad = padSeed % (Math.floor(kernel / 2) + 1);
          const size = dilation * (kernel - 1) + 1 - 2 * pad + extra;
          fc.pre(size >= 1);
          expect(poolOutput(size, kernel, stride, pad, dilation, ceil)).toBe(torchPoolOutput(size, kernel, stride, pad, dilation, ceil));
          expect(evaluate(poolOutput(H, kernel, stride, pad, dilation, ceil), { H: size })).toBe(torchPoolOutput(size, kernel, stride, pad, dilation, ceil));
        },
      ),
      { numRuns: 400 },
    );
  });

  it('an inline residual or branch changes module paths only, not the memory figures', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 4, max: 12 }),
        fc.integer({ min: 1, max: 4 }),
        fc.constantFrom('cuda', 'cpu') as fc.Arbitrary<'cuda' | 'cpu'>,
        (b, hw, c, device) => {
          const body = () =>
            seq(
              conv2d({ out: 8 * c, kernel: 3, padding: 1, bias: false }),
              bn(),
              relu({ inplace: true }),
              conv2d({ out: 8 * c, kernel: 3, padding: 1, bias: false }),
              bn(),
            );
          const input = [b, 8 * c, hw, hw];
          const plain = estimate(seq(residual(body(), { inplace: true })), { input, device });
          const inline = estimate(seq(residual(body(), { inplace: true, inline: true })), { input, device });
          expect(figures(inline)).toEqual(figures(plain));
          const paths = () => [
            seq(conv2d({ out: 4, kernel: 1 }), relu({ inplace: true })),
            seq(conv2d({ out: 4, kernel: 3, padding: 1 }), relu({ inplace: true })),
          ];
          const a = estimate(seq(branch(paths(), { merge: 'concat' })), { input, device });
          const i = estimate(seq(branch(paths(), { merge: 'concat', inline: true })), { input, device });
          expect(figures(i)).toEqual(figures(a));
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a downsample after the body saves and holds what the same projection before it does', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 4, max: 14 }), fc.constantFrom(1, 2), (b, hw, stride) => {
        const body = () =>
          seq(
            conv2d({ out: 16, kernel: 3, stride, padding: 1, bias: false }),
            bn(),
            relu({ inplace: true }),
            conv2d({ out: 16, kernel: 3, padding: 1, bias: false }),
            bn(),
          );
        const projection = () => seq({ name: 'downsample' }, conv2d({ out: 16, kernel: 1, stride, bias: false }), bn());
        const input = [b, 8, hw, hw];
        const after = estimate(seq(residual(body(), { inplace: true, downsample: projection() })), { input, device: 'cpu' });
        const before = estimate(seq(residual(body(), { inplace: true, shortcut: projection() })), { input, device: 'cpu' });
        expect(after.params).toEqual(before.params);
        expect(after.bytes.activations).toBe(before.bytes.activations);
      }),
      { numRuns: 40 },
    );
  });

  it('stochastic depth keeps one value per sample (row) or one (batch) in training, nothing in eval', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 9 }), fc.integer({ min: 1, max: 6 }), fc.double({ min: 0.01, max: 1, noNaN: true }), (b, c, p) => {
        const input = [b, c, 5, 5];
        expect(estimate(stochasticDepth({ p }), { input, inputRequiresGrad: true }).bytes.activations).toBe(4 * b);
        expect(estimate(stochasticDepth({ p, mode: 'batch' }), { input, inputRequiresGrad: true }).bytes.activations).toBe(4);
        expect(estimate(stochasticDepth({ p }), { input, inputRequiresGrad: true, moduleMode: 'eval' }).bytes.activations).toBe(0);
      }),
      { numRuns: 40 },
    );
  });

  it('symbolic B, H, W evaluate to the concrete estimate for torchvision blocks (CPU oneDNN paths, ceil-mode pooling)', () => {
    const models: Layer[] = [
      seq(resnetBlock('basicblock', '0', 16, { out: 32, stride: 2 }).layer, resnetBlock('bottleneck', '1', 32, { planes: 8, stride: 2 }).layer),
      seq(
        maxPool2d({ kernel: 3, stride: 2, ceilMode: true }),
        fire('1', { squeeze: 8, expand1x1: 8, expand3x3: 8 }),
        maxPool2d({ kernel: 2, stride: 3, ceilMode: true }),
      ),
      seq(mbconv('0', 16, { expandRatio: 6, kernel: 5, stride: 2, out: 24 }), mbconv('1', 24, { expandRatio: 6, kernel: 3, stride: 1, out: 24, sdProb: 0.2 })),
    ];
    const symbolic = models.map((model) => ({
      model,
      bytes: estimate(model, { input: [sym('B'), 16, sym('H'), sym('W')], device: 'cpu', framework: 'torch-1.13' }).bytes,
    }));
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: symbolic.length - 1 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 9, max: 40 }),
        fc.integer({ min: 9, max: 40 }),
        (which, b, h, w) => {
          const { model, bytes } = symbolic[which]!;
          const concrete = estimate(model, { input: [b, 16, h, w], device: 'cpu', framework: 'torch-1.13' }).bytes;
          const env = { B: b, H: h, W: w };
          for (const key of Object.keys(concrete) as Exclude<keyof typeof concrete, 'reserved'>[]) expect(evaluate(bytes[key], env), key).toBe(concrete[key]);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('conv1d is conv2d over a height of 1: same figures', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 8, max: 60 }),
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 2 }),
        fc.constantFrom('cuda', 'cpu') as fc.Arbitrary<'cuda' | 'cpu'>,
        (n, c, l, k, s, p, device) => {
          const one = estimate(conv1d({ out: 8, kernel: k, stride: s, padding: p }), { input: [n, c, l], device, inputRequiresGrad: true });
          const two = estimate(conv2d({ out: 8, kernel: [1, k], stride: [1, s], padding: [0, p] }), { input: [n, c, 1, l], device, inputRequiresGrad: true });
          expect(figures(one)).toEqual(figures(two));
          expect(one.bytes.peak).toBe(two.bytes.peak);
        },
      ),
      { numRuns: 60 },
    );
  });

  it("a transposed convolution's output is torch's length, and conv2d with the same geometry maps it back", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 3 }),
        fc.nat(),
        fc.nat(),
        (size, k, s, padSeed, opSeed) => {
          const p = padSeed % k;
          const op = opSeed % s;
          const out = (size - 1) * s - 2 * p + (k - 1) + op + 1;
          fc.pre(out >= 1);
          const r = estimate(convTranspose2d({ out: 2, kernel: k, stride: s, padding: p, outputPadding: op }), { input: [1, 3, size, size] });
          expect(r.modules[0]?.outputShape).toEqual([1, 2, out, out]);
          const back = estimate(conv2d({ out: 3, kernel: k, stride: s, padding: p }), { input: [1, 2, out, out] });
          expect(back.modules[0]?.outputShape).toEqual([1, 3, size, size]);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('upsampling keeps nothing for backward and scales the sizes', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 4 }),
        fc.constantFrom('nearest', 'bilinear') as fc.Arbitrary<'nearest' | 'bilinear'>,
        (n, h, w, f, mode) => {
          const r = estimate(upsample({ scaleFactor: f, mode }), { input: [n, 4, h, w], inputRequiresGrad: true });
          expect(r.bytes.activations).toBe(0);
          expect(r.modules[0]?.outputShape).toEqual([n, 4, h * f, w * f]);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('symbolic B, H, W evaluate to the concrete estimate for the decoder and token pieces', () => {
    const models: Layer[] = [
      seq(
        conv2d({ out: 16, kernel: 3, padding: 1 }),
        convTranspose2d({ out: 8, kernel: 2, stride: 2 }),
        upsample({ scaleFactor: 2, mode: 'bilinear' }),
        layerNorm2d(),
      ),
      seq(conv1d({ out: 8, kernel: 3, stride: 2 }), conv1d({ out: 8, kernel: 1 })),
    ];
    const inputs = (b: Dim3, h: Dim3, w: Dim3) =>
      [
        [b, 16, h, w],
        [b, 16, h],
      ] as const;
    type Dim3 = number | ReturnType<typeof sym>;
    const symbolic = models.map(
      (model, i) => estimate(model, { input: [...inputs(sym('B'), sym('H'), sym('W'))[i]!], device: 'cpu', framework: 'torch-1.13' }).bytes,
    );
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: models.length - 1 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 5, max: 30 }),
        fc.integer({ min: 5, max: 30 }),
        (which, b, h, w) => {
          const concrete = estimate(models[which]!, { input: [...inputs(b, h, w)[which]!], device: 'cpu', framework: 'torch-1.13' }).bytes;
          for (const key of Object.keys(concrete) as Exclude<keyof typeof concrete, 'reserved'>[])
            expect(evaluate(symbolic[which]![key], { B: b, H: h, W: w }), key).toBe(concrete[key]);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('multiheadAttention: parameters are 4E² + 4E whatever the heads; a class token adds one position', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 2, max: 12 }),
        fc.boolean(),
        (heads, perHead, n, s, batchFirst) => {
          const e = heads * perHead;
          const attn = multiheadAttention({ embedDim: e, heads, batchFirst, needWeights: false });
          const r = estimate(attn, { input: batchFirst ? [n, s, e] : [s, n, e] });
          expect(r.params.total).toBe(4 * e * e + 4 * e);
          const token = estimate(parameter({ name: 'class_token', shape: [1, 1, e], combine: 'prepend' }), { input: [n, s, e] });
          expect(token.params.total).toBe(e);
          expect(token.modules[0]?.outputShape).toEqual([n, s + 1, e]);
        },
      ),
      { numRuns: 60 },
    );
  });
});
