import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { branch } from '../../nn/branch.js';
import { conv2d } from '../../nn/conv2d.js';
import { dropout } from '../../nn/dropout.js';
import { flatten } from '../../nn/flatten.js';
import { functional } from '../../nn/functional.js';
import { maxPool2d } from '../../nn/maxPool2d.js';
import { module } from '../../nn/module.js';
import { relu } from '../../nn/relu.js';
import { seq } from '../../nn/seq.js';
import type { Layer, SeqLayer } from '../../nn/types.js';

/** torchvision's squeezenet.Fire: squeeze, its ReLU, then expand1x1 and expand3x3 (each with its ReLU) concatenated. */
function fire(name: string, squeeze: number, expand1x1: number, expand3x3: number): Layer {
  return module(
    name,
    'Fire',
    seq(
      conv2d({ out: squeeze, kernel: 1, name: 'squeeze' }),
      relu({ inplace: true, name: 'squeeze_activation' }),
      branch(
        [
          seq(conv2d({ out: expand1x1, kernel: 1, name: 'expand1x1' }), relu({ inplace: true, name: 'expand1x1_activation' })),
          seq(conv2d({ out: expand3x3, kernel: 3, padding: 1, name: 'expand3x3' }), relu({ inplace: true, name: 'expand3x3_activation' })),
        ],
        { merge: 'concat', inline: true },
      ),
    ),
  );
}

/**
 * torchvision's `squeezenet1_1`, module for module: `features` (3×3/2 conv, ReLU, ceil-mode max
 * pools between Fire modules) and `classifier` (Dropout, final 1×1 conv, ReLU, AdaptiveAvgPool2d),
 * then `torch.flatten`. Reached through `vision('squeezenet1_1')`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('squeezenet1_1'), { input: [1, 3, 224, 224] }).params.total); // 1235496
 * ```
 */
export function buildSqueezeNet11(numClasses: number, p: number): SeqLayer {
  const pool = () => maxPool2d({ kernel: 3, stride: 2, ceilMode: true });
  return seq(
    { className: 'SqueezeNet', isSequential: false },
    seq(
      { name: 'features' },
      conv2d({ out: 64, kernel: 3, stride: 2 }),
      relu({ inplace: true }),
      pool(),
      fire('3', 16, 64, 64),
      fire('4', 16, 64, 64),
      pool(),
      fire('6', 32, 128, 128),
      fire('7', 32, 128, 128),
      pool(),
      fire('9', 48, 192, 192),
      fire('10', 48, 192, 192),
      fire('11', 64, 256, 256),
      fire('12', 64, 256, 256),
    ),
    seq({ name: 'classifier' }, dropout({ p }), conv2d({ out: numClasses, kernel: 1 }), relu({ inplace: true }), adaptiveAvgPool2d({ output: 1 })),
    functional(flatten({ startDim: 1 })),
  );
}
