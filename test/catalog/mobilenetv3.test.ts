import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { estimate, mobilenetV3Large, mobilenetV3Small, VramError } from '../../src/index.js';
import { makeDivisible } from '../../src/internals.js';

interface ReferenceRow {
  readonly model: 'mobilenet_v3_small' | 'mobilenet_v3_large';
  readonly numClasses: number;
  readonly params?: number;
  readonly input?: readonly number[];
  readonly savedBytes?: number;
}

const reference = JSON.parse(readFileSync(new URL('../fixtures/reference/pytorch_reference.json', import.meta.url), 'utf8')) as {
  mobilenet_v3: readonly ReferenceRow[];
};
const build = (row: ReferenceRow) => (row.model === 'mobilenet_v3_small' ? mobilenetV3Small : mobilenetV3Large)({ numClasses: row.numClasses });

describe('MobileNetV3 catalog against torchvision (pytorch_reference.json)', () => {
  it('has the exact parameter counts', () => {
    expect(estimate(mobilenetV3Small(), { input: [1, 3, 224, 224] }).params.total).toBe(2_542_856);
    expect(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }).params.total).toBe(1_520_931);
    expect(estimate(mobilenetV3Large(), { input: [1, 3, 224, 224] }).params.total).toBe(5_483_032);
    expect(estimate(mobilenetV3Large({ numClasses: 3 }), { input: [1, 3, 224, 224] }).params.total).toBe(4_205_875);
    for (const row of reference.mobilenet_v3.filter((r) => r.params !== undefined)) {
      expect(estimate(build(row), { input: [1, 3, 224, 224] }).params.total).toBe(row.params);
    }
  });

  for (const row of reference.mobilenet_v3.filter((r) => r.savedBytes !== undefined)) {
    it(`keeps what autograd keeps: ${row.model} ${row.numClasses} classes ${row.input!.join('x')} within 1%`, () => {
      const saved = estimate(build(row), { input: row.input!, device: 'cpu', framework: 'torch-1.13' }).bytes.activations as number;
      expect(Math.abs(saved - row.savedBytes!) / row.savedBytes!).toBeLessThanOrEqual(0.01);
    });
  }

  it('explains the seed: 3,461,925,408 bytes kept for backward at 3×4000×2672 on PyTorch 1.13', () => {
    const r = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672], device: 'cpu', framework: 'torch-1.13' });
    expect(r.bytes.activations).toBe(3_461_925_408);
    expect(r.bytes.parameters).toBe(1_520_931 * 4);
    expect(r.bytes.input).toBe(3 * 4000 * 2672 * 4);
  });

  it('and what PyTorch 2.x keeps on CUDA (its global pooling is a mean that keeps only sizes)', () => {
    const measured = JSON.parse(readFileSync(new URL('../fixtures/cuda/mnv3s_3cls_b1_4000x2672_train.json', import.meta.url), 'utf8')) as {
      saved: { bytes: number };
    };
    const r = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672] });
    expect(r.bytes.activations).toBe(measured.saved.bytes);
    expect(measured.saved.bytes).toBe(3_461_925_408 - 576 * 125 * 84 * 4);
  });

  it("mirrors torchvision's module tree", () => {
    const paths = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }).modules.map((m) => `${m.path.join('.')}:${m.className}`);
    expect(paths.slice(0, 4)).toEqual([':MobileNetV3', 'features:Sequential', 'features.0:Conv2dNormActivation', 'features.0.0:Conv2d']);
    expect(paths).toContain('features.1.block.1:SqueezeExcitation');
    expect(paths).toContain('features.1.block.1.scale_activation:Hardsigmoid');
    expect(paths).toContain('features.4.block.0.2:Hardswish');
    expect(paths.slice(-6)).toEqual([
      'avgpool:AdaptiveAvgPool2d',
      'classifier:Sequential',
      'classifier.0:Linear',
      'classifier.1:Hardswish',
      'classifier.2:Dropout',
      'classifier.3:Linear',
    ]);
  });

  it("applies torchvision's width multiplier rounding", () => {
    expect(makeDivisible(16 * 0.75)).toBe(16);
    expect(makeDivisible(72 * 0.75)).toBe(56);
    expect(makeDivisible(88 * 0.75)).toBe(64);
    expect(() => mobilenetV3Small({ widthMult: 0 })).toThrow(VramError);
    expect(() => mobilenetV3Small({ numClasses: 1.5 })).toThrow(VramError);
  });

  it('saves nothing in inference and less in eval mode (no batch statistics, dropout off)', () => {
    const model = mobilenetV3Small({ numClasses: 3 });
    expect(estimate(model, { input: [2, 3, 224, 224], mode: 'inference' }).bytes.activations).toBe(0);
    const train = estimate(model, { input: [2, 3, 224, 224] }).bytes.activations as number;
    const evalMode = estimate(model, { input: [2, 3, 224, 224], moduleMode: 'eval' }).bytes.activations as number;
    expect(evalMode).toBeLessThan(train);
  });
});
