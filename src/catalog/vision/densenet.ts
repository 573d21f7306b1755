import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { avgPool2d } from '../../nn/avgPool2d.js';
import { bn } from '../../nn/bn.js';
import { conv2d } from '../../nn/conv2d.js';
import { flatten } from '../../nn/flatten.js';
import { functional } from '../../nn/functional.js';
import { graph } from '../../nn/graph.js';
import { linear } from '../../nn/linear.js';
import { maxPool2d } from '../../nn/maxPool2d.js';
import { module } from '../../nn/module.js';
import { relu } from '../../nn/relu.js';
import { seq } from '../../nn/seq.js';
import type { Layer, SeqLayer, TensorRef } from '../../nn/types.js';
import { catOp } from '../../ops/merge.js';

/**
 * torchvision's densenet._DenseLayer (drop_rate 0, not memory efficient): `torch.cat` of every
 * earlier feature map (a copy even of one), norm1, relu1, conv1 — `bn_function`'s local, the
 * concatenation, lives until conv1 returns — then norm2, relu2, conv2.
 */
function denseLayer(name: string, growth: number, bnSize: number): Layer {
  const norm1 = bn({ name: 'norm1' });
  const relu1 = relu({ inplace: true, name: 'relu1' });
  const conv1 = conv2d({ out: bnSize * growth, kernel: 1, bias: false, name: 'conv1' });
  const norm2 = bn({ name: 'norm2' });
  const relu2 = relu({ inplace: true, name: 'relu2' });
  const conv2 = conv2d({ out: growth, kernel: 3, padding: 1, bias: false, name: 'conv2' });
  return module(
    name,
    '_DenseLayer',
    graph((g, inputs) => {
      const cat = g.call(catOp, inputs, { dim: 1 })[0]!;
      const bottleneck = g.apply(conv1, g.apply(relu1, g.apply(norm1, cat)));
      g.touch(cat);
      return g.apply(conv2, g.apply(relu2, g.apply(norm2, bottleneck)));
    }),
  );
}

/** torchvision's densenet._DenseBlock: each layer reads the list of all feature maps so far; the block returns their concatenation. */
function denseBlock(name: string, layers: number, growth: number, bnSize: number): Layer {
  const children = Array.from({ length: layers }, (_, i) => denseLayer(`denselayer${i + 1}`, growth, bnSize));
  return module(
    name,
    '_DenseBlock',
    graph((g, [x]) => {
      const features: TensorRef[] = [x!];
      for (const layer of children) features.push(g.apply(layer, ...features));
      return g.call(catOp, features, { dim: 1 })[0]!;
    }),
  );
}

/**
 * torchvision's DenseNet-BC (`densenet121`: growth 32, blocks 6/12/24/16, 64 initial features,
 * bn_size 4), module for module: `features` (conv0, norm0, relu0, pool0, denseblock1,
 * transition1, …, denseblock4, norm5), functional ReLU, adaptive average pool and flatten,
 * `classifier`. Reached through `vision('densenet121')`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('densenet121'), { input: [1, 3, 224, 224] }).params.total); // 7978856
 * ```
 */
export function buildDenseNet(blocks: readonly number[], growth: number, initFeatures: number, numClasses: number, bnSize = 4): SeqLayer {
  const features: Layer[] = [
    conv2d({ out: initFeatures, kernel: 7, stride: 2, padding: 3, bias: false, name: 'conv0' }),
    bn({ name: 'norm0' }),
    relu({ inplace: true, name: 'relu0' }),
    maxPool2d({ kernel: 3, stride: 2, padding: 1, name: 'pool0' }),
  ];
  let channels = initFeatures;
  blocks.forEach((layers, i) => {
    features.push(denseBlock(`denseblock${i + 1}`, layers, growth, bnSize));
    channels += layers * growth;
    if (i !== blocks.length - 1) {
      channels = Math.floor(channels / 2);
      features.push(
        seq(
          { name: `transition${i + 1}`, className: '_Transition' },
          bn({ name: 'norm' }),
          relu({ inplace: true, name: 'relu' }),
          conv2d({ out: channels, kernel: 1, bias: false, name: 'conv' }),
          avgPool2d({ kernel: 2, stride: 2, name: 'pool' }),
        ),
      );
    }
  });
  features.push(bn({ name: 'norm5' }));
  return seq(
    { className: 'DenseNet', isSequential: false },
    seq({ name: 'features' }, ...features),
    functional(relu({ inplace: true })),
    functional(adaptiveAvgPool2d({ output: 1 })),
    functional(flatten({ startDim: 1 })),
    linear({ out: numClasses, name: 'classifier' }),
  );
}
