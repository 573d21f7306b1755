import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { bn } from '../../nn/bn.js';
import { conv2d } from '../../nn/conv2d.js';
import { dropout } from '../../nn/dropout.js';
import { flatten } from '../../nn/flatten.js';
import { functional } from '../../nn/functional.js';
import { linear } from '../../nn/linear.js';
import { module } from '../../nn/module.js';
import { relu6 } from '../../nn/relu6.js';
import { residual } from '../../nn/residual.js';
import { seq } from '../../nn/seq.js';
import type { Layer, SeqLayer } from '../../nn/types.js';
import { makeDivisible } from '../mobilenetv3.js';

/** torchvision's Conv2dNormActivation with BatchNorm2d and ReLU6(inplace=True). */
function convBnRelu6(name: string, out: number, kernel: number, stride: number, groups: number): Layer {
  return module(
    name,
    'Conv2dNormActivation',
    seq(conv2d({ out, kernel, stride, padding: (kernel - 1) / 2, groups, bias: false }), bn(), relu6({ inplace: true })),
  );
}

/** torchvision's mobilenetv2.InvertedResidual: `conv` (expand, depthwise, project + BN), `x + conv(x)` when shapes allow. */
function invertedResidual(name: string, cin: number, out: number, stride: number, expandRatio: number): Layer {
  const hidden = Math.round(cin * expandRatio);
  const layers: Layer[] = [];
  if (expandRatio !== 1) layers.push(convBnRelu6(String(layers.length), hidden, 1, 1, 1));
  layers.push(convBnRelu6(String(layers.length), hidden, 3, stride, hidden));
  layers.push(conv2d({ out, kernel: 1, bias: false }), bn());
  const conv = seq({ name: 'conv' }, ...layers);
  return module(name, 'InvertedResidual', stride === 1 && cin === out ? residual(conv) : conv);
}

/**
 * torchvision's `mobilenet_v2` (width 1.0), module for module: `features` (Conv2dNormActivation
 * stem, 17 InvertedResidual, 1×1 to 1280), functional adaptive average pool, `classifier`
 * (Dropout, Linear). Reached through `vision('mobilenet_v2')`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('mobilenet_v2'), { input: [1, 3, 224, 224] }).params.total); // 3504872
 * ```
 */
export function buildMobileNetV2(numClasses: number, p: number): SeqLayer {
  const rows = [
    [1, 16, 1, 1],
    [6, 24, 2, 2],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
  ] as const;
  let cin = makeDivisible(32, 8);
  const features: Layer[] = [convBnRelu6('0', cin, 3, 2, 1)];
  for (const [t, c, n, s] of rows) {
    const out = makeDivisible(c, 8);
    for (let i = 0; i < n; i += 1) {
      features.push(invertedResidual(String(features.length), cin, out, i === 0 ? s : 1, t));
      cin = out;
    }
  }
  features.push(convBnRelu6(String(features.length), 1280, 1, 1, 1));
  return seq(
    { className: 'MobileNetV2', isSequential: false },
    seq({ name: 'features' }, ...features),
    functional(adaptiveAvgPool2d({ output: 1 })),
    functional(flatten({ startDim: 1 })),
    seq({ name: 'classifier' }, dropout({ p }), linear({ out: numClasses })),
  );
}
