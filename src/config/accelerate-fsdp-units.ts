/*
 * accelerate 1.15.0's FSDP2 units for a catalog decoder, as the fsdp2 engine's units
 * (fu = accelerate/utils/fsdp_utils.py, fsdp2_prepare_model).
 */
import type { Layer } from '../nn/types.js';
import type { Fsdp2UnitSpec } from '../parallel/engines/fsdp2-units.js';

/**
 * What fsdp2_prepare_model wraps under TRANSFORMER_BASED_WRAP, in its order: every decoder layer
 * (fu:850-855, bottom up: layer 0 first), the input embedding alone when it is not tied
 * (fu:865-866, with the plugin's reshard_after_forward), then ONE unit of the final norm and
 * lm_head — and the tied embedding with them — never resharded after forward (fu:868-879); the
 * root last (fu:881-885), whose `reshard_after_forward=None` torch resolves to False: the
 * engine's root. Undefined when the model does not say its decoder layers and roles.
 */
export function accelerateFsdp2Units(model: Layer): readonly Fsdp2UnitSpec[] | undefined {
  if (model.kind !== 'module') return undefined;
  const roles = model.meta?.roles;
  const repeated = model.repeated;
  if (roles === undefined || repeated === undefined) return undefined;
  const layers = Array.from({ length: repeated.count }, (_, i) => `${repeated.prefix}${i}`);
  const tied = model.meta!.tied;
  const tail = tied ? [roles.finalNorm, roles.inputEmbedding, roles.outputEmbedding] : [roles.finalNorm, roles.outputEmbedding];
  return [...layers, ...(tied ? [] : [roles.inputEmbedding]), { modules: tail, reshardAfterForward: false }];
}
