import { string, validate } from '../validate.js';
import { frozenLayer, layerCheck } from './layer-check.js';
import { moduleName } from './op.js';
import type { Layer, ModuleLayer, OpLayer, SeqLayer } from './types.js';

/**
 * Gives a layer a name and a class in the module tree, like a torch.nn.Module subclass.
 * An unnamed sequence or op body becomes that module itself (Conv2dNormActivation is a
 * Sequential subclass); a named body, or a residual, branch or graph, is traced inside
 * a new module node (InvertedResidual holding its `block`).
 *
 * @example
 * ```ts
 * import { bn, conv2d, estimate, hardswish, module, seq } from 'vram-ts';
 * const block = module('0', 'Conv2dNormActivation', seq(conv2d({ out: 16, kernel: 3, padding: 1, bias: false }), bn(), hardswish()));
 * const r = estimate(seq(block), { input: [1, 3, 32, 32] });
 * console.log(r.modules[1]?.className); // "Conv2dNormActivation"
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function module(name: string, className: string, body: Layer): SeqLayer | OpLayer<unknown> | ModuleLayer {
  validate(name, moduleName, ['module', 'name']);
  validate(className, string, ['module', 'className']);
  validate(body, layerCheck, ['module', 'body']);
  body = frozenLayer(body);
  if (body.name === undefined && (body.kind === 'seq' || (body.kind === 'op' && body.className !== null))) {
    return Object.freeze({ ...body, name, className });
  }
  return Object.freeze({ kind: 'module', className, body, name });
}
