import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { add, mul, sub } from '../sym/ops.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { copyUnlessOne } from './view.js';
import type { OpRule } from './types.js';

/** Attributes of {@link parameterOp}. */
export interface ParameterAttrs {
  /** The parameter's key in its module (`class_token`, `pos_embedding`). */
  readonly name: string;
  /** Its shape, as `torch.zeros(shape)` makes it. */
  readonly shape: readonly number[];
  /**
   * How it meets the input: `add` is `x + p` (broadcast; ViT's `pos_embedding`); `prepend` is
   * `torch.cat([p.expand(N, -1, -1), x], dim=1)` (ViT's `class_token`, shape [1, 1, D]);
   * `scale` is `p * x` (broadcast; ConvNeXt's `layer_scale`, shape [C, 1, 1]).
   */
  readonly combine: 'add' | 'prepend' | 'scale';
}

/**
 * A free-standing `nn.Parameter` of a module used with the input (`x + p`, or the expanded
 * parameter concatenated before it): a new output, nothing saved (add and cat keep no tensors,
 * expand is a view); backward hands the input its gradient (a strided slice of cat's, unless
 * N = 1) and sums the parameter's.
 */
export const parameterOp: OpRule<ParameterAttrs> = {
  name: 'parameter',
  arity: 1,
  apply([x], attrs, ctx) {
    const shape = attrs.shape;
    if (!Array.isArray(shape) || shape.length === 0 || !shape.every((d) => Number.isSafeInteger(d) && d >= 1)) {
      fail('bad-attribute', 'a parameter shape is a list of integers >= 1', {
        path: [...ctx.path, 'shape'],
        expected: '[d0, d1, …]',
        received: JSON.stringify(shape),
      });
    }
    if (typeof attrs.name !== 'string' || attrs.name === '')
      fail('bad-attribute', 'a parameter needs a name', { path: [...ctx.path, 'name'], expected: 'a non-empty string', received: String(attrs.name) });
    const param = { name: attrs.name, spec: tensor(shape, ctx.paramDtype) };
    const rank = x!.shape.length;
    if (attrs.combine === 'add' || attrs.combine === 'scale') {
      if (shape.length > rank)
        fail('shape-mismatch', 'the parameter has more dimensions than the input', {
          path: ctx.path,
          expected: `rank <= ${rank}`,
          received: String(shape.length),
        });
      shape.forEach((d, i) => {
        const other = x!.shape[rank - shape.length + i]!;
        if (d !== 1 && typeof other === 'number' && other !== d)
          fail('shape-mismatch', 'the parameter does not broadcast with the input', {
            path: ctx.path,
            expected: `${String(other)} (or 1) at dimension ${rank - shape.length + i}`,
            received: String(d),
          });
      });
      if (attrs.combine === 'add')
        return { outputs: [tensor(x!.shape, x!.dtype)], params: [param], saves: () => [], backward: () => ({ inputGrads: ['alias'] }) };
      // `p * x`: mul saves the other operand for each one that needs a gradient; the broadcast
      // parameter's gradient is `(grad * x).sum(...)`, a full-size product reduced.
      const full = specBytes(tensor(x!.shape, x!.dtype));
      return {
        outputs: [tensor(x!.shape, x!.dtype)],
        params: [param],
        saves: (needs) => [...(needs.params ? [{ input: 0 }] : []), ...(needs.inputs[0] ? [{ param: attrs.name }] : [])],
        backward: () => ({
          steps: [
            { results: 'inputGrads' },
            { alloc: 'grad * input (before sum)', bytes: full },
            { results: 'paramGrads' },
            { free: 'grad * input (before sum)' },
          ],
        }),
      };
    }
    if (attrs.combine !== 'prepend')
      fail('bad-attribute', 'combine must be add, prepend or scale', {
        path: [...ctx.path, 'combine'],
        expected: "'add' | 'prepend' | 'scale'",
        received: String(attrs.combine),
      });
    if (rank !== 3 || shape.length !== 3 || shape[0] !== 1 || shape[2] !== x!.shape[2]) {
      fail('shape-mismatch', 'prepend takes a [1, T, D] parameter and an [N, S, D] input', {
        path: ctx.path,
        expected: `[1, T, ${String(x!.shape[2])}]`,
        received: `[${shape.join(', ')}]`,
      });
    }
    const [n, s, d] = x!.shape as [Dim, Dim, Dim];
    // At batch 1 the expand's backward sums nothing: the parameter's `.grad` is a narrow view of
    // cat's whole gradient [1, T + S, D], which AccumulateGrad keeps (measured: 2048 B more for
    // S = 16, D = 32). At larger batches the sum makes a gradient of the parameter's size.
    const whole = add(shape[1]!, mul(s, sub(1, copyUnlessOne(n))));
    return {
      outputs: [tensor([n, add(s, shape[1]!), d], x!.dtype)],
      params: [{ ...param, gradSpec: tensor([1, whole, shape[2]!], ctx.paramDtype) }],
      saves: () => [],
      // cat's backward narrows the gradient along dim 1: strided unless the batch is 1.
      backward: () => ({ inputGrads: ['strided'], stridedFactor: copyUnlessOne(n) }),
    };
  },
};
