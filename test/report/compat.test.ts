import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  adaptiveAvgPool2d,
  bn,
  conv2d,
  dropout,
  flatten,
  gelu,
  hardswish,
  linear,
  maxPool2d,
  mobilenetV3Large,
  mobilenetV3Small,
  relu,
  relu6,
  seq,
  sigmoid,
  silu,
  summary,
  tanh,
  type Layer,
  type TorchinfoColumn,
} from '../../src/index.js';

interface CompatCase {
  readonly id: string;
  readonly tool: 'torchsummary' | 'torchsummary@1.5.1' | 'torchinfo';
  readonly model: { readonly name: string; readonly numClasses: number; readonly widthMult: number | null; readonly wrapped: boolean };
  readonly inputSize: readonly number[];
  readonly call: { readonly batch_size?: number; readonly depth?: number; readonly col_names?: readonly TorchinfoColumn[] };
  readonly file: string;
}

const fixtures = new URL('../fixtures/compat/', import.meta.url);
const index = JSON.parse(readFileSync(new URL('index.json', fixtures), 'utf8')) as { cases: readonly CompatCase[] };

const tinyConv = () =>
  seq(
    conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }),
    bn(),
    hardswish({ inplace: true }),
    conv2d({ out: 8, kernel: 1 }),
    relu({ inplace: true }),
    adaptiveAvgPool2d(),
    flatten(),
    linear({ out: 10 }),
  );
const shared = linear({ out: 16 });

/** The fixtures' models, built with vram-ts (index.json gives each PyTorch definition). */
function model(c: CompatCase): { layer: Layer; freeze?: readonly string[] } {
  const { name, numClasses, widthMult } = c.model;
  switch (name) {
    case 'mobilenet_v3_small':
      return { layer: mobilenetV3Small({ numClasses, widthMult: widthMult ?? 1 }) };
    case 'mobilenet_v3_large':
      return { layer: mobilenetV3Large({ numClasses, widthMult: widthMult ?? 1 }) };
    case 'tiny_conv':
      return { layer: tinyConv() };
    case 'tiny_frozen':
      return { layer: tinyConv(), freeze: ['0', '1'] };
    case 'tiny_mixed':
      return {
        layer: seq(
          conv2d({ out: 8, kernel: 3, padding: 1 }),
          relu6({ inplace: true }),
          maxPool2d({ kernel: 2 }),
          conv2d({ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }),
          bn(),
          silu({ inplace: true }),
          dropout({ p: 0.5 }),
          conv2d({ out: 4, kernel: 1 }),
          sigmoid(),
          flatten(),
          linear({ out: 32 }),
          tanh(),
          linear({ out: 5 }),
          gelu(),
        ),
      };
    case 'tiny_shared':
      return { layer: seq(flatten(), linear({ out: 16 }), relu(), shared, relu(), shared) };
    case 'f32_conv':
      return { layer: seq(conv2d({ out: 8, kernel: 1 })) };
    case 'tie_linear_ts':
    case 'tie_linear_ti':
      return { layer: seq(linear({ out: numClasses })) };
    default:
      throw new Error(`no model for ${name}`);
  }
}

describe('torchsummary and torchinfo text, byte for byte against the real tools (test/fixtures/compat)', () => {
  for (const c of index.cases) {
    it(`${c.id}`, () => {
      const { layer, freeze } = model(c);
      const expected = readFileSync(new URL(c.file, fixtures), 'utf8');
      const base = { ...(freeze ? { freeze } : {}) };
      let text: string;
      if (c.tool === 'torchinfo') {
        text = summary(layer, {
          ...base,
          input: c.inputSize,
          format: 'torchinfo',
          torchinfo: {
            ...(c.call.depth !== undefined ? { depth: c.call.depth } : {}),
            ...(c.call.col_names ? { columns: c.call.col_names } : {}),
            ...(c.model.wrapped ? { wrapper: 'PlantDiseaseClassifier' } : {}),
          },
        });
      } else {
        text = summary(layer, {
          ...base,
          input: [2, ...c.inputSize],
          format: 'torchsummary',
          torchsummary: {
            variant: c.tool === 'torchsummary' ? 'master' : '1.5.1',
            ...(c.model.wrapped ? { wrapper: 'PlantDiseaseClassifier' } : {}),
            ...(c.call.batch_size !== undefined ? { batchSize: c.call.batch_size } : {}),
          },
        });
      }
      expect(text).toBe(expected);
    });
  }
});

describe("the user's reference files (../shared/reference, copied to test/fixtures/reference)", () => {
  const ref = (file: string) => readFileSync(new URL(`../fixtures/reference/${file}`, import.meta.url), 'utf8');
  const small3 = mobilenetV3Small({ numClasses: 3 });
  it('torchsummary at 224×224', () => {
    expect(summary(small3, { input: [1, 3, 224, 224], format: 'torchsummary' })).toBe(ref('torchsummary_mobilenet_v3_small_3cls_224x224.txt'));
  });
  it('torchsummary at 4000×2672 (7357.33 / 7485.44 MB)', () => {
    const text = summary(small3, { input: [1, 3, 4000, 2672], format: 'torchsummary' });
    expect(text).toBe(ref('torchsummary_mobilenet_v3_small_3cls_4000x2672.txt'));
    expect(text).toContain('Forward/backward pass size (MB): 7357.33');
    expect(text).toContain('Estimated Total Size (MB): 7485.44');
  });
  it('torchinfo at 1×3×224×224', () => {
    expect(summary(small3, { input: [1, 3, 224, 224], format: 'torchinfo' })).toBe(ref('torchinfo_mobilenet_v3_small_3cls_1x3x224x224.txt'));
  });
});
