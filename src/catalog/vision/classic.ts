import { fail } from '../../errors.js';
import type { SeqLayer } from '../../nn/types.js';
import { mobilenetV3Large, mobilenetV3Small } from '../mobilenetv3.js';
import { buildDenseNet } from './densenet.js';
import { buildMobileNetV2 } from './mobilenetv2.js';
import { buildRegNetY, REGNET_Y } from './regnet.js';
import { buildSqueezeNet11 } from './squeezenet.js';
import { buildVggBn } from './vgg.js';
import type { VisionFamily, VisionOptions } from './options.js';

/** A catalog entry: its builder and its default classifier dropout (null: the model takes none). */
export interface ClassicVisionModel {
  readonly dropout: number | null;
  readonly build: (numClasses: number, dropout: number) => SeqLayer;
}

const regnets = Object.fromEntries(Object.entries(REGNET_Y).map(([name, stages]) => [name, { dropout: null, build: (n: number) => buildRegNetY(stages, n) }]));

/**
 * The torchvision classifiers of src/catalog/vision/ that {@link vision} reaches by name:
 * MobileNetV2/V3, SqueezeNet 1.1, VGG-BN, DenseNet-121 and RegNetY.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('vgg16_bn', { numClasses: 10 }), { input: [1, 3, 64, 64] }).params.total); // 134309962
 * ```
 */
export const CLASSIC_VISION: Readonly<Record<string, ClassicVisionModel>> = Object.freeze({
  mobilenet_v2: { dropout: 0.2, build: (n, p) => buildMobileNetV2(n, p) },
  mobilenet_v3_small: { dropout: 0.2, build: (n, p) => mobilenetV3Small({ numClasses: n, dropout: p }) },
  mobilenet_v3_large: { dropout: 0.2, build: (n, p) => mobilenetV3Large({ numClasses: n, dropout: p }) },
  squeezenet1_1: { dropout: 0.5, build: (n, p) => buildSqueezeNet11(n, p) },
  vgg11_bn: { dropout: 0.5, build: (n, p) => buildVggBn('A', n, p) },
  vgg13_bn: { dropout: 0.5, build: (n, p) => buildVggBn('B', n, p) },
  vgg16_bn: { dropout: 0.5, build: (n, p) => buildVggBn('D', n, p) },
  vgg19_bn: { dropout: 0.5, build: (n, p) => buildVggBn('E', n, p) },
  densenet121: { dropout: null, build: (n) => buildDenseNet([6, 12, 24, 16], 32, 64, n) },
  ...regnets,
});

/**
 * {@link vision} for the models of {@link CLASSIC_VISION}: takes `numClasses` and, where
 * torchvision's constructor does, `dropout`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('squeezenet1_1', { numClasses: 10, dropout: 0.1 }), { input: [1, 3, 64, 64] }).params.total); // 727626
 * ```
 */
function visionClassic(name: string, options: VisionOptions): SeqLayer {
  const entry = CLASSIC_VISION[name]!;
  const numClasses = options.numClasses ?? 1000;
  if (!Number.isSafeInteger(numClasses) || numClasses < 1)
    fail('bad-option', 'numClasses must be an integer >= 1', {
      path: ['vision', 'numClasses'],
      expected: 'an integer >= 1',
      received: String(options.numClasses),
    });
  for (const key of ['stochasticDepthProb', 'imageSize'] as const) {
    if (options[key] !== undefined) fail('bad-option', `${name} takes no ${key}`, { path: ['vision', key] });
  }
  if (entry.dropout === null && options.dropout !== undefined) fail('bad-option', `${name} takes no dropout`, { path: ['vision', 'dropout'] });
  const p = options.dropout ?? entry.dropout ?? 0;
  if (typeof p !== 'number' || !(p >= 0 && p <= 1))
    fail('bad-option', 'dropout must be in [0, 1]', { path: ['vision', 'dropout'], expected: '0 <= p <= 1', received: String(p) });
  return entry.build(numClasses, p);
}

/** {@link CLASSIC_VISION} as one family of the vision catalog, its names in catalog order. */
export const CLASSIC_VISION_FAMILY: VisionFamily = { names: /* @__PURE__ */ Object.freeze(/* @__PURE__ */ Object.keys(CLASSIC_VISION)), build: visionClassic };
