import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  adaptiveAvgPool2d,
  avgPool2d,
  bn,
  conv2d,
  dropout,
  estimate,
  flatten,
  gelu,
  graph,
  hardsigmoid,
  hardswish,
  linear,
  maxPool2d,
  mulOp,
  relu,
  relu6,
  sigmoid,
  silu,
  tanh,
  type Layer,
} from '../../src/index.js';

/** The per-op reference: what PyTorch 1.13 CPU autograd saved on a [2, 8, 16, 16] non-leaf input. */
const reference = JSON.parse(readFileSync(new URL('../fixtures/reference/pytorch_saved_per_op.json', import.meta.url), 'utf8')) as {
  rows: readonly { op: string; input: readonly number[]; saved_bytes: number }[];
};

const seScale = graph((g, [x]) => {
  const scale = g.apply(adaptiveAvgPool2d({ name: 'pool' }), x!);
  return g.call(mulOp, [x!, scale], {})[0]!;
});

/** Our layer for each reference row the library models as one op. */
const layers: Readonly<Record<string, Layer>> = {
  'conv2d 3x3 pad1 (8->16)': conv2d({ out: 16, kernel: 3, padding: 1 }),
  'depthwise conv2d stride2': conv2d({ out: 8, kernel: 3, stride: 2, padding: 1, groups: 8 }),
  'batch_norm train': bn(),
  relu: relu(),
  'relu inplace': relu({ inplace: true }),
  relu6: relu6(),
  'relu6 inplace': relu6({ inplace: true }),
  hardswish: hardswish(),
  'hardswish inplace': hardswish({ inplace: true }),
  hardsigmoid: hardsigmoid(),
  'hardsigmoid inplace': hardsigmoid({ inplace: true }),
  sigmoid: sigmoid(),
  silu: silu(),
  'silu inplace': silu({ inplace: true }),
  gelu: gelu(),
  'gelu tanh': gelu({ approximate: 'tanh' }),
  tanh: tanh(),
  'dropout p=0.2 train': dropout({ p: 0.2 }),
  'dropout p=0.2 inplace': dropout({ p: 0.2, inplace: true }),
  'max_pool2d 2x2': maxPool2d({ kernel: 2 }),
  'avg_pool2d 2x2': avgPool2d({ kernel: 2 }),
  'adaptive_avg_pool2d 1': adaptiveAvgPool2d(),
  flatten: flatten(),
  'linear 16->32 on [2,8,16,16]': linear({ out: 32 }),
  'mul by SE scale [N,C,1,1]': seScale,
};

describe('op rules against the per-op reference (CPU, train)', () => {
  for (const row of reference.rows) {
    const layer = layers[row.op];
    if (layer === undefined) continue;
    it(`${row.op} saves ${row.saved_bytes} B`, () => {
      const r = estimate(layer, { input: row.input, device: 'cpu', framework: 'torch-1.13', inputRequiresGrad: true });
      expect(r.bytes.activations).toBe(row.saved_bytes);
    });
  }

  it('batch_norm eval keeps the input and the running statistics', () => {
    const row = reference.rows.find((r) => r.op === 'batch_norm eval')!;
    expect(estimate(bn(), { input: row.input, device: 'cpu', framework: 'torch-1.13', inputRequiresGrad: true, moduleMode: 'eval' }).bytes.activations).toBe(
      row.saved_bytes,
    );
  });

  it('covers every reference row that is a single op of ours', () => {
    const covered = reference.rows.filter((r) => layers[r.op] !== undefined || r.op === 'batch_norm eval').length;
    expect(covered).toBeGreaterThanOrEqual(26);
  });
});

describe('device-specific masks', () => {
  it('CUDA fused dropout keeps a 1-byte mask, in-place dropout a full-precision one', () => {
    const input = [2, 1024];
    expect(estimate(dropout({ p: 0.1 }), { input, inputRequiresGrad: true }).bytes.activations).toBe(2048);
    expect(estimate(dropout({ p: 0.1, inplace: true }), { input, inputRequiresGrad: true }).bytes.activations).toBe(8192);
    expect(estimate(dropout({ p: 0.1 }), { input, inputRequiresGrad: true, moduleMode: 'eval' }).bytes.activations).toBe(0);
  });
});
