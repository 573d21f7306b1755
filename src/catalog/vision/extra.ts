/**
 * The vision catalog's families kept in their own files (EfficientNetV2, ConvNeXt, Swin), reached
 * through {@link vision} by their torchvision names.
 */
import { fail } from '../../errors.js';
import type { VisionFamily, VisionOptions } from './options.js';
import { buildConvNeXt, CONVNEXT_MODELS, convNeXtStochasticDepth } from './convnext.js';
import { buildEfficientNetV2, EFFICIENTNET_V2_MODELS, efficientNetV2Dropout } from './efficientnetv2.js';
import { buildSwin, SWIN_MODELS, swinStochasticDepth } from './swin.js';

function numClasses(options: VisionOptions): number {
  const n = options.numClasses ?? 1000;
  if (!Number.isSafeInteger(n) || n < 1)
    fail('bad-option', 'numClasses must be an integer >= 1', {
      path: ['vision', 'numClasses'],
      expected: 'an integer >= 1',
      received: String(options.numClasses),
    });
  if (options.imageSize !== undefined) fail('bad-option', 'only ViTs take an imageSize', { path: ['vision', 'imageSize'] });
  return n;
}

function probability(key: 'dropout' | 'stochasticDepthProb', value: number): number {
  if (typeof value !== 'number' || !(value >= 0 && value <= 1))
    fail('bad-option', `${key} must be in [0, 1]`, { path: ['vision', key], expected: '0 <= p <= 1', received: String(value) });
  return value;
}

/** The families kept here, each with its names (in catalog order) and builder. */
export const EXTRA_VISION: readonly VisionFamily[] = [
  {
    names: EFFICIENTNET_V2_MODELS,
    build: (name, options) =>
      buildEfficientNetV2(
        name,
        numClasses(options),
        probability('dropout', options.dropout ?? efficientNetV2Dropout(name)),
        probability('stochasticDepthProb', options.stochasticDepthProb ?? 0.2),
      ),
  },
  {
    names: CONVNEXT_MODELS,
    build: (name, options) => {
      const n = numClasses(options);
      if (options.dropout !== undefined) fail('bad-option', 'ConvNeXt takes no dropout', { path: ['vision', 'dropout'] });
      return buildConvNeXt(name, n, probability('stochasticDepthProb', options.stochasticDepthProb ?? convNeXtStochasticDepth(name)));
    },
  },
  {
    names: SWIN_MODELS,
    build: (name, options) => {
      const n = numClasses(options);
      if (options.dropout !== undefined) fail('bad-option', 'Swin takes no dropout here', { path: ['vision', 'dropout'] });
      return buildSwin(name, n, probability('stochasticDepthProb', options.stochasticDepthProb ?? swinStochasticDepth(name)));
    },
  },
];
