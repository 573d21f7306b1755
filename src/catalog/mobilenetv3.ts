import { adaptiveAvgPool2d } from '../nn/adaptiveAvgPool2d.js';
import { bn } from '../nn/bn.js';
import { conv2d } from '../nn/conv2d.js';
import { dropout } from '../nn/dropout.js';
import { flatten } from '../nn/flatten.js';
import { functional } from '../nn/functional.js';
import { hardswish } from '../nn/hardswish.js';
import { linear } from '../nn/linear.js';
import { module } from '../nn/module.js';
import { relu } from '../nn/relu.js';
import { residual } from '../nn/residual.js';
import { seq } from '../nn/seq.js';
import { squeezeExcitation } from '../nn/squeezeExcitation.js';
import type { Layer, SeqLayer } from '../nn/types.js';
import { probability } from '../nn/block-schema.js';
import { boolean, integer, number, object, validate } from '../validate.js';

/** torchvision's `_mobilenet_v3_conf` and `MobileNetV3.__init__` arguments: classes >= 1, a positive width multiplier, a dropout probability, two flags. */
const MOBILENET_OPTIONS = object({
  fields: { numClasses: integer(1), widthMult: number(Number.MIN_VALUE), dropout: probability, reducedTail: boolean, dilated: boolean },
});

/** Options of the MobileNetV3 builders, as torchvision's constructors take them. */
export interface MobileNetV3Options {
  /** Classifier outputs (default 1000). */
  readonly numClasses?: number;
  /** Channel multiplier (torchvision's `width_mult`, default 1.0). */
  readonly widthMult?: number;
  /** Classifier dropout probability (default 0.2). */
  readonly dropout?: number;
  /** Halve the channels of the last blocks (torchvision's `reduced_tail`). */
  readonly reducedTail?: boolean;
  /** Dilate the last blocks instead of striding (torchvision's `dilated`). */
  readonly dilated?: boolean;
}

/**
 * torchvision's `_make_divisible`: round to a multiple of the divisor, never down by more than 10%.
 *
 * @example
 * ```ts
 * import { makeDivisible } from 'vram-ts/internals';
 * console.log(makeDivisible(72 * 0.75)); // 56
 * ```
 */
export function makeDivisible(value: number, divisor = 8): number {
  let rounded = Math.max(divisor, Math.floor((value + divisor / 2) / divisor) * divisor);
  if (rounded < 0.9 * value) rounded += divisor;
  return rounded;
}

interface BlockConfig {
  readonly input: number;
  readonly kernel: number;
  readonly expanded: number;
  readonly out: number;
  readonly se: boolean;
  readonly hardswish: boolean;
  readonly stride: number;
  readonly dilation: number;
}

type Row = readonly [number, number, number, number, boolean, 'RE' | 'HS', number, number];

function convNormActivation(
  name: string,
  out: number,
  kernel: number,
  options: { stride?: number; groups?: number; dilation?: number; activation: 'hardswish' | 'relu' | null },
): Layer {
  const dilation = options.dilation ?? 1;
  const children: Layer[] = [
    conv2d({
      out,
      kernel,
      stride: options.stride ?? 1,
      padding: Math.floor((kernel - 1) / 2) * dilation,
      dilation,
      groups: options.groups ?? 1,
      bias: false,
    }),
    bn({ eps: 0.001, momentum: 0.01 }),
  ];
  if (options.activation === 'hardswish') children.push(hardswish({ inplace: true }));
  if (options.activation === 'relu') children.push(relu({ inplace: true }));
  return seq({ name, className: 'Conv2dNormActivation' }, ...children);
}

function invertedResidual(name: string, cfg: BlockConfig): Layer {
  const activation = cfg.hardswish ? 'hardswish' : 'relu';
  const layers: Layer[] = [];
  if (cfg.expanded !== cfg.input) layers.push(convNormActivation(String(layers.length), cfg.expanded, 1, { activation }));
  layers.push(
    convNormActivation(String(layers.length), cfg.expanded, cfg.kernel, {
      stride: cfg.dilation > 1 ? 1 : cfg.stride,
      dilation: cfg.dilation,
      groups: cfg.expanded,
      activation,
    }),
  );
  if (cfg.se) {
    layers.push(squeezeExcitation({ name: String(layers.length), squeeze: makeDivisible(Math.floor(cfg.expanded / 4), 8), scaleActivation: 'hardsigmoid' }));
  }
  layers.push(convNormActivation(String(layers.length), cfg.out, 1, { activation: null }));
  const block = seq({ name: 'block' }, ...layers);
  const useResidual = cfg.stride === 1 && cfg.input === cfg.out;
  return module(name, 'InvertedResidual', useResidual ? residual(block, { inplace: true }) : block);
}

function build(rows: readonly Row[], lastChannel: number, options: MobileNetV3Options): SeqLayer {
  const width = options.widthMult ?? 1.0;
  const numClasses = options.numClasses ?? 1000;
  const p = options.dropout ?? 0.2;
  const adjust = (channels: number) => makeDivisible(channels * width, 8);
  const configs: BlockConfig[] = rows.map(([input, kernel, expanded, out, se, act, stride, dilation]) => ({
    input: adjust(input),
    kernel,
    expanded: adjust(expanded),
    out: adjust(out),
    se,
    hardswish: act === 'HS',
    stride,
    dilation,
  }));
  const lastIn = configs[configs.length - 1]!.out;
  const features: Layer[] = [convNormActivation('0', configs[0]!.input, 3, { stride: 2, activation: 'hardswish' })];
  configs.forEach((cfg, i) => {
    features.push(invertedResidual(String(i + 1), cfg));
  });
  features.push(convNormActivation(String(features.length), 6 * lastIn, 1, { activation: 'hardswish' }));
  return seq(
    { className: 'MobileNetV3', isSequential: false },
    seq({ name: 'features' }, ...features),
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    functional(flatten({ startDim: 1 })),
    seq({ name: 'classifier' }, linear({ out: lastChannel }), hardswish({ inplace: true }), dropout({ p, inplace: true }), linear({ out: numClasses })),
  );
}

/**
 * torchvision's `mobilenet_v3_small`, module for module (features, avgpool, classifier).
 *
 * @example
 * ```ts
 * import { estimate, mobilenetV3Small } from 'vram-ts';
 * console.log(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }).params.total); // 1520931
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function mobilenetV3Small(options: MobileNetV3Options = {}): SeqLayer {
  validate(options, MOBILENET_OPTIONS, ['mobilenetV3Small']);
  const d = options.reducedTail ? 2 : 1;
  const dil = options.dilated ? 2 : 1;
  const rows: Row[] = [
    [16, 3, 16, 16, true, 'RE', 2, 1],
    [16, 3, 72, 24, false, 'RE', 2, 1],
    [24, 3, 88, 24, false, 'RE', 1, 1],
    [24, 5, 96, 40, true, 'HS', 2, 1],
    [40, 5, 240, 40, true, 'HS', 1, 1],
    [40, 5, 240, 40, true, 'HS', 1, 1],
    [40, 5, 120, 48, true, 'HS', 1, 1],
    [48, 5, 144, 48, true, 'HS', 1, 1],
    [48, 5, 288, 96 / d, true, 'HS', 2, dil],
    [96 / d, 5, 576 / d, 96 / d, true, 'HS', 1, dil],
    [96 / d, 5, 576 / d, 96 / d, true, 'HS', 1, dil],
  ];
  return build(rows, makeDivisible((1024 / d) * (options.widthMult ?? 1.0), 8), options);
}

/**
 * torchvision's `mobilenet_v3_large`, module for module.
 *
 * @example
 * ```ts
 * import { estimate, mobilenetV3Large } from 'vram-ts';
 * console.log(estimate(mobilenetV3Large(), { input: [1, 3, 224, 224] }).params.total); // 5483032
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function mobilenetV3Large(options: MobileNetV3Options = {}): SeqLayer {
  validate(options, MOBILENET_OPTIONS, ['mobilenetV3Large']);
  const d = options.reducedTail ? 2 : 1;
  const dil = options.dilated ? 2 : 1;
  const rows: Row[] = [
    [16, 3, 16, 16, false, 'RE', 1, 1],
    [16, 3, 64, 24, false, 'RE', 2, 1],
    [24, 3, 72, 24, false, 'RE', 1, 1],
    [24, 5, 72, 40, true, 'RE', 2, 1],
    [40, 5, 120, 40, true, 'RE', 1, 1],
    [40, 5, 120, 40, true, 'RE', 1, 1],
    [40, 3, 240, 80, false, 'HS', 2, 1],
    [80, 3, 200, 80, false, 'HS', 1, 1],
    [80, 3, 184, 80, false, 'HS', 1, 1],
    [80, 3, 184, 80, false, 'HS', 1, 1],
    [80, 3, 480, 112, true, 'HS', 1, 1],
    [112, 3, 672, 112, true, 'HS', 1, 1],
    [112, 5, 672, 160 / d, true, 'HS', 2, dil],
    [160 / d, 5, 960 / d, 160 / d, true, 'HS', 1, dil],
    [160 / d, 5, 960 / d, 160 / d, true, 'HS', 1, dil],
  ];
  return build(rows, makeDivisible((1280 / d) * (options.widthMult ?? 1.0), 8), options);
}
