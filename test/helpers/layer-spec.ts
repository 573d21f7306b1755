/**
 * The oracle's "sequential" layer language (tools/oracle/README.md) built with vram-ts
 * builders, so the TypeScript side and PyTorch build the same model from one JSON spec.
 */
import {
  adaptiveAvgPool2d,
  adaptiveMaxPool2d,
  avgPool2d,
  bn,
  branch,
  conv2d,
  dropout,
  flatten,
  gelu,
  groupNorm,
  hardsigmoid,
  hardswish,
  identity,
  conv1d,
  convTranspose2d,
  graph,
  layerNorm2d,
  linear,
  upsample,
  maxPool2d,
  module,
  multiheadAttention,
  parameter,
  relu,
  relu6,
  residual,
  seq,
  sigmoid,
  silu,
  squeezeExcitation,
  stochasticDepth,
  tanh,
  type Layer,
} from '../../src/index.js';
import { makeDivisible } from '../../src/internals.js';

export type LayerSpec = readonly [string, Readonly<Record<string, unknown>>] | readonly [string, Readonly<Record<string, unknown>>, readonly unknown[]];

type Attrs = Readonly<Record<string, any>>;

const ACTIVATIONS: Readonly<Record<string, (o: { inplace?: boolean }) => Layer>> = { relu, relu6, hardswish, hardsigmoid, silu };

/** torchvision's resnet.BasicBlock / Bottleneck as a user writes them: torchvision's names and order. */
export function resnetBlock(kind: 'basicblock' | 'bottleneck', name: string, cin: number, a: Attrs): { layer: Layer; out: number } {
  const stride: number = a.stride ?? 1;
  const act = relu({ inplace: true, name: 'relu' });
  const planes: number = kind === 'basicblock' ? a.out : a.planes;
  const out = kind === 'basicblock' ? planes : planes * 4;
  const body =
    kind === 'basicblock'
      ? seq(
          conv2d({ out, kernel: 3, stride, padding: 1, bias: false, name: 'conv1' }),
          bn({ name: 'bn1' }),
          act,
          conv2d({ out, kernel: 3, padding: 1, bias: false, name: 'conv2' }),
          bn({ name: 'bn2' }),
        )
      : (() => {
          const groups: number = a.groups ?? 1;
          const width = Math.floor(planes * ((a.baseWidth ?? 64) / 64)) * groups;
          return seq(
            conv2d({ out: width, kernel: 1, bias: false, name: 'conv1' }),
            bn({ name: 'bn1' }),
            act,
            conv2d({ out: width, kernel: 3, stride, padding: 1, groups, bias: false, name: 'conv2' }),
            bn({ name: 'bn2' }),
            act,
            conv2d({ out, kernel: 1, bias: false, name: 'conv3' }),
            bn({ name: 'bn3' }),
          );
        })();
  const downsample = stride !== 1 || cin !== out ? seq({ name: 'downsample' }, conv2d({ out, kernel: 1, stride, bias: false }), bn()) : undefined;
  const block = residual(body, { inline: true, inplace: true, ...(downsample !== undefined ? { downsample } : {}) });
  return { layer: module(name, kind === 'basicblock' ? 'BasicBlock' : 'Bottleneck', seq(block, act)), out };
}

/** torchvision's squeezenet.Fire. */
export function fire(name: string, a: Attrs): Layer {
  return module(
    name,
    'Fire',
    seq(
      conv2d({ out: a.squeeze, kernel: 1, name: 'squeeze' }),
      relu({ inplace: true, name: 'squeeze_activation' }),
      branch(
        [
          seq(conv2d({ out: a.expand1x1, kernel: 1, name: 'expand1x1' }), relu({ inplace: true, name: 'expand1x1_activation' })),
          seq(conv2d({ out: a.expand3x3, kernel: 3, padding: 1, name: 'expand3x3' }), relu({ inplace: true, name: 'expand3x3_activation' })),
        ],
        { merge: 'concat', inline: true },
      ),
    ),
  );
}

/** torchvision's efficientnet.MBConv (BatchNorm2d, SiLU, SE with SiLU, stochastic depth on the residual). */
export function mbconv(name: string, cin: number, a: Attrs): Layer {
  const expanded = makeDivisible(cin * a.expandRatio, 8);
  const stride: number = a.stride ?? 1;
  const cna = (n: number, out: number, kernel: number, s: number, groups: number, act: boolean): Layer =>
    module(
      String(n),
      'Conv2dNormActivation',
      seq(conv2d({ out, kernel, stride: s, padding: (kernel - 1) / 2, groups, bias: false }), bn(), ...(act ? [silu({ inplace: true })] : [])),
    );
  const layers: Layer[] = [];
  if (expanded !== cin) layers.push(cna(layers.length, expanded, 1, 1, 1, true));
  layers.push(cna(layers.length, expanded, a.kernel, stride, expanded, true));
  layers.push(squeezeExcitation({ squeeze: Math.max(1, Math.floor(cin / 4)), activation: silu({ inplace: true }), name: String(layers.length) }));
  layers.push(cna(layers.length, a.out, 1, 1, 1, false));
  const block = seq({ name: 'block' }, ...layers);
  const useRes = stride === 1 && cin === a.out;
  return module(
    name,
    'MBConv',
    useRes ? residual(seq(block, stochasticDepth({ p: a.sdProb ?? 0, mode: 'row', name: 'stochastic_depth' })), { inline: true, inplace: true }) : block,
  );
}

/** One layer of a spec; the torchvision blocks take their module name and input channels. */
export function fromSpec(spec: LayerSpec): Layer {
  return fromSpecAt(spec, '0', 0);
}

export function fromSpecAt(spec: LayerSpec, name: string, channels: number): Layer {
  const [kind, a, children] = spec as [string, Attrs, unknown[] | undefined];
  switch (kind) {
    case 'basicblock':
    case 'bottleneck':
      return resnetBlock(kind, name, channels, a).layer;
    case 'fire':
      return fire(name, a);
    case 'mbconv':
      return mbconv(name, channels, a);
    case 'mha': {
      // SelfAttention: `self.attn(x, x, x, need_weights=...)[0]` around nn.MultiheadAttention
      // E is the input's last dimension: the module is made once per E (one object: one torch module).
      const made = new Map<number, Layer>();
      const attnFor = (e: number): Layer =>
        made.get(e) ??
        made
          .set(
            e,
            multiheadAttention({
              embedDim: e,
              heads: a.heads,
              dropout: a.dropout ?? 0,
              batchFirst: a.batchFirst ?? false,
              needWeights: a.needWeights ?? true,
              name: 'attn',
            }),
          )
          .get(e)!;
      return module(
        name,
        'SelfAttention',
        graph((g, [x]) => g.applyAll(attnFor(x!.shape[2] as number), x!)[0]!),
      );
    }
    case 'conv1d':
      return conv1d({
        out: a.out,
        kernel: a.kernel,
        stride: a.stride ?? 1,
        padding: a.padding ?? 0,
        dilation: a.dilation ?? 1,
        groups: a.groups ?? 1,
        bias: a.bias ?? true,
      });
    case 'layernorm2d':
      return layerNorm2d();
    case 'convtranspose2d':
      return convTranspose2d({
        out: a.out,
        kernel: a.kernel,
        stride: a.stride ?? 1,
        padding: a.padding ?? 0,
        outputPadding: a.outputPadding ?? 0,
        bias: a.bias ?? true,
      });
    case 'upsample':
      return upsample({
        mode: a.mode ?? 'nearest',
        ...(a.size !== undefined ? { size: a.size } : {}),
        ...(a.scaleFactor !== undefined ? { scaleFactor: a.scaleFactor } : {}),
        ...(a.alignCorners !== undefined ? { alignCorners: a.alignCorners } : {}),
      });
    case 'clstoken':
    case 'posembed': {
      // the parameter's shape follows the input: [1, 1, D] or [1, S, D]
      const made = new Map<string, Layer>();
      return module(
        name,
        kind === 'clstoken' ? 'ClassToken' : 'PosEmbedding',
        graph((g, [x]) => {
          const [, s, d] = x!.shape as [number, number, number];
          const key = `${s}x${d}`;
          const layer =
            made.get(key) ??
            made
              .set(
                key,
                kind === 'clstoken'
                  ? parameter({ name: 'class_token', shape: [1, 1, d], combine: 'prepend' })
                  : parameter({ name: 'pos_embedding', shape: [1, s, d], combine: 'add' }),
              )
              .get(key)!;
          return g.apply(layer, x!);
        }),
      );
    }
    case 'adaptivemaxpool2d':
      return adaptiveMaxPool2d({ output: a.output ?? 1 });
    case 'groupnorm':
      return groupNorm({ groups: a.groups });
    case 'stochasticdepth':
      return stochasticDepth({ p: a.p, mode: a.mode ?? 'row' });
    case 'conv2d':
      return conv2d({
        out: a.out,
        kernel: a.kernel,
        stride: a.stride ?? 1,
        padding: a.padding ?? 0,
        dilation: a.dilation ?? 1,
        groups: a.groups ?? 1,
        bias: a.bias ?? true,
      });
    case 'bn':
      return bn();
    case 'linear':
      return linear({ out: a.out, bias: a.bias ?? true });
    case 'sigmoid':
      return sigmoid();
    case 'tanh':
      return tanh();
    case 'gelu':
      return gelu({ approximate: a.approximate ?? 'none' });
    case 'dropout':
      return dropout({ p: a.p ?? 0.5, inplace: a.inplace ?? false });
    case 'flatten':
      return flatten();
    case 'identity':
      return identity();
    case 'avgpool2d':
      return avgPool2d({ kernel: a.kernel, stride: a.stride ?? a.kernel, padding: a.padding ?? 0 });
    case 'maxpool2d':
      return maxPool2d({ kernel: a.kernel, stride: a.stride ?? a.kernel, padding: a.padding ?? 0, ...(a.ceilMode === true ? { ceilMode: true } : {}) });
    case 'adaptiveavgpool2d':
      return adaptiveAvgPool2d({ output: a.output ?? 1 });
    case 'se':
      return squeezeExcitation({ squeeze: a.squeeze, ...(a.activation === 'silu' ? { activation: silu({ inplace: true }) } : {}) });
    case 'residual':
      return residual(seqFromSpecs((children ?? []) as LayerSpec[], channels), { inplace: a.inplace ?? false });
    case 'branch':
      return branch(
        ((children ?? []) as LayerSpec[][]).map((path) => seqFromSpecs(path, channels)),
        { merge: a.merge },
      );
    default: {
      const activation = ACTIVATIONS[kind];
      if (activation === undefined) throw new Error(`unknown layer kind ${kind}`);
      return activation({ inplace: a.inplace ?? false });
    }
  }
}

/** The channels after a spec's layer, for the blocks that need their input's (the last conv-like layer's out). */
function channelsAfter(spec: LayerSpec, channels: number): number {
  const [kind, a] = spec as [string, Attrs];
  if (kind === 'conv2d' || kind === 'conv1d' || kind === 'convtranspose2d' || kind === 'basicblock' || kind === 'mbconv') return a.out;
  if (kind === 'bottleneck') return a.planes * 4;
  if (kind === 'fire') return a.expand1x1 + a.expand3x3;
  if (kind === 'branch' && a.merge === 'concat')
    return ((spec[2] ?? []) as LayerSpec[][]).reduce((sum, path) => sum + path.reduce((c, s) => channelsAfter(s, c), channels), 0);
  return channels;
}

export function seqFromSpecs(specs: readonly LayerSpec[], inputChannels = 0): Layer {
  let channels = inputChannels;
  return seq(
    ...specs.map((spec, i) => {
      const layer = fromSpecAt(spec, String(i), channels);
      channels = channelsAfter(spec, channels);
      return layer;
    }),
  );
}
