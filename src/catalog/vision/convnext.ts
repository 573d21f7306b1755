/**
 * torchvision 0.14's ConvNeXt (convnext_tiny/small/base/large), module for module: a 4×4 patchify
 * stem with LayerNorm2d, CNBlocks (depthwise 7×7 conv, permute, LayerNorm, Linear, GELU, Linear,
 * permute back, `layer_scale`, stochastic depth, `+= input`) and LayerNorm2d + 2×2 conv
 * downsampling. Written with the public builders.
 */
import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { conv2d } from '../../nn/conv2d.js';
import { flatten } from '../../nn/flatten.js';
import { gelu } from '../../nn/gelu.js';
import { layerNorm } from '../../nn/layerNorm.js';
import { layerNorm2d } from '../../nn/layerNorm2d.js';
import { linear } from '../../nn/linear.js';
import { module } from '../../nn/module.js';
import { opLayer } from '../../nn/op.js';
import { parameter } from '../../nn/parameter.js';
import { residual } from '../../nn/residual.js';
import { seq } from '../../nn/seq.js';
import { stochasticDepth } from '../../nn/stochasticDepth.js';
import type { Layer, SeqLayer } from '../../nn/types.js';
import { permuteOp } from '../../ops/view.js';

// stage widths, stage depths, default stochastic depth probability (convnext.py)
const CONFIGS: Readonly<Record<string, { readonly dims: readonly number[]; readonly depths: readonly number[]; readonly sd: number }>> = Object.freeze({
  convnext_tiny: { dims: [96, 192, 384, 768], depths: [3, 3, 9, 3], sd: 0.1 },
  convnext_small: { dims: [96, 192, 384, 768], depths: [3, 3, 27, 3], sd: 0.4 },
  convnext_base: { dims: [128, 256, 512, 1024], depths: [3, 3, 27, 3], sd: 0.5 },
  convnext_large: { dims: [192, 384, 768, 1536], depths: [3, 3, 27, 3], sd: 0.5 },
});

/** The ConvNeXt names. */
export const CONVNEXT_MODELS: readonly string[] = Object.freeze(Object.keys(CONFIGS));

/** The stochastic depth probability torchvision gives a variant. */
export function convNeXtStochasticDepth(name: string): number {
  return CONFIGS[name]!.sd;
}

const permute = (name: string, dims: readonly number[]) => opLayer(permuteOp, 'Permute', { dims }, { name });

/** torchvision's convnext.CNBlock: `layer_scale * block(input)`, stochastic depth, `+= input`. */
function cnBlock(name: string, dim: number, sdProb: number): Layer {
  const block = seq(
    { name: 'block' },
    conv2d({ out: dim, kernel: 7, padding: 3, groups: dim, bias: true, channelsLast: true }),
    permute('1', [0, 2, 3, 1]),
    layerNorm({ eps: 1e-6 }),
    linear({ out: 4 * dim }),
    gelu(),
    linear({ out: dim }),
    permute('6', [0, 3, 1, 2]),
  );
  const body = seq(
    block,
    parameter({ name: 'layer_scale', shape: [dim, 1, 1], combine: 'scale' }),
    stochasticDepth({ p: sdProb, mode: 'row', name: 'stochastic_depth' }),
  );
  return module(name, 'CNBlock', residual(body, { inline: true, inplace: true }));
}

/**
 * torchvision's `convnext_tiny/small/base/large(num_classes=…)`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('convnext_tiny'), { input: [1, 3, 64, 64] }).params.total); // 28589128
 * ```
 */
export function buildConvNeXt(name: string, numClasses: number, sdProb: number): SeqLayer {
  const { dims, depths } = CONFIGS[name]!;
  const total = depths.reduce((a, b) => a + b, 0);
  let id = 0;
  const features: Layer[] = [module('0', 'Conv2dNormActivation', seq(conv2d({ out: dims[0]!, kernel: 4, stride: 4, bias: true }), layerNorm2d({ eps: 1e-6 })))];
  dims.forEach((dim, i) => {
    const blocks: Layer[] = [];
    for (let b = 0; b < depths[i]!; b += 1) {
      blocks.push(cnBlock(String(b), dim, (sdProb * id) / (total - 1)));
      id += 1;
    }
    features.push(seq({ name: String(features.length) }, ...blocks));
    if (i + 1 < dims.length)
      features.push(
        seq(
          { name: String(features.length) },
          layerNorm2d({ eps: 1e-6, channelsLast: true }),
          conv2d({ out: dims[i + 1]!, kernel: 2, stride: 2, bias: true, channelsLast: true }),
        ),
      );
  });
  return seq(
    { className: 'ConvNeXt', isSequential: false },
    seq({ name: 'features' }, ...features),
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    seq({ name: 'classifier' }, layerNorm2d({ eps: 1e-6 }), flatten({ startDim: 1 }), linear({ out: numClasses })),
  );
}
