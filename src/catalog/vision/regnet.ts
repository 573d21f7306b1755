import { adaptiveAvgPool2d } from '../../nn/adaptiveAvgPool2d.js';
import { bn } from '../../nn/bn.js';
import { conv2d } from '../../nn/conv2d.js';
import { flatten } from '../../nn/flatten.js';
import { functional } from '../../nn/functional.js';
import { linear } from '../../nn/linear.js';
import { module } from '../../nn/module.js';
import { relu } from '../../nn/relu.js';
import { residual } from '../../nn/residual.js';
import { seq } from '../../nn/seq.js';
import { squeezeExcitation } from '../../nn/squeezeExcitation.js';
import type { Layer, SeqLayer } from '../../nn/types.js';

/** One RegNet stage: blocks, output width, group width (bottleneck multiplier 1, SE ratio 0.25: the Y models). */
export type RegNetStage = readonly [depth: number, width: number, groupWidth: number];

/**
 * The stages torchvision 0.14's `BlockParams.from_init_params` computes for the RegNetY models
 * (stem width 32, stride 2 per stage).
 */
export const REGNET_Y: Readonly<Record<string, readonly RegNetStage[]>> = Object.freeze({
  regnet_y_400mf: [
    [1, 48, 8],
    [3, 104, 8],
    [6, 208, 8],
    [6, 440, 8],
  ],
  regnet_y_800mf: [
    [1, 64, 16],
    [3, 144, 16],
    [8, 320, 16],
    [2, 784, 16],
  ],
  regnet_y_1_6gf: [
    [2, 48, 24],
    [6, 120, 24],
    [17, 336, 24],
    [2, 888, 24],
  ],
  regnet_y_3_2gf: [
    [2, 72, 24],
    [5, 216, 24],
    [13, 576, 24],
    [1, 1512, 24],
  ],
  regnet_y_8gf: [
    [2, 224, 56],
    [4, 448, 56],
    [10, 896, 56],
    [1, 2016, 56],
  ],
  regnet_y_16gf: [
    [2, 224, 112],
    [4, 448, 112],
    [11, 1232, 112],
    [1, 3024, 112],
  ],
});

/** torchvision's Conv2dNormActivation with BatchNorm2d and an optional ReLU(inplace=True). */
function cna(name: string, out: number, kernel: number, stride: number, groups: number, act: boolean): Layer {
  return module(
    name,
    'Conv2dNormActivation',
    seq(conv2d({ out, kernel, stride, padding: (kernel - 1) / 2, groups, bias: false }), bn(), ...(act ? [relu({ inplace: true })] : [])),
  );
}

/** torchvision's regnet.ResBottleneckBlock: `proj(x) + f(x)` (proj first) or `x + f(x)`, then ReLU(inplace). */
function block(name: string, cin: number, out: number, stride: number, groupWidth: number): Layer {
  const f = seq(
    { name: 'f', className: 'BottleneckTransform' },
    cna('a', out, 1, 1, 1, true),
    cna('b', out, 3, stride, out / groupWidth, true),
    squeezeExcitation({ squeeze: Math.round(0.25 * cin), name: 'se' }),
    cna('c', out, 1, 1, 1, false),
  );
  const proj = cin !== out || stride !== 1 ? cna('proj', out, 1, stride, 1, false) : undefined;
  return module(
    name,
    'ResBottleneckBlock',
    seq(residual(seq(f), { inline: true, ...(proj !== undefined ? { shortcut: proj } : {}) }), relu({ inplace: true, name: 'activation' })),
  );
}

/**
 * torchvision's RegNetY (`regnet_y_400mf` … `regnet_y_16gf`), module for module: `stem`
 * (3×3/2 conv, BN, ReLU), `trunk_output` (`block1` … `block4`, AnyStage of `blockS-i`
 * ResBottleneckBlock with `proj`, `f.a/b/se/c` and `activation`), `avgpool`, `fc`. Reached through
 * `vision('regnet_y_400mf')`.
 *
 * @example
 * ```ts
 * import { estimate, vision } from 'vram-ts';
 * console.log(estimate(vision('regnet_y_400mf'), { input: [1, 3, 224, 224] }).params.total); // 4344144
 * ```
 */
export function buildRegNetY(stages: readonly RegNetStage[], numClasses: number): SeqLayer {
  let cin = 32;
  const trunk = stages.map(([depth, width, groupWidth], s) => {
    const blocks: Layer[] = [];
    for (let i = 0; i < depth; i += 1) {
      blocks.push(block(`block${s + 1}-${i}`, i === 0 ? cin : width, width, i === 0 ? 2 : 1, groupWidth));
    }
    cin = width;
    return seq({ name: `block${s + 1}`, className: 'AnyStage' }, ...blocks);
  });
  return seq(
    { className: 'RegNet', isSequential: false },
    module('stem', 'SimpleStemIN', seq(conv2d({ out: 32, kernel: 3, stride: 2, padding: 1, bias: false }), bn(), relu({ inplace: true }))),
    seq({ name: 'trunk_output' }, ...trunk),
    adaptiveAvgPool2d({ output: 1, name: 'avgpool' }),
    functional(flatten({ startDim: 1 })),
    linear({ out: numClasses, name: 'fc' }),
  );
}
