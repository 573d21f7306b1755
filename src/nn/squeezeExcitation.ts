import { mulRule } from '../ops/merge.js';
import { adaptiveAvgPool2d } from './adaptiveAvgPool2d.js';
import { conv2d } from './conv2d.js';
import { graph } from './graph.js';
import { hardsigmoid } from './hardsigmoid.js';
import { relu } from './relu.js';
import { sigmoid } from './sigmoid.js';
import type { Layer, LayerOptions } from './types.js';
import { checkKeys } from './op.js';

/** Options of {@link squeezeExcitation}. */
export interface SqueezeExcitationOptions extends LayerOptions {
  /** Channels of the squeeze (fc1 output). */
  readonly squeeze: number;
  /** The gate: torchvision's default `sigmoid`; MobileNetV3 uses `hardsigmoid`. */
  readonly scaleActivation?: 'sigmoid' | 'hardsigmoid';
}

/**
 * torchvision.ops.SqueezeExcitation: avgpool → fc1 (1×1 conv) → ReLU → fc2 → gate,
 * then `scale * input`, which saves both the full-size input and the scale.
 *
 * @example
 * ```ts
 * import { conv2d, estimate, seq, squeezeExcitation } from 'vram-ts';
 * const r = estimate(seq(conv2d({ out: 16, kernel: 1 }), squeezeExcitation({ squeeze: 8 })), { input: [1, 3, 8, 8] });
 * console.log(r.params.total); // 64 + 136 + 144
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function squeezeExcitation(options: SqueezeExcitationOptions): Layer {
  checkKeys(options, ['squeeze', 'scaleActivation'], 'squeezeExcitation');
  const gate = options.scaleActivation === 'hardsigmoid' ? hardsigmoid({ name: 'scale_activation' }) : sigmoid({ name: 'scale_activation' });
  // Made once, not at every trace; fc2 depends on the input's channels, once per channel count.
  const avgpool = adaptiveAvgPool2d({ output: 1, name: 'avgpool' });
  const fc1 = conv2d({ out: options.squeeze, kernel: 1, name: 'fc1' });
  const activation = relu({ name: 'activation' });
  const fc2 = new Map<number, Layer>();
  const body = graph((g, [input]) => {
    const channels = input!.shape[1] as number;
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
    return g.call(mulRule, [scale, input!], {})[0]!;
  });
  return Object.freeze({ kind: 'module', className: 'SqueezeExcitation', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}
