import { fail } from '../errors.js';
import { adaptiveAvgPool2d } from '../nn/adaptiveAvgPool2d.js';
import { bn } from '../nn/bn.js';
import { conv2d } from '../nn/conv2d.js';
import { dropout } from '../nn/dropout.js';
import { flatten } from '../nn/flatten.js';
import { functional } from '../nn/functional.js';
import { linear } from '../nn/linear.js';
import { maxPool2d } from '../nn/maxPool2d.js';
import { module } from '../nn/module.js';
import { probability } from '../nn/block-schema.js';
import { integer, object, show, validate } from '../validate.js';
import { relu } from '../nn/relu.js';
import { residual } from '../nn/residual.js';
import { seq } from '../nn/seq.js';
import { silu } from '../nn/silu.js';
import { squeezeExcitation } from '../nn/squeezeExcitation.js';
import { stochasticDepth } from '../nn/stochasticDepth.js';
import type { Layer, SeqLayer } from '../nn/types.js';
import { makeDivisible } from './mobilenetv3.js';
import { gelu } from '../nn/gelu.js';
import { layerNorm } from '../nn/layerNorm.js';
import { multiheadAttention } from '../nn/multiheadAttention.js';
import { opLayer } from '../nn/op.js';
import { parameter } from '../nn/parameter.js';
import { permuteOp, selectOp } from '../ops/view.js';
import { EXTRA_VISION } from './vision/extra.js';
import { CLASSIC_VISION_FAMILY } from './vision/classic.js';
import type { VisionFamily, VisionOptions } from './vision/options.js';

interface ResNetSpec {
  readonly family: 'resnet';
  readonly block: 'basic' | 'bottleneck';
  readonly layers: readonly [number, number, number, number];
  readonly groups: number;
  readonly widthPerGroup: number;
}

interface ViTSpec {
  readonly family: 'vit';
  readonly patch: number;
  readonly layers: number;
  readonly heads: number;
  readonly hidden: number;
  readonly mlp: number;
}

interface EfficientNetSpec {
  readonly family: 'efficientnet';
  readonly width: number;
  readonly depth: number;
  readonly dropout: number;
}

const resnet = (block: 'basic' | 'bottleneck', layers: readonly [number, number, number, number], groups = 1, widthPerGroup = 64): ResNetSpec => ({
  family: 'resnet',
  block,
  layers,
  groups,
  widthPerGroup,
});
const efficientnet = (width: number, depth: number, dropoutP: number): EfficientNetSpec => ({ family: 'efficientnet', width, depth, dropout: dropoutP });

const vit = (patch: number, layers: number, heads: number, hidden: number, mlp: number): ViTSpec => ({ family: 'vit', patch, layers, heads, hidden, mlp });

const MODELS: Readonly<Record<string, ResNetSpec | EfficientNetSpec | ViTSpec>> = Object.freeze({
  resnet18: resnet('basic', [2, 2, 2, 2]),
  resnet34: resnet('basic', [3, 4, 6, 3]),
  resnet50: resnet('bottleneck', [3, 4, 6, 3]),
  resnet101: resnet('bottleneck', [3, 4, 23, 3]),
  resnet152: resnet('bottleneck', [3, 8, 36, 3]),
  resnext50_32x4d: resnet('bottleneck', [3, 4, 6, 3], 32, 4),
  resnext101_32x8d: resnet('bottleneck', [3, 4, 23, 3], 32, 8),
  wide_resnet50_2: resnet('bottleneck', [3, 4, 6, 3], 1, 128),
  wide_resnet101_2: resnet('bottleneck', [3, 4, 23, 3], 1, 128),
  efficientnet_b0: efficientnet(1.0, 1.0, 0.2),
  efficientnet_b1: efficientnet(1.0, 1.1, 0.2),
  efficientnet_b2: efficientnet(1.1, 1.2, 0.3),
  efficientnet_b3: efficientnet(1.2, 1.4, 0.3),
  efficientnet_b4: efficientnet(1.4, 1.8, 0.4),
  efficientnet_b5: efficientnet(1.6, 2.2, 0.4),
  efficientnet_b6: efficientnet(1.8, 2.6, 0.5),
  efficientnet_b7: efficientnet(2.0, 3.1, 0.5),
  vit_b_16: vit(16, 12, 12, 768, 3072),
  vit_b_32: vit(32, 12, 12, 768, 3072),
  vit_l_16: vit(16, 24, 16, 1024, 4096),
  vit_l_32: vit(32, 24, 16, 1024, 4096),
  vit_h_14: vit(14, 32, 16, 1280, 5120),
});

/**
 * The catalog's families, the one registry {@link vision} reads: ResNet, EfficientNet and ViT
 * here, then vision/extra.ts's and vision/classic.ts's. A function, not a constant: a bundle that
 * never builds a vision model leaves the builders out (package.json's sideEffects: false).
 */
function families(): readonly VisionFamily[] {
  return [{ names: Object.keys(MODELS), build: visionCore }, ...EXTRA_VISION, CLASSIC_VISION_FAMILY];
}

/* @__NO_SIDE_EFFECTS__ */
function familyNames(): readonly string[] {
  return Object.freeze(families().flatMap((family) => family.names));
}

/**
 * The torchvision model names {@link vision} builds.
 *
 * @example
 * ```ts
 * import { VISION_MODELS } from 'vram-ts';
 * console.log(VISION_MODELS.includes('efficientnet_b0')); // true
 * ```
 */
export const VISION_MODELS: readonly string[] = familyNames();

/** torchvision's resnet.BasicBlock / Bottleneck: conv1, bn1, relu, conv2, bn2, (conv3, bn3), downsample, `out += identity`, relu. */
function resnetBlock(
  name: string,
  kind: 'basic' | 'bottleneck',
  inplanes: number,
  planes: number,
  stride: number,
  groups: number,
  widthPerGroup: number,
): Layer {
  const act = relu({ inplace: true, name: 'relu' });
  const out = kind === 'basic' ? planes : planes * 4;
  let body: Layer;
  if (kind === 'basic') {
    body = seq(
      conv2d({ out, kernel: 3, stride, padding: 1, bias: false, name: 'conv1' }),
      bn({ name: 'bn1' }),
      act,
      conv2d({ out, kernel: 3, padding: 1, bias: false, name: 'conv2' }),
      bn({ name: 'bn2' }),
    );
  } else {
    const width = Math.floor(planes * (widthPerGroup / 64)) * groups;
    body = seq(
      conv2d({ out: width, kernel: 1, bias: false, name: 'conv1' }),
      bn({ name: 'bn1' }),
      act,
      conv2d({ out: width, kernel: 3, stride, padding: 1, groups, bias: false, name: 'conv2' }),
      bn({ name: 'bn2' }),
      act,
      conv2d({ out, kernel: 1, bias: false, name: 'conv3' }),
      bn({ name: 'bn3' }),
    );
  }
  const downsample = stride !== 1 || inplanes !== out ? seq({ name: 'downsample' }, conv2d({ out, kernel: 1, stride, bias: false }), bn()) : undefined;
  return module(
    name,
    kind === 'basic' ? 'BasicBlock' : 'Bottleneck',
    seq(residual(body, { inline: true, inplace: true, ...(downsample !== undefined ? { downsample } : {}) }), act),
  );
}

function buildResNet(spec: ResNetSpec, numClasses: number): SeqLayer {
  const expansion = spec.block === 'basic' ? 1 : 4;
  let inplanes = 64;
  const stages = [64, 128, 256, 512].map((planes, i) => {
    const blocks: Layer[] = [];
    for (let b = 0; b < spec.layers[i]!; b += 1) {
      blocks.push(resnetBlock(String(b), spec.block, inplanes, planes, b === 0 && i > 0 ? 2 : 1, spec.groups, spec.widthPerGroup));
      inplanes = planes * expansion;
    }
    return seq({ name: `layer${i + 1}` }, ...blocks);
  });
  return seq(
    { className: 'ResNet', isSequential: false },
    conv2d({ out: 64, kernel: 7, stride: 2, padding: 3, bias: false, name: 'conv1' }),
    bn({ name: 'bn1' }),
    relu({ inplace: true, name: 'relu' }),
    maxPool2d({ kernel: 3, stride: 2, padding: 1, name: 'maxpool' }),
    ...stages,
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    functional(flatten({ startDim: 1 })),
    linear({ out: numClasses, name: 'fc' }),
  );
}

/** torchvision's Conv2dNormActivation with BatchNorm2d and an optional SiLU(inplace=True). */
function convNormSilu(name: string, out: number, kernel: number, stride: number, groups: number, activation: boolean): Layer {
  return module(
    name,
    'Conv2dNormActivation',
    seq(conv2d({ out, kernel, stride, padding: (kernel - 1) / 2, groups, bias: false }), bn(), ...(activation ? [silu({ inplace: true })] : [])),
  );
}

/** torchvision's efficientnet.MBConv: block (expand, depthwise, SE with SiLU, project), then stochastic depth and `result += input` when shapes allow. */
function mbconv(name: string, expandRatio: number, kernel: number, stride: number, cin: number, out: number, sdProb: number): Layer {
  const expanded = makeDivisible(cin * expandRatio, 8);
  const layers: Layer[] = [];
  if (expanded !== cin) layers.push(convNormSilu(String(layers.length), expanded, 1, 1, 1, true));
  layers.push(convNormSilu(String(layers.length), expanded, kernel, stride, expanded, true));
  layers.push(squeezeExcitation({ squeeze: Math.max(1, Math.floor(cin / 4)), activation: silu({ inplace: true }), name: String(layers.length) }));
  layers.push(convNormSilu(String(layers.length), out, 1, 1, 1, false));
  const block = seq({ name: 'block' }, ...layers);
  const useResidual = stride === 1 && cin === out;
  return module(
    name,
    'MBConv',
    useResidual ? residual(seq(block, stochasticDepth({ p: sdProb, mode: 'row', name: 'stochastic_depth' })), { inline: true, inplace: true }) : block,
  );
}

function buildEfficientNet(spec: EfficientNetSpec, numClasses: number, p: number, sdProb: number): SeqLayer {
  const channels = (c: number) => makeDivisible(c * spec.width, 8);
  const depth = (n: number) => Math.ceil(n * spec.depth);
  // expand ratio, kernel, stride, input channels, output channels, layers (efficientnet.py, _efficientnet_conf)
  const rows = [
    [1, 3, 1, 32, 16, 1],
    [6, 3, 2, 16, 24, 2],
    [6, 5, 2, 24, 40, 2],
    [6, 3, 2, 40, 80, 3],
    [6, 5, 1, 80, 112, 3],
    [6, 5, 2, 112, 192, 4],
    [6, 3, 1, 192, 320, 1],
  ] as const;
  const total = rows.reduce((sum, row) => sum + depth(row[5]), 0);
  let id = 0;
  const features: Layer[] = [convNormSilu('0', channels(rows[0][3]), 3, 2, 1, true)];
  for (const [ratio, kernel, stride, cin, cout, n] of rows) {
    const stage: Layer[] = [];
    for (let i = 0; i < depth(n); i += 1) {
      stage.push(mbconv(String(i), ratio, kernel, i === 0 ? stride : 1, i === 0 ? channels(cin) : channels(cout), channels(cout), (sdProb * id) / total));
      id += 1;
    }
    features.push(seq({ name: String(features.length) }, ...stage));
  }
  const last = channels(rows[rows.length - 1]![4]);
  features.push(convNormSilu(String(features.length), 4 * last, 1, 1, 1, true));
  return seq(
    { className: 'EfficientNet', isSequential: false },
    seq({ name: 'features' }, ...features),
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    functional(flatten({ startDim: 1 })),
    seq({ name: 'classifier' }, dropout({ p, inplace: true }), linear({ out: numClasses })),
  );
}

/** torchvision's vision_transformer.EncoderBlock: `x = x + dropout(attn(ln_1(x)))`, then `x + mlp(ln_2(x))`. */
function encoderBlock(name: string, spec: ViTSpec): Layer {
  const attention = seq(
    layerNorm({ eps: 1e-6, name: 'ln_1' }),
    multiheadAttention({ embedDim: spec.hidden, heads: spec.heads, batchFirst: true, needWeights: false, name: 'self_attention' }),
    dropout({ p: 0, name: 'dropout' }),
  );
  const mlpBlock = module('mlp', 'MLPBlock', seq(linear({ out: spec.mlp }), gelu(), dropout({ p: 0 }), linear({ out: spec.hidden }), dropout({ p: 0 })));
  return seq(
    { name, className: 'EncoderBlock', isSequential: false },
    residual(attention, { inline: true }),
    residual(seq(layerNorm({ eps: 1e-6, name: 'ln_2' }), mlpBlock), { inline: true }),
  );
}

function buildViT(spec: ViTSpec, numClasses: number, imageSize: number): SeqLayer {
  const side = imageSize / spec.patch;
  const blocks = Array.from({ length: spec.layers }, (_, i) => encoderBlock(`encoder_layer_${i}`, spec));
  return seq(
    { className: 'VisionTransformer', isSequential: false },
    conv2d({ out: spec.hidden, kernel: spec.patch, stride: spec.patch, name: 'conv_proj' }),
    // _process_input: x.reshape(n, hidden, n_h · n_w).permute(0, 2, 1)
    functional(flatten({ startDim: 2 })),
    opLayer(permuteOp, null, { dims: [0, 2, 1] }),
    parameter({ name: 'class_token', shape: [1, 1, spec.hidden], combine: 'prepend' }),
    seq(
      { name: 'encoder', className: 'Encoder', isSequential: false },
      parameter({ name: 'pos_embedding', shape: [1, side * side + 1, spec.hidden], combine: 'add' }),
      dropout({ p: 0, name: 'dropout' }),
      seq({ name: 'layers' }, ...blocks),
      layerNorm({ eps: 1e-6, name: 'ln' }),
    ),
    // x[:, 0]
    opLayer(selectOp, null, { dim: 1, index: 0 }),
    seq({ name: 'heads' }, linear({ out: numClasses, name: 'head' })),
  );
}

/** {@link VisionOptions}: classes >= 1, probabilities in [0, 1] (torch.nn.Dropout's and torchvision's StochasticDepth's), an image side >= 1 (ViT: a multiple of its patch). */
const VISION_OPTIONS = object({ fields: { numClasses: integer(1), dropout: probability, stochasticDepthProb: probability, imageSize: integer(1) } });

/**
 * A torchvision classification model by its torchvision name, module for module (names, order,
 * parameters): ResNet (resnet18 … resnet152, resnext50_32x4d, resnext101_32x8d, wide_resnet50_2,
 * wide_resnet101_2), EfficientNet B0–B7 and ViT (vit_b_16, vit_b_32, vit_l_16, vit_l_32,
 * vit_h_14; the input must be `imageSize`), and the models of src/catalog/vision/: MobileNetV2,
 * mobilenet_v3_small/large, squeezenet1_1, vgg11_bn … vgg19_bn, densenet121, regnet_y_400mf …
 * regnet_y_16gf (`dropout` for those whose constructor takes one). Written with the public builders only.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('resnet18'), { input: [1, 3, 224, 224] }).params.total); // 11689512
 * console.log(estimate(vision('resnet50', { numClasses: 10 }), { input: [1, 3, 224, 224] }).params.total); // 23528522
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function vision(name: string, options: VisionOptions = {}): SeqLayer {
  validate(options, VISION_OPTIONS, ['vision']);
  if (typeof name !== 'string')
    fail('unknown-model', 'a vision model is named by a string', { path: ['vision', 'name'], expected: VISION_MODELS.join(' | '), received: show(name) });
  const family = families().find((f) => f.names.includes(name));
  if (family === undefined)
    fail('unknown-model', 'not a vision model of the catalog', { path: ['vision', 'name'], expected: VISION_MODELS.join(' | '), received: String(name) });
  return family.build(name, options);
}

/** torchvision's ResNets, EfficientNets and ViTs (the specs of MODELS) with the options each family takes checked. */
function visionCore(name: string, options: VisionOptions): SeqLayer {
  const spec = MODELS[name]!;
  const numClasses = options.numClasses ?? 1000;
  if (spec.family !== 'vit' && options.imageSize !== undefined) fail('bad-option', 'only ViTs take an imageSize', { path: ['vision', 'imageSize'] });
  if (spec.family === 'resnet') {
    if (options.dropout !== undefined || options.stochasticDepthProb !== undefined)
      fail('bad-option', 'ResNets take no dropout or stochastic depth', {
        path: ['vision', options.dropout !== undefined ? 'dropout' : 'stochasticDepthProb'],
      });
    return buildResNet(spec, numClasses);
  }
  if (spec.family === 'vit') {
    if (options.dropout !== undefined || options.stochasticDepthProb !== undefined)
      fail('bad-option', 'ViTs here take no dropout or stochastic depth', {
        path: ['vision', options.dropout !== undefined ? 'dropout' : 'stochasticDepthProb'],
      });
    const imageSize = options.imageSize ?? 224;
    if (!Number.isSafeInteger(imageSize) || imageSize < spec.patch || imageSize % spec.patch !== 0)
      fail('bad-option', 'imageSize must be a multiple of the patch size', {
        path: ['vision', 'imageSize'],
        expected: `a multiple of ${spec.patch}`,
        received: String(options.imageSize),
      });
    return buildViT(spec, numClasses, imageSize);
  }
  const p = options.dropout ?? spec.dropout;
  const sd = options.stochasticDepthProb ?? 0.2;
  return buildEfficientNet(spec, numClasses, p, sd);
}
