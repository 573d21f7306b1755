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

/** One `fully_shard` unit: a wrapped module (or the root) and the parameters it manages. */
export interface Unit {
  readonly module: number;
  readonly firstOp: number;
  readonly endOp: number;
  readonly root: boolean;
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
  /** Module keys wrapped with `fully_shard` (each its own unit); the root is always one. */
  readonly units: readonly string[];
  /** Whether `units` are the user's (each must name a module: a VramError otherwise) or the defaults. */
  readonly unitsGiven: boolean;
}

/** How the timeline names a unit: its module key, or `root`. */
export function labelOf(ir: IR, unit: Unit): string {
  const key = ir.modules[unit.module]!.key;
  return key === '' ? 'root' : key;
}

/** The FSDP units: each wrapped module and the root, with the parameters each manages. */
export function unitsOf(ir: IR, settings: UnitChoice): Unit[] {
  const wrapped = new Set<number>([0]);
  const byKey = new Map(ir.modules.map((m) => [m.key, m.index]));
  settings.units.forEach((key, i) => {
    const module = byKey.get(key);
    if (module !== undefined) wrapped.add(module);
    // Default units of a model traced with reduced repeated blocks name blocks not traced: counted by `times`.
    else if (settings.unitsGiven)
      fail('bad-option', `no module "${key}" to wrap with fully_shard`, {
        path: ['parallel', 'units', i],
        expected: 'a module key of the model (as in the breakdown)',
        received: JSON.stringify(key),
      });
  });
  // A module's parameters belong to its innermost wrapped ancestor (itself included).
  const unitOfModule = new Int32Array(ir.modules.length);
  for (const m of ir.modules) unitOfModule[m.index] = wrapped.has(m.index) ? m.index : m.parent === null ? 0 : unitOfModule[m.parent]!;
  const params = new Map<number, number[]>();
  const seen = new Set<number>();
  for (const m of ir.modules)
    for (const p of m.params) {
      if (seen.has(p)) continue;
      seen.add(p);
      const u = unitOfModule[m.index]!;
      params.set(u, [...(params.get(u) ?? []), p]);
    }
  return [...wrapped].map((index) => {
    const m = ir.modules[index]!;
    const own = params.get(index) ?? [];
    const shardNumel = sum(
      own.map((p) => {
        const { rows, rest } = chunking(ir.tensors[p]!.spec, settings.shards);
        return mul(rows, rest);
      }),
    );
    return { module: index, firstOp: m.firstOp, endOp: m.endOp, root: index === 0, params: own, gathered: mul(shardNumel, settings.shards), shardNumel };
  });
}
