/**
 * The module paths estimate's options name (`freeze`, `checkpoint.modules`, `checkpoint.within`)
 * must exist in the traced model: a path that names nothing would be ignored, giving the same
 * number as without it.
 */
import { VramError, type VramIssue } from './errors.js';
import type { EstimateOptions } from './estimate-types.js';
import type { IR } from './trace/ir.js';

/** Every option path that names no module (or, for freeze, no parameter) of `ir`, one issue each. */
export function checkModuleNames(ir: IR, options: EstimateOptions): void {
  // Most estimates name no module: nothing to look up (a search checks every cached trace again).
  if (options.freeze === undefined && options.checkpoint?.modules === undefined && options.checkpoint?.within === undefined) return;
  const { modules, params } = namesOf(ir);
  const issues: VramIssue[] = [];
  const known = (path: string) => modules.has(path);
  // Named without block indices, so that a model traced with its repeated blocks reduced says the same.
  const someModules = () =>
    [...modules]
      .filter((k) => k !== '' && !/(^|\.)\d+(\.|$)/.test(k))
      .slice(0, 8)
      .join(' | ');
  (options.freeze ?? []).forEach((prefix, i) => {
    if (prefix === '' || known(prefix) || params.some((k) => k === prefix || k.startsWith(`${prefix}.`))) return;
    issues.push({
      path: ['freeze', i],
      code: 'bad-option',
      message: 'names no module or parameter of the model',
      expected: someModules(),
      received: JSON.stringify(prefix),
    });
  });
  const plan = options.checkpoint;
  plan?.modules?.forEach((path, i) => {
    if (!known(path))
      issues.push({
        path: ['checkpoint', 'modules', i],
        code: 'bad-option',
        message: 'names no module of the model',
        expected: someModules(),
        received: JSON.stringify(path),
      });
  });
  if (plan?.within !== undefined && !known(plan.within))
    issues.push({
      path: ['checkpoint', 'within'],
      code: 'bad-option',
      message: 'names no module of the model',
      expected: someModules(),
      received: JSON.stringify(plan.within),
    });
  if (issues.length > 0) throw new VramError(issues);
}

/** A trace's module keys and parameter names, made once per trace (a trace is immutable). */
const names = new WeakMap<IR, { readonly modules: ReadonlySet<string>; readonly params: readonly string[] }>();

function namesOf(ir: IR): { readonly modules: ReadonlySet<string>; readonly params: readonly string[] } {
  let found = names.get(ir);
  if (found === undefined) {
    found = {
      modules: new Set(ir.modules.map((m) => m.key)),
      params: ir.tensors.filter((t) => t.role === 'param' && t.key !== undefined).map((t) => t.key!),
    };
    names.set(ir, found);
  }
  return found;
}
