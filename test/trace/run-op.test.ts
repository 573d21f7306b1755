/**
 * runOp (src/trace/run-op.ts): `x.to(dtype)` with x's own dtype is x itself in PyTorch — no op, no
 * autograd node — so its readers' gradients add straight into x's; another dtype is a cast.
 */
import { describe, expect, it } from 'vitest';
import { graph, linear, module, seq, tensor, type Layer } from '../../src/index.js';
import { trace } from '../../src/internals.js';
import { castOp } from '../../src/ops/cast.js';

const tracedOps = (model: Layer) =>
  trace(model, { inputs: [tensor([2, 4])], training: true, gradEnabled: true, device: 'cuda', paramDtype: 'float32', loss: 'none' }).ops.map((op) => op.op);

describe('runOp: a cast to the tensor own dtype', () => {
  const castTo = (dtype: 'float32' | 'bfloat16') =>
    seq(
      linear({ out: 4 }),
      module(
        'up',
        'Upcast',
        graph((g, [x]) => {
          const y = g.call(castOp, [x!], { dtype })[0]!;
          expect(y === x).toBe(dtype === 'float32');
          return y;
        }),
      ),
    );

  it('records nothing and returns the same tensor', () => {
    expect(tracedOps(castTo('float32'))).toEqual(['linear']);
  });

  it('to another dtype is a cast op', () => {
    expect(tracedOps(castTo('bfloat16'))).toEqual(['linear', castOp.name]);
  });
});
