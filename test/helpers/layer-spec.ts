/**
 * The oracle's "sequential" layer language (tools/oracle/README.md) built with vram-ts
 * builders, so the TypeScript side and PyTorch build the same model from one JSON spec.
 */
import {
  adaptiveAvgPool2d, avgPool2d, bn, branch, conv2d, dropout, flatten, gelu, hardsigmoid, hardswish, identity,
  linear, maxPool2d, relu, relu6, residual, seq, sigmoid, silu, squeezeExcitation, tanh, type Layer,
} from '../../src/index.js';

export type LayerSpec = readonly [string, Readonly<Record<string, unknown>>] | readonly [string, Readonly<Record<string, unknown>>, readonly unknown[]];

type Attrs = Readonly<Record<string, any>>;

const ACTIVATIONS: Readonly<Record<string, (o: { inplace?: boolean }) => Layer>> = { relu, relu6, hardswish, hardsigmoid, silu };

export function fromSpec(spec: LayerSpec): Layer {
  const [kind, a, children] = spec as [string, Attrs, unknown[] | undefined];
  switch (kind) {
    case 'conv2d':
      return conv2d({ out: a.out, kernel: a.kernel, stride: a.stride ?? 1, padding: a.padding ?? 0, dilation: a.dilation ?? 1, groups: a.groups ?? 1, bias: a.bias ?? true });
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
      return maxPool2d({ kernel: a.kernel, stride: a.stride ?? a.kernel, padding: a.padding ?? 0 });
    case 'adaptiveavgpool2d':
      return adaptiveAvgPool2d({ output: a.output ?? 1 });
    case 'se':
      return squeezeExcitation({ squeeze: a.squeeze });
    case 'residual':
      return residual(seqFromSpecs((children ?? []) as LayerSpec[]), { inplace: a.inplace ?? false });
    case 'branch':
      return branch(((children ?? []) as LayerSpec[][]).map(seqFromSpecs), { merge: a.merge });
    default: {
      const activation = ACTIVATIONS[kind];
      if (activation === undefined) throw new Error(`unknown layer kind ${kind}`);
      return activation({ inplace: a.inplace ?? false });
    }
  }
}

export function seqFromSpecs(specs: readonly LayerSpec[]): Layer {
  return seq(...specs.map(fromSpec));
}
