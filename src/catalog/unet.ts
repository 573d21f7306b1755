/**
 * The classic UNet (Ronneberger et al., 2015, with padded convolutions and batch norm, as the
 * common PyTorch implementations write it): the catalog's example of a segmentation network.
 */
import { bn } from '../nn/bn.js';
import { conv2d } from '../nn/conv2d.js';
import { convTranspose2d } from '../nn/convTranspose2d.js';
import { graph } from '../nn/graph.js';
import { maxPool2d } from '../nn/maxPool2d.js';
import { module } from '../nn/module.js';
import { relu } from '../nn/relu.js';
import { seq } from '../nn/seq.js';
import type { Layer, ModuleLayer, OpLayer, SeqLayer } from '../nn/types.js';
import { catOp } from '../ops/merge.js';
import { integer, object, validate } from '../validate.js';

/** {@link UNetOptions}: channel counts >= 1; `base` at most 2^48 so the deepest level's 16·base channels stay exact. */
const UNET_OPTIONS = object({ fields: { inChannels: integer(1), numClasses: integer(1), base: integer(1, 2 ** 48) } });

/** Options of {@link unet}. */
export interface UNetOptions {
  /** Input image channels (default 3). */
  readonly inChannels?: number;
  /** Output channels: one logit map per class (default 2). */
  readonly numClasses?: number;
  /** Channels of the first level, doubled at each of the four downsamplings (default 64). */
  readonly base?: number;
}

/** DoubleConv: (3×3 conv without bias, BatchNorm2d, ReLU(inplace)) twice, in `double_conv`. */
function doubleConv(name: string, out: number): Layer {
  const body = seq(
    { name: 'double_conv' },
    conv2d({ out, kernel: 3, padding: 1, bias: false }),
    bn(),
    relu({ inplace: true }),
    conv2d({ out, kernel: 3, padding: 1, bias: false }),
    bn(),
    relu({ inplace: true }),
  );
  return module(name, 'DoubleConv', seq({ isSequential: false }, body));
}

/** Down: `maxpool_conv` = MaxPool2d(2), DoubleConv. */
function down(name: string, out: number): Layer {
  return module(name, 'Down', seq({ isSequential: false }, seq({ name: 'maxpool_conv' }, maxPool2d({ kernel: 2 }), doubleConv('1', out))));
}

/** Up: `up` (ConvTranspose2d k2 s2 halving the channels), `torch.cat([skip, x], dim=1)`, `conv` (DoubleConv). */
function up(name: string, out: number): SeqLayer | OpLayer<unknown> | ModuleLayer {
  const upConv = convTranspose2d({ out, kernel: 2, stride: 2, name: 'up' });
  const conv = doubleConv('conv', out);
  return module(
    name,
    'Up',
    graph((g, [x, skip]) => {
      const upsampled = g.apply(upConv, x!);
      const merged = g.call(catOp, [skip!, upsampled], { dim: 1 })[0]!;
      // `x = torch.cat([skip, x], dim=1); return self.conv(x)`: the local holds it until Up returns.
      g.hold(merged, 'module');
      return g.apply(conv, merged);
    }),
  );
}

/**
 * The classic UNet: `inc` (DoubleConv), four `down` levels (max pool, DoubleConv doubling the
 * channels), four `up` levels (2×2 transposed convolution, concatenation with the skip, DoubleConv)
 * and `outc`, a 1×1 convolution to `numClasses` maps. Height and width must be multiples of 16
 * (the skips are concatenated without padding).
 *
 * @example
 * ```ts
 * import { estimate, unet } from 'vram-ts';
 * const r = estimate(unet({ inChannels: 3, numClasses: 2, base: 64 }), { input: [1, 3, 64, 64] });
 * console.log(r.params.total, r.modules.at(-1)?.outputShape); // 31037698 [ 1, 2, 64, 64 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function unet(options: UNetOptions = {}): SeqLayer {
  validate(options, UNET_OPTIONS, ['unet']);
  const { inChannels = 3, numClasses = 2, base = 64 } = options;
  const inc = seq(
    { name: 'inc', className: 'DoubleConv', isSequential: false },
    seq(
      { name: 'double_conv' },
      conv2d({ out: base, kernel: 3, padding: 1, bias: false, in: inChannels }),
      bn(),
      relu({ inplace: true }),
      conv2d({ out: base, kernel: 3, padding: 1, bias: false }),
      bn(),
      relu({ inplace: true }),
    ),
  );
  const downs = [1, 2, 3, 4].map((i) => down(`down${i}`, base * 2 ** i));
  const ups = [1, 2, 3, 4].map((i) => up(`up${i}`, base * 2 ** (4 - i)));
  const outc = seq({ name: 'outc', className: 'OutConv', isSequential: false }, conv2d({ out: numClasses, kernel: 1, name: 'conv' }));
  return seq(
    { className: 'UNet', isSequential: false },
    graph((g, [x]) => {
      const skips = [g.apply(inc, x!)];
      for (const d of downs) skips.push(g.apply(d, skips[skips.length - 1]!));
      // x1 … x5 are locals of forward: held until it returns.
      for (const skip of skips) g.hold(skip, 'module');
      let y = skips[4]!;
      ups.forEach((u, i) => {
        const previous = y;
        y = g.apply(u, y, skips[3 - i]!);
        // `x = self.up2(x, x3)`: the old `x` is let go only when reassigned.
        g.touch(previous);
      });
      return g.apply(outc, y);
    }),
  );
}
