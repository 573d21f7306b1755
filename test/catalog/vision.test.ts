/**
 * The vision catalog against torchvision 0.14: parameter totals and the module tree (path, class,
 * own parameters) of every model, for 1000 and 10 classes (tools/oracle/vision_params.py →
 * test/fixtures/vision/params.json).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { estimate, VISION_MODELS, vision, VramError } from '../../src/index.js';

interface ParamsFixture {
  readonly models: Readonly<Record<string, { readonly params: number; readonly modules: readonly (readonly [string, string, number])[] }>>;
}
const fixture = JSON.parse(readFileSync(new URL('../fixtures/vision/params.json', import.meta.url), 'utf8')) as ParamsFixture;

describe('vision catalog: torchvision 0.14 module for module', () => {
  it('covers every fixture model', () => {
    expect([...new Set(Object.keys(fixture.models).map((k) => k.split('/')[0]))].sort()).toEqual([...VISION_MODELS].sort());
  });
  for (const [key, torch] of Object.entries(fixture.models)) {
    const [name, classes] = key.split('/') as [string, string];
    it(`${key}: ${torch.params} parameters`, () => {
      const side = name.startsWith('vit_') ? 224 : 64;
      const r = estimate(vision(name, { numClasses: Number(classes) }), { input: [1, 3, side, side], mode: 'inference', device: 'cpu', timeline: false });
      expect(r.params.total).toBe(torch.params);
      const theirs = new Map(torch.modules.map(([path, className, own]) => [path, { className, own }]));
      for (const row of r.modules) {
        const path = row.path.join('.');
        expect(theirs.get(path)?.className, path).toBe(row.className);
        // nn.MultiheadAttention calls its out_proj functionally: its parameters sit on the attention module here.
        const outProj = row.className === 'MultiheadAttention' ? (theirs.get(`${path}.out_proj`)?.own ?? 0) : 0;
        expect(row.ownParams, path).toBe((theirs.get(path)?.own ?? NaN) + outProj);
      }
      // Every module with parameters is ours too (unused parameterless ones, such as the
      // StochasticDepth of an MBConv without a residual, never run).
      const ours = new Set(r.modules.map((row) => row.path.join('.')));
      for (const [path, className, own] of torch.modules)
        if (own > 0 && className !== 'NonDynamicallyQuantizableLinear') expect(ours.has(path), path).toBe(true);
    });
  }
  it('rejects unknown names and options with a VramError naming them', () => {
    expect(() => vision('resnet19')).toThrow(VramError);
    expect(() => vision('resnet18', { dropout: 0.1 })).toThrow(VramError);
    expect(() => vision('efficientnet_b0', { numClasses: 0 })).toThrow(VramError);
    expect(() => vision('efficientnet_b0', { stochasticDepthProb: 2 })).toThrow(VramError);
    expect(() => vision('densenet121', { dropout: 0.1 })).toThrow(VramError);
    expect(() => vision('regnet_y_400mf', { stochasticDepthProb: 0.1 })).toThrow(VramError);
    expect(() => vision('vgg11_bn', { dropout: 1.5 })).toThrow(VramError);
    expect(() => vision('mobilenet_v2', { numClasses: 0 })).toThrow(VramError);
    expect(() => vision('squeezenet1_1', { imageSize: 224 })).toThrow(VramError);
  });
});
