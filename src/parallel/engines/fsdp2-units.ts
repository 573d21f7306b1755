import { fail } from '../../errors.js';
import type { Dim } from '../../sym/expr.js';
import { mul, sum } from '../../sym/ops.js';
import type { TensorSpec } from '../../tensor/spec.js';
import type { IR } from '../../trace/ir.js';

/* FSDP2's units and its dim-0 chunking (fsdp2.ts's shapes; not an engine). */

/** A parameter's dim-0 chunking over d ranks, as torch.chunk and FSDP2's padding make it. */
export function chunking(spec: TensorSpec, d: number): { readonly rows: number; readonly rest: Dim; readonly dim0: number } {
  const dim0 = spec.shape.length === 0 ? 1 : (spec.shape[0] as number);
  const rows = Math.ceil(dim0 / d);
  return {
    rows,
    rest:
      spec.shape.length === 0
        ? 1
        : mul(
            1,
            spec.shape.slice(1).reduce<Dim>((a, b) => mul(a, b), 1),
          ),
    dim0,
  };
}

/**
 * One `fully_shard` call on several modules at once: one parameter group, gathered before the
 * first of them runs, resharded (if it does) after the last, and reduced once the backward has
 * passed all of them (accelerate 1.15 wraps `[final_norm, lm_head]` so, and a tied embedding
 * with them), with its own `reshard_after_forward`. Units between its modules run as usual.
 *
 * @example
 * ```ts
 * import type { Fsdp2UnitGroup } from 'vram-ts';
 * const tail: Fsdp2UnitGroup = { modules: ['model.norm', 'lm_head'], reshardAfterForward: false };
 * ```
 */
export interface Fsdp2UnitGroup {
  /** Module keys given to the one `fully_shard` call, in any order. */
  readonly modules: readonly string[];
  /** This unit's `reshard_after_forward` (default: the plan's `reshardAfterForward`). */
  readonly reshardAfterForward?: boolean;
}

/** A unit as a plan names it: one module key, or a group of modules wrapped together. */
export type Fsdp2UnitSpec = string | Fsdp2UnitGroup;

/** The module keys a list of units names (what must exist in the model). */
export function unitModuleKeys(units: readonly Fsdp2UnitSpec[]): string[] {
  return units.flatMap((unit) => (typeof unit === 'string' ? [unit] : unit.modules));
}

/** One `fully_shard` unit: wrapped modules (or the root) and the parameters it manages. */
export interface Unit {
  /** The first of its modules (the root's is 0). */
  readonly module: number;
  /** Every module of the `fully_shard` call (one, but for a group). */
  readonly modules: readonly number[];
  /** The first op of its modules and one past the last: its forward runs in between. */
  readonly firstOp: number;
  readonly endOp: number;
  readonly root: boolean;
  /** Whether its unsharded parameters go after its forward (`reshard_after_forward`; never the root's). */
  readonly reshard: boolean;
  /** Parameter tensors it manages (those of its modules not in a nested unit). */
  readonly params: readonly number[];
  /** Σ padded unsharded elements × compute bytes: the all-gather output and the unsharded parameters. */
  readonly gathered: Dim;
  /** Σ padded shard elements (one rank's share). */
  readonly shardNumel: Dim;
}

/** What the units are made from: Fsdp2Settings' shard degree and wrapped module keys. */
export interface UnitChoice {
  /** Shard degree d (the data-parallel mesh size). */
  readonly shards: number;
  /** Units wrapped with `fully_shard` (each its own parameter group); the root is always one. */
  readonly units: readonly Fsdp2UnitSpec[];
  /** Whether `units` are the user's (each must name a module: a VramError otherwise) or the defaults. */
  readonly unitsGiven: boolean;
  /** `reshard_after_forward` of a unit that does not give its own. */
  readonly reshardAfterForward: boolean;
}

/** How the timeline names a unit: its module keys (joined by `+`), or `root`. */
export function labelOf(ir: IR, unit: Unit): string {
  if (unit.root) return 'root';
  return unit.modules.map((m) => ir.modules[m]!.key).join('+');
}

interface Wrap {
  readonly modules: readonly number[];
  readonly reshard: boolean;
  /** Where the plan names it (for errors). */
  readonly at: number;
}

/** The plan's units resolved to module indices: unknown keys and a module wrapped twice are errors. */
function wrapsOf(ir: IR, settings: UnitChoice): Wrap[] {
  const byKey = new Map(ir.modules.map((m) => [m.key, m.index]));
  const taken = new Set<number>([0]);
  const wraps: Wrap[] = [];
  settings.units.forEach((spec, i) => {
    const keys = typeof spec === 'string' ? [spec] : spec.modules;
    const modules: number[] = [];
    keys.forEach((key, j) => {
      const path = typeof spec === 'string' ? ['parallel', 'units', i] : ['parallel', 'units', i, 'modules', j];
      const module = byKey.get(key);
      // Default units of a model traced with reduced repeated blocks name blocks not traced: counted by `times`.
      if (module === undefined) {
        if (settings.unitsGiven)
          fail('bad-option', `no module "${key}" to wrap with fully_shard`, {
            path,
            expected: 'a module key of the model (as in the breakdown)',
            received: JSON.stringify(key),
          });
        return;
      }
      // fully_shard on a module already wrapped is an error in torch (and the root is always wrapped).
      if (taken.has(module))
        fail('bad-option', `module "${key}" is already in a fully_shard unit`, {
          path,
          expected: 'each module in one unit at most (the root is always one)',
          received: JSON.stringify(key),
        });
      taken.add(module);
      modules.push(module);
    });
    if (modules.length > 0)
      wraps.push({
        modules,
        reshard: typeof spec === 'string' ? settings.reshardAfterForward : (spec.reshardAfterForward ?? settings.reshardAfterForward),
        at: i,
      });
  });
  return wraps;
}

const spanOf = (ir: IR, modules: readonly number[]) => ({
  firstOp: Math.min(...modules.map((m) => ir.modules[m]!.firstOp)),
  endOp: Math.max(...modules.map((m) => ir.modules[m]!.endOp)),
});

/** The FSDP units: each wrapped module or group and the root, with the parameters each manages. */
export function unitsOf(ir: IR, settings: UnitChoice): Unit[] {
  const wraps = wrapsOf(ir, settings);
  // A module's parameters belong to its innermost wrapped ancestor (itself included).
  const wrapOfModule = new Int32Array(ir.modules.length).fill(-1);
  wraps.forEach((w, i) => {
    for (const m of w.modules) wrapOfModule[m] = i + 1;
  });
  wrapOfModule[0] = 0;
  const unitOfModule = new Int32Array(ir.modules.length);
  for (const m of ir.modules) unitOfModule[m.index] = wrapOfModule[m.index]! >= 0 ? wrapOfModule[m.index]! : m.parent === null ? 0 : unitOfModule[m.parent]!;
  const params = new Map<number, number[]>();
  const seen = new Set<number>();
  for (const m of ir.modules)
    for (const p of m.params) {
      if (seen.has(p)) continue;
      seen.add(p);
      const u = unitOfModule[m.index]!;
      params.set(u, [...(params.get(u) ?? []), p]);
    }
  const all: Wrap[] = [{ modules: [0], reshard: false, at: -1 }, ...wraps];
  return all.map((w, index) => {
    const own = params.get(index) ?? [];
    const shardNumel = sum(
      own.map((p) => {
        const { rows, rest } = chunking(ir.tensors[p]!.spec, settings.shards);
        return mul(rows, rest);
      }),
    );
    return {
      module: w.modules[0]!,
      modules: w.modules,
      ...spanOf(ir, w.modules),
      root: index === 0,
      reshard: index !== 0 && w.reshard,
      params: own,
      gathered: mul(shardNumel, settings.shards),
      shardNumel,
    };
  });
}
