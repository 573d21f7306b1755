import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { add, mul, sub } from '../sym/ops.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { arrayOf, integer, oneOf, show, type Check } from '../validate.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
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

/** A parameter's key: torch's register_parameter takes a non-empty name without a dot. */
const parameterName: Check = (value, path, issues) => {
  if (typeof value !== 'string' || value === '' || value.includes('.'))
    issues.push({
      path,
      code: 'bad-option',
      message: 'a parameter name is a non-empty string without a dot',
      expected: 'a name such as class_token',
      received: show(value),
    });
};

/** A free parameter's attributes: its name, a shape of integers >= 1, how it combines (prepend: a [1, T, D] shape). */
export const PARAMETER_SCHEMA: AttrSchema = {
  fields: { name: parameterName, shape: arrayOf(integer(1), { min: 1 }), combine: oneOf(['add', 'prepend', 'scale'], 'combine') },
  required: ['name', 'shape', 'combine'],
  across: ({ shape, combine }, report) => {
    const dims = shape as readonly number[];
    if (combine === 'prepend' && (dims.length !== 3 || dims[0] !== 1)) report('shape', 'prepend takes a [1, T, D] parameter', '[1, T, D]', shape);
  },
};

const parameterAttrs = attrsGuard(PARAMETER_SCHEMA, true);

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
    parameterAttrs(attrs, ctx);
    const shape = attrs.shape;
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
