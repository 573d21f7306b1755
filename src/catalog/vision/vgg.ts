import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { bn } from '../../nn/bn.js';
import { conv2d } from '../../nn/conv2d.js';
import { dropout } from '../../nn/dropout.js';
import { flatten } from '../../nn/flatten.js';
import { functional } from '../../nn/functional.js';
import { linear } from '../../nn/linear.js';
import { maxPool2d } from '../../nn/maxPool2d.js';
import { relu } from '../../nn/relu.js';
import { seq } from '../../nn/seq.js';
import type { Layer, SeqLayer } from '../../nn/types.js';

/** torchvision's vgg.cfgs: output channels of the 3×3 convs, `M` a 2×2 max pool. */
export const VGG_CONFIGS: Readonly<Record<'A' | 'B' | 'D' | 'E', readonly (number | 'M')[]>> = Object.freeze({
  A: [64, 'M', 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512, 'M'],
  B: [64, 64, 'M', 128, 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512, 'M'],
  D: [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M'],
  E: [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 256, 'M', 512, 512, 512, 512, 'M', 512, 512, 512, 512, 'M'],
});

/**
 * torchvision's VGG with batch norm (`vgg11_bn` … `vgg19_bn`: configs A, B, D, E), module for
 * module: `features` (conv, BatchNorm2d, ReLU(inplace) per entry, MaxPool2d(2, 2)), `avgpool`
 * (AdaptiveAvgPool2d(7)), `torch.flatten`, `classifier` (Linear 25088→4096, ReLU, Dropout,
 * Linear, ReLU, Dropout, Linear). Reached through `vision('vgg16_bn')`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('vgg11_bn'), { input: [1, 3, 224, 224] }).params.total); // 132868840
 * ```
 */
export function buildVggBn(config: 'A' | 'B' | 'D' | 'E', numClasses: number, p: number): SeqLayer {
  const features: Layer[] = [];
  for (const v of VGG_CONFIGS[config]) {
    if (v === 'M') features.push(maxPool2d({ kernel: 2, stride: 2 }));
    else features.push(conv2d({ out: v, kernel: 3, padding: 1 }), bn(), relu({ inplace: true }));
  }
  return seq(
    { className: 'VGG', isSequential: false },
    seq({ name: 'features' }, ...features),
    adaptiveAvgPool2d({ output: 7, name: 'avgpool' }),
    functional(flatten({ startDim: 1 })),
    seq(
      { name: 'classifier' },
      linear({ out: 4096 }),
      relu({ inplace: true }),
      dropout({ p }),
      linear({ out: 4096 }),
      relu({ inplace: true }),
      dropout({ p }),
      linear({ out: numClasses }),
    ),
  );
}
