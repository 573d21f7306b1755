/**
 * fast-check arbitraries of valid CNN models in the layer language: a list of choices
 * interpreted against the running shape, so every generated model traces.
 */
import fc from 'fast-check';
import type { LayerSpec } from './layer-spec.js';

export interface RandomModel {
  readonly layers: readonly LayerSpec[];
  readonly input: readonly [number, number, number, number];
}

interface Shape {
  c: number;
  h: number;
  w: number;
}

const choice = fc.record({
  kind: fc.integer({ min: 0, max: 13 }),
  a: fc.integer({ min: 1, max: 16 }),
  b: fc.integer({ min: 0, max: 3 }),
  flag: fc.boolean(),
});
type Choice = { kind: number; a: number; b: number; flag: boolean };

/** conv → act → 1×1 conv → bn: keeps the shape and ends in bn, whose output nothing saves (so `+=` on it is valid). */
function shapePreserving(c: number, pick: Choice): LayerSpec[] {
  const act: LayerSpec = [['relu', 'relu6', 'hardswish', 'silu'][pick.b % 4]!, { inplace: pick.flag }];
  return [['conv2d', { out: c, kernel: 3, padding: 1, bias: !pick.flag }], act, ['conv2d', { out: c, kernel: 1 }], ['bn', {}]];
}

/** Layers whose output no op has saved yet, so an in-place op may follow them (PyTorch rejects the rest). */
const WRITABLE_AFTER = new Set(['conv2d', 'bn', 'linear', 'residual', 'branch']);

function interpret(choices: readonly Choice[], s: Shape): LayerSpec[] {
  const layers: LayerSpec[] = [];
  const canWrite = () => layers.length > 0 && WRITABLE_AFTER.has(layers[layers.length - 1]![0]);
  for (const raw of choices) {
    const pick = {
      ...raw,
      flag: raw.flag && (raw.kind === 0 || raw.kind === 1 || raw.kind === 7 || raw.kind === 10 || raw.kind === 13 || raw.kind === 9 || canWrite()),
    };
    switch (pick.kind) {
      case 0:
      case 1: {
        const k = 1 + (pick.b % 3);
        const stride = pick.flag && s.h >= 4 && s.w >= 4 ? 2 : 1;
        const pad = Math.floor(k / 2);
        layers.push(['conv2d', { out: pick.a, kernel: k, stride, padding: pad, bias: pick.b % 2 === 0 }]);
        s.c = pick.a;
        s.h = Math.floor((s.h + 2 * pad - k) / stride) + 1;
        s.w = Math.floor((s.w + 2 * pad - k) / stride) + 1;
        break;
      }
      case 2:
        layers.push(['conv2d', { out: s.c, kernel: 3, padding: 1, groups: s.c, bias: false }]);
        break;
      case 3:
        layers.push(['bn', {}]);
        break;
      case 4:
        layers.push([['relu', 'relu6', 'hardswish', 'hardsigmoid'][pick.b]!, { inplace: pick.flag }]);
        break;
      case 5:
        layers.push([['sigmoid', 'tanh', 'silu', 'gelu'][pick.b]!, pick.b === 2 ? { inplace: pick.flag } : {}]);
        break;
      case 6:
        layers.push(['dropout', { p: (pick.b + 1) / 10, inplace: pick.flag }]);
        break;
      case 7:
        if (s.h >= 2 && s.w >= 2) {
          layers.push([pick.flag ? 'maxpool2d' : 'avgpool2d', { kernel: 2 }]);
          s.h = Math.floor(s.h / 2);
          s.w = Math.floor(s.w / 2);
        }
        break;
      case 8:
        layers.push(['se', { squeeze: 1 + (pick.a % s.c) }]);
        break;
      case 9:
        layers.push(['residual', { inplace: pick.flag }, shapePreserving(s.c, pick)]);
        break;
      case 10:
        layers.push(['branch', { merge: pick.flag ? 'add' : 'mul' }, [shapePreserving(s.c, pick), [['identity', {}]]]]);
        break;
      case 11: {
        const out = 1 + (pick.a % 8);
        layers.push(['branch', { merge: 'concat' }, [[['conv2d', { out, kernel: 1 }]], [['conv2d', { out: s.c, kernel: 3, padding: 1 }]]]]);
        s.c += out;
        break;
      }
      case 12:
        layers.push(['identity', {}]);
        break;
      default:
        layers.push(['conv2d', { out: s.c * 2, kernel: 1, groups: s.c > 1 && pick.flag ? s.c : 1 }]);
        s.c *= 2;
        break;
    }
  }
  return layers;
}

/** Valid CNN models: conv/bn/activation/pool/SE/residual/branch stacks, optionally with a head. */
export const randomModel: fc.Arbitrary<RandomModel> = fc
  .record({
    batch: fc.integer({ min: 1, max: 4 }),
    channels: fc.integer({ min: 1, max: 6 }),
    h: fc.integer({ min: 4, max: 40 }),
    w: fc.integer({ min: 4, max: 40 }),
    choices: fc.array(choice, { minLength: 1, maxLength: 10 }),
    head: fc.boolean(),
    classes: fc.integer({ min: 1, max: 10 }),
  })
  .map(({ batch, channels, h, w, choices, head, classes }) => {
    const layers = interpret(choices, { c: channels, h, w });
    if (head) layers.push(['adaptiveavgpool2d', {}], ['flatten', {}], ['linear', { out: classes }]);
    return { layers, input: [batch, channels, h, w] as const };
  });
