import { VramError, fail, type VramIssue } from '../errors.js';
import { LIMITS } from '../limits.js';
import { func, integer, string, validate } from '../validate.js';
import { layerCheck, layerProblem } from './layer-check.js';
import type { Layer, ModuleLayer, RepeatedBlocks } from './types.js';

const blockCount = integer(0, LIMITS.layers);

/** The records repeatedBlocks made: only these are trusted to say how many blocks a body holds. */
const DECLARED = new WeakSet<object>();

/**
 * A model's `repeated` record where {@link repeatedBlocks} made it for this very body, else
 * undefined: a hand-made or edited record (a spread copy with another count) is not believed, and
 * the model is traced whole instead of three blocks counted over.
 */
export function declaredBlocks(model: Layer): RepeatedBlocks | undefined {
  const repeated = model.kind === 'module' ? model.repeated : undefined;
  return typeof repeated === 'object' && repeated !== null && DECLARED.has(repeated) && repeated.body === (model as ModuleLayer).body ? repeated : undefined;
}

/** A model a callback built: a module layer (the model whose body it replaces), or a VramError at `path`. */
function built(model: unknown, path: readonly string[]): ModuleLayer {
  const problem = layerProblem(model) ?? ((model as Layer).kind !== 'module' ? 'must be a module layer (a model)' : undefined);
  if (problem !== undefined)
    fail('bad-layer', problem, {
      path,
      expected: 'a module layer',
      received: typeof model === 'object' && model !== null ? String((model as Layer).kind) : String(model),
    });
  return model as ModuleLayer;
}

/**
 * Declares a model's identical blocks for {@link ModuleLayer.repeated}: `count` blocks keyed
 * `${prefix}${i}` in `body` (the model's body: a copy of the model with another body is not
 * what the declaration describes, and estimate then traces it whole), how to build the
 * same model with another count (each count built once), and optionally one pipeline stage of
 * it (blocks [start, end), see {@link RepeatedBlocks.stage}). Every argument is checked: `count`
 * an integer from 0 to `LIMITS.layers`, `prefix` a string, `body` a layer, `build` and
 * `stage` functions returning module layers (checked when called).
 *
 * @example
 * ```ts
 * import { repeatedBlocks } from 'vram-ts';
 * const body = { kind: 'seq', className: 'Sequential', isSequential: true, children: [] } as const;
 * const blocks = repeatedBlocks(32, 'model.layers.', body, (count) => ({ kind: 'module', className: `Net${count}`, body: { kind: 'seq', className: 'Sequential', isSequential: true, children: [] } }));
 * console.log(blocks.count, blocks.withCount(3).className); // 32 Net3
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function repeatedBlocks(
  count: number,
  prefix: string,
  body: Layer,
  build: (count: number) => ModuleLayer,
  stage?: (start: number, end: number) => ModuleLayer,
): RepeatedBlocks {
  // Every problem at once.
  const issues: VramIssue[] = [];
  blockCount(count, ['repeatedBlocks', 'count'], issues);
  string(prefix, ['repeatedBlocks', 'prefix'], issues);
  layerCheck(body, ['repeatedBlocks', 'body'], issues);
  func(build, ['repeatedBlocks', 'build'], issues);
  if (stage !== undefined) func(stage, ['repeatedBlocks', 'stage'], issues);
  if (issues.length > 0) throw new VramError(issues);
  const models = new Map<number, ModuleLayer>();
  const declared: RepeatedBlocks = Object.freeze({
    count,
    prefix,
    body,
    ...(stage !== undefined
      ? {
          stage: (start: number, end: number) => {
            validate(start, integer(0, count), ['repeatedBlocks', 'stage', 'start']);
            validate(end, integer(start + 1, count), ['repeatedBlocks', 'stage', 'end']);
            return built(stage(start, end), ['repeatedBlocks', 'stage']);
          },
        }
      : {}),
    withCount: (n: number) => {
      let model = models.get(n);
      if (model === undefined) {
        validate(n, blockCount, ['repeatedBlocks', 'withCount']);
        model = built(build(n), ['repeatedBlocks', 'build']);
        models.set(n, model);
      }
      return model;
    },
  });
  DECLARED.add(declared);
  return declared;
}
