import { fail } from '../errors.js';
import type { BranchLayer, GraphLayer, Layer, OpLayer, TensorRef } from '../nn/types.js';
import { opLayer } from '../nn/op.js';
import { linearOp, type LinearAttrs } from '../ops/linear.js';
import { addOp, catOp, mulOp } from '../ops/merge.js';
import { bounds } from '../sym/bounds.js';
import { formatDim } from '../sym/format.js';
import { loraTarget, traceLora } from './lora.js';
import { QUANT_CLASS, childKey, isLinear, quantFor } from './quant.js';
import { runOp, runOpModule } from './run-op.js';
import { checkRef, checkRefs, closeModule, current, defaultName, first, modulePath, openShared, type State } from './state.js';
import { checkDepth } from './depth.js';
import { isExpr } from '../sym/expr.js';
import type { OpRule } from '../ops/types.js';
import { show } from '../validate.js';

// The walk over a model's layers: each kind of layer becomes modules and ops.

/** Traces one layer in the current module (`slot` names it when the layer has no name); returns its outputs. */
export function traceLayer(state: State, layer: Layer, inputs: readonly TensorRef[], slot: string | undefined): TensorRef[] {
  const name = layer.name ?? slot ?? defaultName(state);
  switch (layer.kind) {
    case 'op':
      return traceOp(state, layer, inputs, name);
    case 'seq': {
      const module = openShared(state, layer, name, layer.className, inputs, layer.isSequential);
      let current = inputs;
      layer.children.forEach((child, i) => {
        current = traceLayer(state, child, [first(current, module.path)], String(i));
      });
      closeModule(state, module, current);
      return [...current];
    }
    case 'module': {
      const module = openShared(state, layer, name, layer.className, inputs, false);
      if (layer.childOrder !== undefined) module.childOrder = layer.childOrder;
      if (layer.idleChildren !== undefined) module.idleChildren = layer.idleChildren;
      if (layer.functionalChildren !== undefined) module.functionalChildren = layer.functionalChildren;
      const outputs = traceLayer(state, layer.body, inputs, undefined);
      closeModule(state, module, outputs);
      return outputs;
    }
    case 'residual': {
      const x = first(inputs, modulePath(state));
      const shortcut = layer.shortcut ? first(traceLayer(state, layer.shortcut, [x], undefined), modulePath(state)) : x;
      const body = first(
        layer.inline === true ? traceInline(state, layer.body, [x], layer.name ?? slot) : traceLayer(state, layer.body, [x], layer.name ?? slot),
        modulePath(state),
      );
      // torchvision's blocks: `out = body(x); identity = self.downsample(x); out += identity`.
      const identity = layer.downsample ? first(traceLayer(state, layer.downsample, [x], undefined), modulePath(state)) : shortcut;
      return runOp(state, addOp, { inplace: layer.inplace }, [body, identity]);
    }
    case 'branch':
      return traceBranch(state, layer, inputs, name);
    case 'graph':
      return traceGraph(state, layer, inputs);
    default:
      return fail('bad-layer', 'not a vram-ts layer', { path: modulePath(state), received: String((layer as { kind?: unknown }).kind) });
  }
}

/** An op layer: a bare op, a LoRA-adapted Linear, a quantized Linear, or a module around its op. */
function traceOp(state: State, given: OpLayer<unknown>, inputs: readonly TensorRef[], name: string): TensorRef[] {
  if (given.className === null) return runOp(state, given.rule, given.attrs, inputs);
  if (state.options.lora !== undefined && !state.adapting && isLinear(given)) state.linearNames.add(name);
  if (loraTarget(state, given, name)) {
    state.adapted += 1;
    return traceLora(state, given, inputs, name);
  }
  let layer = given;
  let className = given.className;
  if (!state.adapting && state.options.quantize !== undefined && isLinear(given)) {
    const scheme = quantFor(state, childKey(state, name));
    if (scheme !== undefined) {
      className = QUANT_CLASS[scheme.method];
      layer = opLayer(linearOp, className, { ...(given.attrs as LinearAttrs), quant: scheme }, { name });
    }
  }
  return runOpModule(state, layer, name, className, inputs);
}

/** A sequence's children run in the enclosing module (named by their names or indexes); any other layer is traced as it is. */
function traceInline(state: State, layer: Layer, inputs: readonly TensorRef[], slot: string | undefined): TensorRef[] {
  if (layer.kind !== 'seq') return traceLayer(state, layer, inputs, slot);
  let current = inputs;
  layer.children.forEach((child, i) => {
    current = traceLayer(state, child, [first(current, modulePath(state))], String(i));
  });
  return [...current];
}

/** A branch: its paths over the same input, merged; in its own module unless inline. */
function traceBranch(state: State, layer: BranchLayer, inputs: readonly TensorRef[], name: string): TensorRef[] {
  if (layer.inline === true) {
    const x = first(inputs, modulePath(state));
    const outs = layer.paths.map((path, i) => first(traceInline(state, path, [x], String(i)), modulePath(state)));
    return mergePaths(state, layer, outs, modulePath(state));
  }
  const module = openShared(state, layer, name, layer.className, inputs, false);
  const x = first(inputs, module.path);
  const outs = layer.paths.map((path, i) => first(traceLayer(state, path, [x], String(i)), module.path));
  const merged = mergePaths(state, layer, outs, module.path);
  closeModule(state, module, merged);
  return merged;
}

/** A branch's merge of its path outputs: concat along channels, or add/mul left to right. */
function mergePaths(state: State, layer: BranchLayer, outs: readonly TensorRef[], path: readonly string[]): TensorRef[] {
  if (outs.length === 0) fail('empty-branch', 'a branch needs at least one path', { path });
  if (layer.merge === 'concat') return runOp(state, catOp, { dim: 1 }, outs);
  const rule = layer.merge === 'add' ? addOp : mulOp;
  let merged: TensorRef[] = [outs[0]!];
  for (const next of outs.slice(1)) merged = runOp(state, rule, {}, [merged[0]!, next]);
  return merged;
}

/** A graph layer: its build function runs with a tracer that applies layers, calls op rules and holds tensors. */
function traceGraph(state: State, layer: GraphLayer, inputs: readonly TensorRef[]): TensorRef[] {
  // Every argument is checked where it enters: a graph is user code, and a wrong argument must be
  // a VramError at the module's path, not a TypeError inside the tracer.
  const at = (what: string) => () => [...modulePath(state), what];
  const tensors = (args: readonly unknown[], what: string) => checkRefs(state, args, at(what));
  const applied = (child: Layer, args: readonly unknown[], what: string) => {
    checkDepth(child, at(what));
    return traceLayer(state, child, tensors(args, what), undefined);
  };
  const built: unknown = layer.build(
    {
      apply: (child, ...args) => first(applied(child, args, 'apply'), modulePath(state)),
      applyAll: (child, ...args) => applied(child, args, 'applyAll'),
      call: (rule, args, attrs) => {
        checkRule(rule, at('call'));
        return runOp(state, rule, attrs, tensors(args, 'call'));
      },
      path: Object.freeze(modulePath(state)),
      training: state.options.training,
      gradEnabled: state.options.gradEnabled,
      checkpointing: state.options.gradEnabled && state.options.checkpoint !== undefined,
      device: state.options.device,
      hold: (t, until = 'module') => {
        const storage = state.tensors[checkRef(state, t, at('hold')).id]!.storage;
        if (until === 'forward') state.holdsToEnd.add(storage);
        else if (until === 'module') current(state).held.push(storage);
        else fail('bad-option', "hold's until is 'module' or 'forward'", { path: at('hold')(), expected: "'module' | 'forward'", received: show(until) });
      },
      touch: (t) => {
        state.holds.push({ storage: state.tensors[checkRef(state, t, at('touch')).id]!.storage, until: state.ops.length - 1 });
      },
      endForward: () => {
        for (const storage of state.holdsToEnd) state.holds.push({ storage, until: state.ops.length - 1 });
        state.holdsToEnd.clear();
        state.autocastCopies.clear();
        state.stage = 'loss';
      },
      require: (value, message) => {
        if (typeof value !== 'number' ? !isExpr(value) : !Number.isFinite(value))
          fail('bad-option', "require's value must be a dimension (a number or a symbolic expression)", {
            path: at('require')(),
            expected: 'Dim',
            received: show(value),
          });
        if (typeof value === 'number' ? value < 1 : bounds(value).max < 1)
          fail('bad-input', String(message), { path: modulePath(state), expected: '>= 1', received: formatDim(value) });
        if (typeof value !== 'number' && bounds(value).min < 1) state.constraints.set(value.key, value);
      },
    },
    inputs,
  );
  return Array.isArray(built) ? [...checkRefs(state, built, at('build'))] : [checkRef(state, built, at('build'))];
}

/** A graph's `call` rule: an op rule (a name, an arity and an apply function). */
function checkRule(rule: unknown, where: () => readonly string[]): void {
  const r = rule as Partial<OpRule<unknown>> | null;
  const ok =
    typeof r === 'object' &&
    r !== null &&
    typeof r.name === 'string' &&
    typeof r.apply === 'function' &&
    (r.arity === 'variadic' || Number.isSafeInteger(r.arity));
  if (!ok) fail('bad-option', 'must be an op rule (such as matmulOp)', { path: where(), expected: 'OpRule', received: show(rule) });
}
