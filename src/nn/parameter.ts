import { PARAMETER_SCHEMA, parameterOp, type ParameterAttrs } from '../ops/parameter.js';
import { checkAcross } from '../ops/attrs.js';
import { checkOptions, opLayer } from './op.js';
import type { OpLayer } from './types.js';

/**
 * A free-standing `nn.Parameter` (not inside a Linear or a conv) used with the input, registered
 * on the enclosing module under `name`: ViT's `pos_embedding` (`combine: 'add'`, `x + p`) and
 * `class_token` (`combine: 'prepend'`, `torch.cat([p.expand(N, -1, -1), x], dim=1)`), or
 * ConvNeXt's `layer_scale` (`combine: 'scale'`, `p * x`, which saves x for p's gradient). It is a
 * functional op: wrap it in {@link module} or place it in a graph to give it its module.
 *
 * @example
 * ```ts
 * import { estimate, module, parameter, seq } from 'vram-ts';
 * const token = module('0', 'ClassToken', parameter({ name: 'class_token', shape: [1, 1, 64], combine: 'prepend' }));
 * const pos = module('1', 'PosEmbedding', parameter({ name: 'pos_embedding', shape: [1, 17, 64], combine: 'add' }));
 * const r = estimate(seq(token, pos), { input: [2, 16, 64] });
 * console.log(r.params.total, r.modules[2]?.outputShape); // 1152 [ 2, 17, 64 ]
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function parameter(options: ParameterAttrs): OpLayer<ParameterAttrs> {
  checkOptions(options, PARAMETER_SCHEMA.fields, 'parameter', PARAMETER_SCHEMA.required);
  checkAcross(PARAMETER_SCHEMA, options, ['parameter']);
  return opLayer(parameterOp, null, Object.freeze({ name: options.name, shape: Object.freeze([...options.shape]), combine: options.combine }));
}
