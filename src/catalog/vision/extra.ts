/**
 * The vision catalog's families kept in their own files (EfficientNetV2, ConvNeXt), reached
 * through {@link vision} by their torchvision names.
 */
import { fail } from '../../errors.js';
import type { SeqLayer } from '../../nn/types.js';
import type { VisionOptions } from './options.js';
import { buildConvNeXt, CONVNEXT_MODELS, convNeXtStochasticDepth } from './convnext.js';
import { buildEfficientNetV2, EFFICIENTNET_V2_MODELS, efficientNetV2Dropout } from './efficientnetv2.js';
import { buildSwin, SWIN_MODELS, swinStochasticDepth } from './swin.js';

/** The names built here. */
export const EXTRA_VISION_MODELS: readonly string[] = Object.freeze([...EFFICIENTNET_V2_MODELS, ...CONVNEXT_MODELS, ...SWIN_MODELS]);

function probability(key: 'dropout' | 'stochasticDepthProb', value: number): number {
  if (typeof value !== 'number' || !(value >= 0 && value <= 1)) fail('bad-option', `${key} must be in [0, 1]`, { path: ['vision', key], expected: '0 <= p <= 1', received: String(value) });
  return value;
}

/** The model of a family kept here, or undefined for a name this file does not build. */
export function visionExtra(name: string, options: VisionOptions): SeqLayer | undefined {
  if (!EXTRA_VISION_MODELS.includes(name)) return undefined;
  const numClasses = options.numClasses ?? 1000;
  if (!Number.isSafeInteger(numClasses) || numClasses < 1) fail('bad-option', 'numClasses must be an integer >= 1', { path: ['vision', 'numClasses'], expected: 'an integer >= 1', received: String(options.numClasses) });
  if (options.imageSize !== undefined) fail('bad-option', 'only ViTs take an imageSize', { path: ['vision', 'imageSize'] });
  if (EFFICIENTNET_V2_MODELS.includes(name)) {
    return buildEfficientNetV2(name, numClasses, probability('dropout', options.dropout ?? efficientNetV2Dropout(name)), probability('stochasticDepthProb', options.stochasticDepthProb ?? 0.2));
  }
  if (CONVNEXT_MODELS.includes(name)) {
    if (options.dropout !== undefined) fail('bad-option', 'ConvNeXt takes no dropout', { path: ['vision', 'dropout'] });
    return buildConvNeXt(name, numClasses, probability('stochasticDepthProb', options.stochasticDepthProb ?? convNeXtStochasticDepth(name)));
  }
  if (SWIN_MODELS.includes(name)) {
    if (options.dropout !== undefined) fail('bad-option', 'Swin takes no dropout here', { path: ['vision', 'dropout'] });
    return buildSwin(name, numClasses, probability('stochasticDepthProb', options.stochasticDepthProb ?? swinStochasticDepth(name)));
  }
  return undefined;
}
