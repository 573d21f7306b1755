/**
 * What the engines, trainers and jobs need of a model argument: a layer (nn/layer-check.ts) that
 * is a decoder from the catalog, whose `meta` (ModelMeta) holds the facts they read — layers,
 * heads, sizes, and the MoE, MLA and parallel records where there are any. A hand-made or
 * tampered model is a VramError naming the field, never a TypeError or a NaN further on.
 */
import { fail, VramError, type VramIssue } from '../errors.js';
import { LIMITS } from '../limits.js';
import { layerProblem } from '../nn/layer-check.js';
import type { ModelMeta, ModuleLayer } from '../nn/types.js';
import { DTYPE_BITS } from '../tensor/dtype.js';
import { anyOf, arrayOf, boolean, type Check, integer, oneOf, type Path, show, string, validate } from '../validate.js';

/** The largest size a decoder's meta records (heads, widths, vocabulary): past it a product of them leaves the exact integers. */
const SIZE = 2 ** 31;

const size = integer(1, SIZE);
const count = integer(0, Number.MAX_SAFE_INTEGER);

/** Checks the named fields of an object that may hold others (a record read, not an options object). */
function fields(shape: Readonly<Record<string, Check>>, required: readonly string[]): Check {
  return (value, path, issues) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      issues.push({ path, code: 'bad-meta', message: 'must be an object', expected: 'object', received: show(value) });
      return;
    }
    const record = value as Record<string, unknown>;
    for (const [key, check] of Object.entries(shape)) {
      const field = Object.hasOwn(record, key) ? record[key] : undefined;
      if (field !== undefined) check(field, [...path, key], issues);
      else if (required.includes(key))
        issues.push({ path: [...path, key], code: 'bad-meta', message: 'is required', expected: 'a value', received: 'missing' });
    }
  };
}

const parallelRank = fields({ size: integer(1, 1_000_000), rank: integer(0, 1_000_000) }, ['size', 'rank']);

/** A size a hand-made meta may leave at 0 where nothing reads it (the weights and the profiled peak given as measured). */
const known = integer(0, SIZE);

/** ModelMeta's fields, as the catalog's decoder builders record them. */
const metaFields: Check = fields(
  {
    kind: oneOf(['decoder'], 'meta kind'),
    family: string,
    layers: integer(1, LIMITS.layers),
    heads: size,
    kvHeads: size,
    headDim: known,
    hidden: known,
    vocab: known,
    intermediate: known,
    gatedMlp: boolean,
    tied: boolean,
    maxPositions: size,
    attention: oneOf(['eager', 'sdpa', 'flash'], 'attention'),
    slidingWindow: size,
    layerWindows: arrayOf(anyOf([size, (v, p, i) => (v === null ? undefined : size(v, p, i))], 'a window or null'), { max: LIMITS.layers }),
    tensorParallel: fields({ size: integer(1, 1_000_000), rank: integer(0, 1_000_000), sequenceParallel: boolean, lossParallel: boolean, tied: boolean }, [
      'size',
      'rank',
    ]),
    contextParallel: fields({ size: integer(1, 1_000_000), rank: integer(0, 1_000_000), loadBalance: boolean }, ['size', 'rank']),
    expertParallel: parallelRank,
    moe: fields({ experts: size, k: size, moeLayers: integer(0, LIMITS.layers), expertParams: count, sharedExperts: count, inactiveParams: count }, [
      'experts',
      'k',
      'moeLayers',
      'expertParams',
      'sharedExperts',
      'inactiveParams',
    ]),
    mla: fields(
      {
        kvLoraRank: size,
        qkRopeHeadDim: size,
        qkNopeHeadDim: size,
        vHeadDim: size,
        qLoraRank: (v, p, i) => (v === null ? undefined : size(v, p, i)),
        latentPerToken: size,
        hfCachePerToken: size,
      },
      ['latentPerToken'],
    ),
  },
  ['kind', 'family', 'layers', 'heads', 'kvHeads', 'headDim', 'hidden', 'vocab', 'intermediate', 'gatedMlp', 'tied'],
);

/** ModelMeta as the catalog's decoder builders record it: its fields, and a head width wherever the cache holds heads (no latent). */
export const metaCheck: Check = (value, path, issues) => {
  const before = issues.length;
  metaFields(value, path, issues);
  const meta = value as Partial<ModelMeta>;
  if (issues.length === before && meta.mla === undefined && meta.headDim === 0)
    issues.push({ path: [...path, 'headDim'], code: 'bad-meta', message: 'a cache of heads needs their width', expected: 'integer ≥ 1', received: '0' });
};

/** A model's `repeated` record (identical blocks traced three at a time), when it has one. */
const repeatedCheck: Check = fields(
  {
    count: integer(1, LIMITS.repeat),
    prefix: string,
    body: (v, p, i) => {
      if (typeof v !== 'object' || v === null) i.push({ path: p, code: 'bad-layer', message: 'must be the model body', received: show(v) });
    },
    withCount: (v, p, i) => {
      if (typeof v !== 'function') i.push({ path: p, code: 'bad-layer', message: 'must be a function', expected: 'function', received: show(v) });
    },
  },
  ['count', 'prefix', 'body', 'withCount'],
);

/** A dtype name, where a model records one. */
const dtypeCheck = oneOf(Object.keys(DTYPE_BITS), 'dtype');

/** A decoder's meta (ModelMeta) checked on its own, as vllmPageBytes takes it: a VramError naming each bad field. */
export function checkedMeta(meta: unknown, path: Path): ModelMeta {
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta))
    fail('bad-meta', 'must be a decoder model meta (model.meta of fromHFConfig / llm / llamaFamily)', { path, expected: 'ModelMeta', received: show(meta) });
  return validate(meta, metaCheck, path) as ModelMeta;
}

/**
 * A decoder model from the catalog (fromHFConfig, llm, llamaFamily, moeFromHFConfig, …) for
 * `who`: a module layer whose meta, dtype, `repeated` and `withHead` are as the builders make
 * them; anything else is a VramError at `path` saying which model is needed (vllmEngine's
 * `decoderModel(model, ['model'], 'vllmEngine')`).
 */
export function decoderModel(model: unknown, path: Path, who: string): ModuleLayer & { readonly meta: ModelMeta } {
  const needed = `${who} needs a decoder model from the catalog (build it with fromHFConfig, llm or llamaFamily)`;
  const problem = layerProblem(model);
  if (problem !== undefined) fail('bad-layer', `${needed}: ${problem}`, { path, expected: 'a decoder model', received: show(model) });
  const layer = model as ModuleLayer;
  if (layer.kind !== 'module' || layer.meta === undefined)
    fail('not-modelled', `${needed}: this layer records no decoder meta`, { path, expected: 'a decoder model', received: layer.className ?? layer.kind });
  const issues: VramIssue[] = [];
  metaCheck(layer.meta, [...path, 'meta'], issues);
  if (layer.dtype !== undefined) dtypeCheck(layer.dtype, [...path, 'dtype'], issues);
  if (layer.repeated !== undefined) repeatedCheck(layer.repeated, [...path, 'repeated'], issues);
  if (layer.withHead !== undefined && typeof layer.withHead !== 'function')
    issues.push({ path: [...path, 'withHead'], code: 'bad-layer', message: 'must be a function', expected: 'function', received: show(layer.withHead) });
  if (issues.length > 0) throw new VramError(issues);
  return layer as ModuleLayer & { readonly meta: ModelMeta };
}

/** An options argument: a plain object (its fields are checked by the caller's schema), else a VramError at `path`. */
export function optionsObject<T>(options: T, path: Path): T {
  const proto = typeof options === 'object' && options !== null && !Array.isArray(options) ? Object.getPrototypeOf(options) : undefined;
  if (proto !== Object.prototype && proto !== null)
    fail('bad-option', 'must be an options object ({ … })', { path, expected: 'a plain object', received: show(options) });
  return options;
}

/** A byte count that must stay an exact integer: else a VramError at `path` (the inputs are too large for `what`). */
export function exactBytes(bytes: number, path: Path, what: string): number {
  if (!Number.isSafeInteger(bytes) || bytes < 0)
    fail('too-large', `the sizes make ${what} too large to count exactly`, { path, expected: 'at most 2^53 - 1 bytes', received: String(bytes) });
  return bytes;
}
