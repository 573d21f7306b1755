import { mulOp } from '../ops/merge.js';
import { adaptiveAvgPool2d } from './adaptiveAvgPool2d.js';
import { conv2d } from './conv2d.js';
import { graph } from './graph.js';
import { hardsigmoid } from './hardsigmoid.js';
import { relu } from './relu.js';
import { sigmoid } from './sigmoid.js';
import type { Layer, LayerOptions } from './types.js';
import { fail } from '../errors.js';
import { formatDim } from '../sym/format.js';
import { integer, oneOf } from '../validate.js';
import { layerCheck } from './layer-check.js';
import { tracedPath } from './block-schema.js';
import { checkOptions } from './op.js';

const SE_FIELDS = { squeeze: integer(1), scaleActivation: oneOf(['sigmoid', 'hardsigmoid'], 'scale activation'), activation: layerCheck };

/** Options of {@link squeezeExcitation}. */
export interface SqueezeExcitationOptions extends LayerOptions {
  /** Channels of the squeeze (fc1 output). */
  readonly squeeze: number;
  /** The gate: torchvision's default `sigmoid`; MobileNetV3 uses `hardsigmoid`. */
  readonly scaleActivation?: 'sigmoid' | 'hardsigmoid';
  /**
   * The squeeze's activation, torchvision's `activation` argument (default `relu()`): EfficientNet
   * passes `silu({ inplace: true })`. Any layer; it is named `activation`.
   */
  readonly activation?: Layer;
}

/**
 * torchvision.ops.SqueezeExcitation: avgpool → fc1 (1×1 conv) → activation (ReLU) → fc2 → gate,
 * then `scale * input`, which saves both the full-size input and the scale.
 *
 * @example
 * ```ts
 * import { conv2d, estimate, seq, squeezeExcitation } from 'vram-ts';
 * const r = estimate(seq(conv2d({ out: 16, kernel: 1 }), squeezeExcitation({ squeeze: 8 })), { input: [1, 3, 8, 8] });
 * console.log(r.params.total); // 64 + 136 + 144
 * ```
 *
 * @example
 * ```ts
 * import { estimate, silu, squeezeExcitation } from 'vram-ts';
 * // EfficientNet's: SiLU(inplace=True) in the squeeze
 * const se = squeezeExcitation({ squeeze: 4, activation: silu({ inplace: true }), name: 'se' });
 * console.log(estimate(se, { input: [1, 16, 8, 8] }).modules.map((m) => m.className).join(' ')); // "SqueezeExcitation AdaptiveAvgPool2d Conv2d SiLU Conv2d Sigmoid"
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function squeezeExcitation(options: SqueezeExcitationOptions): Layer {
  checkOptions(options, SE_FIELDS, 'squeezeExcitation', ['squeeze']);
  const given = options.activation;
  const gate = options.scaleActivation === 'hardsigmoid' ? hardsigmoid({ name: 'scale_activation' }) : sigmoid({ name: 'scale_activation' });
  // Made once, not at every trace; fc2 depends on the input's channels, once per channel count.
  const avgpool = adaptiveAvgPool2d({ output: 1, name: 'avgpool' });
  const fc1 = conv2d({ out: options.squeeze, kernel: 1, name: 'fc1' });
  const activation: Layer = given === undefined ? relu({ name: 'activation' }) : Object.freeze({ ...given, name: 'activation' });
  const fc2 = new Map<number, Layer>();
  const body = graph((g, [input]) => {
    // [N, C, H, W]: fc2 gives back C channels, a concrete number (it sizes the weight).
    const channels = input!.shape[1];
    const shape = () => `[${input!.shape.map(formatDim).join(', ')}]`;
    if (input!.shape.length !== 4)
      fail('bad-rank', 'squeeze-and-excitation takes [N, C, H, W]', { path: tracedPath(g, 'squeezeExcitation'), expected: 'rank 4', received: shape() });
    if (typeof channels !== 'number')
      fail('symbolic-channels', 'the channels must be a concrete number (fc2 gives them back)', {
        path: tracedPath(g, 'squeezeExcitation'),
        received: shape(),
      });
    let expand = fc2.get(channels);
    if (expand === undefined) {
      expand = conv2d({ out: channels, kernel: 1, name: 'fc2' });
      fc2.set(channels, expand);
    }
    let scale = g.apply(avgpool, input!);
    scale = g.apply(fc1, scale);
    scale = g.apply(activation, scale);
    scale = g.apply(expand, scale);
    scale = g.apply(gate, scale);
    return g.call(mulOp, [scale, input!], {})[0]!;
  });
  return Object.freeze({ kind: 'module', className: 'SqueezeExcitation', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}
