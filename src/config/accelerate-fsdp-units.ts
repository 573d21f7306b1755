/*
 * accelerate 1.15.0's FSDP2 for a catalog decoder, as the fsdp2 engine's plan: the units
 * fsdp2_prepare_model makes (fu = accelerate/utils/fsdp_utils.py) and the plugin's settings.
 * Shared by the accelerate config (accelerate.ts) and the Trainer's FSDP (training-args-fsdp.ts).
 */
import type { VramIssue } from '../errors.js';
import type { Layer } from '../nn/types.js';
import { fsdp2Engine } from '../parallel/engines/fsdp2.js';
import type { Fsdp2UnitSpec } from '../parallel/engines/fsdp2-units.js';
import type { ParallelPlan } from '../parallel/plan.js';
import { show, type Path } from '../validate.js';

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

/**
 * The units of `model` (the context's), or the issue that stops them: no model, a model without
 * decoder roles, or a class to wrap (`transformer_cls_names_to_wrap`) other than its decoder layer's.
 */
export function unitsOfModel(
  model: Layer | undefined,
  classes?: { readonly names: readonly string[]; readonly path: Path },
): readonly Fsdp2UnitSpec[] | VramIssue {
  const expected = 'a catalog decoder (llm, fromHFConfig)';
  if (model === undefined)
    return {
      path: ['context', 'model'],
      code: 'missing-context',
      message: "accelerate's FSDP2 units are the model's own modules (decoder layers, input embedding, final norm, lm_head): give context.model",
      expected,
      received: 'missing',
    };
  const units = accelerateFsdp2Units(model);
  const roles = model.kind === 'module' ? model.meta?.roles : undefined;
  if (units === undefined || roles === undefined)
    return {
      path: ['context', 'model'],
      code: 'not-modelled',
      message: 'the model records no decoder layers and roles (input embedding, final norm, lm_head) to wrap as accelerate does: a catalog decoder does',
      expected,
      received: model.kind === 'module' ? model.className : model.kind,
    };
  const other = classes?.names.find((name) => name !== roles.layerClass);
  if (other !== undefined)
    return {
      path: classes!.path,
      code: 'not-modelled',
      message: `units of class ${JSON.stringify(other)} are not modelled: vram-ts wraps the model's decoder layers (${roles.layerClass}, its _no_split_modules)`,
      expected: roles.layerClass,
      received: show(classes!.names.join(',')),
    };
  return units;
}

/** The plugin's settings that move memory, over `world` processes. */
export interface AccelerateFsdp2 {
  readonly units: readonly Fsdp2UnitSpec[];
  readonly world: number;
  readonly reshardAfterForward: boolean;
  /** CPUOffloadPolicy (fu:777): parameters, gradients and optimizer state together. */
  readonly offload: boolean;
  /** Mixed precision bf16: MixedPrecisionPolicy bf16 param and reduce dtypes (dc:2136-2143) over float32 parameters (fu:813-825). */
  readonly bf16: boolean;
  /** Micro-batches under accelerator.accumulate(): set_requires_gradient_sync(False) but on the last (acc:1166-1171). */
  readonly accumulation: number;
}

/** The fsdp2 plan (and with bf16 the parameters' stored dtype) of accelerate's FSDP2. */
export function accelerateFsdp2Plan(f: AccelerateFsdp2): {
  readonly parallel: ParallelPlan & { readonly engine: typeof fsdp2Engine.name };
  readonly dtype?: 'float32';
} {
  return {
    parallel: {
      engine: fsdp2Engine.name,
      dp: f.world,
      units: f.units,
      reshardAfterForward: f.reshardAfterForward,
      ...(f.offload ? { offload: { optimizer: true, parameters: true } } : {}),
      ...(f.bf16 ? { mixedPrecision: { param: 'bfloat16' as const, reduce: 'bfloat16' as const } } : {}),
      ...(f.accumulation > 1 ? { gradientSync: 'last' as const } : {}),
    },
    ...(f.bf16 ? { dtype: 'float32' as const } : {}),
  };
}
