import type { VramIssue } from '../errors.js';
import { fail } from '../errors.js';
import { LIMITS } from '../limits.js';
import { frozenAttrs } from '../ops/attrs.js';
import { show, type Check, type Path } from '../validate.js';

// What a layer must look like before anything reads it: builders check their children with it,
// and the tracer checks every node it walks, so a hand-made or broken layer is a VramError with
// its path, never a TypeError deep in the trace.

const MERGES: readonly string[] = ['add', 'mul', 'concat'];

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;
const optionalLayer = (value: unknown) => value === undefined || isObject(value);

const optionalBoolean = (value: unknown) => value === undefined || typeof value === 'boolean';

/** What is wrong with a node of each kind, or undefined when its fields are as builders make them. */
const NODE_PROBLEMS: Readonly<Record<string, (node: Record<string, unknown>) => string | undefined>> = {
  op: (node) => {
    const rule = node.rule;
    const attrs = node.attrs;
    if (typeof attrs !== 'object' || attrs === null || Array.isArray(attrs) || ![Object.prototype, null].includes(Object.getPrototypeOf(attrs)))
      return "an op layer's attrs must be a plain object";
    if (
      !isObject(rule) ||
      typeof rule.name !== 'string' ||
      typeof rule.apply !== 'function' ||
      !(rule.arity === 'variadic' || Number.isSafeInteger(rule.arity))
    )
      return 'an op layer needs an op rule (name, arity and apply)';
    return typeof node.className === 'string' || node.className === null ? undefined : 'an op layer needs a className (a string or null)';
  },
  seq: (node) =>
    Array.isArray(node.children) && typeof node.className === 'string' && typeof node.isSequential === 'boolean'
      ? undefined
      : 'a sequence needs a className, isSequential (true or false) and a list of children',
  module: (node) => (isObject(node.body) && typeof node.className === 'string' ? undefined : 'a module needs a className and a body layer'),
  residual: (node) =>
    isObject(node.body) && optionalLayer(node.shortcut) && optionalLayer(node.downsample) && typeof node.inplace === 'boolean' && optionalBoolean(node.inline)
      ? undefined
      : 'a residual needs a body layer, inplace (true or false), and layers as shortcut or downsample',
  branch: (node) =>
    Array.isArray(node.paths) &&
    typeof node.merge === 'string' &&
    MERGES.includes(node.merge) &&
    typeof node.className === 'string' &&
    optionalBoolean(node.inline)
      ? undefined
      : `a branch needs a className, a list of paths and a merge (${MERGES.join(' | ')})`,
  graph: (node) => (typeof node.build === 'function' ? undefined : 'a graph layer needs a build function'),
};

/** The fields each kind of layer has (types.ts): any other is no field of a layer this package reads. */
const FIELDS: Readonly<Record<string, readonly string[]>> = {
  op: ['kind', 'rule', 'attrs', 'className', 'name'],
  seq: ['kind', 'className', 'isSequential', 'children', 'name'],
  module: [
    'kind',
    'className',
    'body',
    'name',
    'inputDtype',
    'dtype',
    'meta',
    'quantization',
    'childOrder',
    'idleChildren',
    'functionalChildren',
    'repeated',
    'withHead',
  ],
  residual: ['kind', 'body', 'inplace', 'shortcut', 'downsample', 'inline', 'name'],
  branch: ['kind', 'className', 'paths', 'merge', 'inline', 'name'],
  graph: ['kind', 'build', 'name'],
};

/** A layer as the builders make it (its own fields, not its children's: the tracer checks each node it reaches). */
export const layerCheck: Check = (value, path, issues) => {
  const problem = layerProblem(value);
  if (problem !== undefined) issues.push(layerIssue(path, problem, value));
};

/** Why a value is not a layer, or undefined when it is one. */
export function layerProblem(value: unknown): string | undefined {
  if (!isObject(value)) return 'must be a layer (built with this package)';
  const kind = value.kind;
  if (typeof kind !== 'string' || !Object.hasOwn(NODE_PROBLEMS, kind)) return 'must be a layer (built with this package): unknown kind';
  if (value.name !== undefined && typeof value.name !== 'string') return 'a layer name must be a string';
  const known = FIELDS[kind]!;
  for (const key of Object.keys(value)) if (!known.includes(key)) return `the ${kind} layer has no field ${JSON.stringify(key)}`;
  return NODE_PROBLEMS[kind]!(value);
}

function layerIssue(path: Path, message: string, value: unknown): VramIssue {
  return { path, code: 'bad-layer', message, expected: 'a layer: op | seq | module | residual | branch | graph', received: show(value) };
}

/** The fields of a layer that hold layers. */
const LAYER_FIELDS = ['body', 'shortcut', 'downsample'] as const;
const LAYER_LISTS = ['children', 'paths'] as const;

/**
 * A layer as immutable data: a builder's layer (frozen) as it is; a hand-made one (checked by
 * {@link layerCheck} first) as a frozen copy, its child layers too, and its plain-data fields
 * (attrs, meta) frozen copies, so that changing the caller's object later changes no built model.
 * Op rules and functions are kept as they are (a rule's identity is what the tracer compares).
 */
export function frozenLayer<T>(layer: T, depth = 1): T {
  if (typeof layer !== 'object' || layer === null || Object.isFrozen(layer)) return layer;
  if (depth > LIMITS.depth) fail('too-deep', 'the model nests too deeply', { path: ['model'], expected: `at most ${LIMITS.depth} levels` });
  const copy: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(layer)) {
    if ((LAYER_FIELDS as readonly string[]).includes(key)) copy[key] = frozenLayer(value, depth + 1);
    else if ((LAYER_LISTS as readonly string[]).includes(key) && Array.isArray(value))
      copy[key] = Object.freeze(value.map((child) => frozenLayer(child, depth + 1)));
    else if (key === 'rule' || typeof value === 'function') copy[key] = value;
    else copy[key] = frozenAttrs(value);
  }
  return Object.freeze(copy) as T;
}
