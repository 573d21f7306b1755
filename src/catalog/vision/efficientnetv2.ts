/**
 * torchvision 0.14's EfficientNetV2 (efficientnet_v2_s/m/l), module for module: FusedMBConv and
 * MBConv stages, BatchNorm2d(eps=1e-3), a 1280-channel head. Written with the public builders.
 */
import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { bn } from '../../nn/bn.js';
import { conv2d } from '../../nn/conv2d.js';
import { dropout } from '../../nn/dropout.js';
import { flatten } from '../../nn/flatten.js';
import { functional } from '../../nn/functional.js';
import { linear } from '../../nn/linear.js';
import { module } from '../../nn/module.js';
import { residual } from '../../nn/residual.js';
import { seq } from '../../nn/seq.js';
import { silu } from '../../nn/silu.js';
import { squeezeExcitation } from '../../nn/squeezeExcitation.js';
import { stochasticDepth } from '../../nn/stochasticDepth.js';
import type { Layer, SeqLayer } from '../../nn/types.js';

type Row = readonly ['fused' | 'mb', number, number, number, number, number, number];

// block, expand ratio, kernel, stride, input channels, output channels, layers (efficientnet.py, _efficientnet_conf)
const CONFIGS: Readonly<Record<string, { readonly rows: readonly Row[]; readonly dropout: number }>> = Object.freeze({
  efficientnet_v2_s: {
    dropout: 0.2,
    rows: [
      ['fused', 1, 3, 1, 24, 24, 2],
      ['fused', 4, 3, 2, 24, 48, 4],
      ['fused', 4, 3, 2, 48, 64, 4],
      ['mb', 4, 3, 2, 64, 128, 6],
      ['mb', 6, 3, 1, 128, 160, 9],
      ['mb', 6, 3, 2, 160, 256, 15],
    ],
  },
  efficientnet_v2_m: {
    dropout: 0.3,
    rows: [
      ['fused', 1, 3, 1, 24, 24, 3],
      ['fused', 4, 3, 2, 24, 48, 5],
      ['fused', 4, 3, 2, 48, 80, 5],
      ['mb', 4, 3, 2, 80, 160, 7],
      ['mb', 6, 3, 1, 160, 176, 14],
      ['mb', 6, 3, 2, 176, 304, 18],
      ['mb', 6, 3, 1, 304, 512, 5],
    ],
  },
  efficientnet_v2_l: {
    dropout: 0.4,
    rows: [
      ['fused', 1, 3, 1, 32, 32, 4],
      ['fused', 4, 3, 2, 32, 64, 7],
      ['fused', 4, 3, 2, 64, 96, 7],
      ['mb', 4, 3, 2, 96, 192, 10],
      ['mb', 6, 3, 1, 192, 224, 19],
      ['mb', 6, 3, 2, 224, 384, 25],
      ['mb', 6, 3, 1, 384, 640, 7],
    ],
  },
});

/** The EfficientNetV2 names. */
export const EFFICIENTNET_V2_MODELS: readonly string[] = Object.freeze(Object.keys(CONFIGS));

/** The classifier dropout torchvision gives a variant. */
export function efficientNetV2Dropout(name: string): number {
  return CONFIGS[name]!.dropout;
}

/** torchvision's make_divisible(v, 8) (adjust_channels with width 1). */
function divisible(v: number): number {
  const d = 8;
  let n = Math.max(d, Math.floor(v + d / 2) - (Math.floor(v + d / 2) % d));
  if (n < 0.9 * v) n += d;
  return n;
}

function convNormSilu(name: string, out: number, kernel: number, stride: number, groups: number, activation: boolean): Layer {
  return module(
    name,
    'Conv2dNormActivation',
    seq(conv2d({ out, kernel, stride, padding: (kernel - 1) / 2, groups, bias: false }), bn({ eps: 1e-3 }), ...(activation ? [silu({ inplace: true })] : [])),
  );
}

function block(name: string, row: Row, stride: number, cin: number, out: number, sdProb: number): Layer {
  const [kind, ratio, kernel] = row;
  const expanded = divisible(cin * ratio);
  const layers: Layer[] = [];
  if (kind === 'fused') {
    if (expanded !== cin) {
      layers.push(convNormSilu('0', expanded, kernel, stride, 1, true));
      layers.push(convNormSilu('1', out, 1, 1, 1, false));
    } else {
      layers.push(convNormSilu('0', out, kernel, stride, 1, true));
    }
  } else {
    if (expanded !== cin) layers.push(convNormSilu(String(layers.length), expanded, 1, 1, 1, true));
    layers.push(convNormSilu(String(layers.length), expanded, kernel, stride, expanded, true));
    layers.push(squeezeExcitation({ squeeze: Math.max(1, Math.floor(cin / 4)), activation: silu({ inplace: true }), name: String(layers.length) }));
    layers.push(convNormSilu(String(layers.length), out, 1, 1, 1, false));
  }
  const body = seq({ name: 'block' }, ...layers);
  const useResidual = stride === 1 && cin === out;
  return module(
    name,
    kind === 'fused' ? 'FusedMBConv' : 'MBConv',
    useResidual ? residual(seq(body, stochasticDepth({ p: sdProb, mode: 'row', name: 'stochastic_depth' })), { inline: true, inplace: true }) : body,
  );
}

/**
 * torchvision's `efficientnet_v2_s/m/l(num_classes=…)`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('efficientnet_v2_s'), { input: [1, 3, 64, 64] }).params.total); // 21458488
 * ```
 */
export function buildEfficientNetV2(name: string, numClasses: number, p: number, sdProb: number): SeqLayer {
  const { rows } = CONFIGS[name]!;
  const total = rows.reduce((sum, row) => sum + row[6], 0);
  let id = 0;
  const features: Layer[] = [convNormSilu('0', rows[0]![4], 3, 2, 1, true)];
  for (const row of rows) {
    const stage: Layer[] = [];
    for (let i = 0; i < row[6]; i += 1) {
      stage.push(block(String(i), row, i === 0 ? row[3] : 1, i === 0 ? row[4] : row[5], row[5], (sdProb * id) / total));
      id += 1;
    }
    features.push(seq({ name: String(features.length) }, ...stage));
  }
  features.push(convNormSilu(String(features.length), 1280, 1, 1, 1, true));
  return seq(
    { className: 'EfficientNet', isSequential: false },
    seq({ name: 'features' }, ...features),
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    functional(flatten({ startDim: 1 })),
    seq({ name: 'classifier' }, dropout({ p, inplace: true }), linear({ out: numClasses })),
  );
}
