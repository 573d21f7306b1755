import { tracedModel } from '../estimate.js';
import { fail } from '../errors.js';
import { DTYPE_BITS } from '../tensor/dtype.js';
import type { IR, IRModule } from '../trace/ir.js';
import { integer, object, oneOf, string, validate } from '../validate.js';
import { listOf } from './arguments.js';
import { ljust, pyFixed, pyList, pyThousands } from './pyformat.js';

/** The columns torchinfo can show (its `col_names`). */
export type TorchinfoColumn = 'input_size' | 'output_size' | 'num_params' | 'params_percent' | 'kernel_size' | 'groups' | 'mult_adds' | 'trainable';

/** Options of the torchinfo-compatible table, as torchinfo.summary takes them. */
export interface TorchinfoOptions {
  /** Rows deeper than this are hidden (default 3). */
  readonly depth?: number;
  /** Columns (default output_size, num_params). */
  readonly columns?: readonly TorchinfoColumn[];
  /** Column width (default 25). */
  readonly colWidth?: number;
  /**
   * Bytes torchinfo adds per input tensor: it measures inputs with Python's
   * sys.getsizeof of the storage, 56 B of object header on torch 1.13 / CPython 3.11.
   */
  readonly inputObjectOverhead?: number;
  /** Class name of a module wrapping the model (the seed's `PlantDiseaseClassifier`): one more level. */
  readonly wrapper?: string;
}

/** TorchinfoOptions, key by key (an unknown key is an error with the closest known one). */
const torchinfoOptions = object({
  fields: {
    depth: integer(0, 1000),
    columns: listOf(oneOf(['input_size', 'output_size', 'num_params', 'params_percent', 'kernel_size', 'groups', 'mult_adds', 'trainable'], 'column'), 64),
    colWidth: integer(1, 1000),
    inputObjectOverhead: integer(0),
    wrapper: string,
  },
});

const TITLES: Readonly<Record<TorchinfoColumn, string>> = {
  input_size: 'Input Shape',
  output_size: 'Output Shape',
  num_params: 'Param #',
  params_percent: 'Param %',
  kernel_size: 'Kernel Shape',
  groups: 'Groups',
  mult_adds: 'Mult-Adds',
  trainable: 'Trainable',
};

interface Row {
  readonly module: IRModule;
  readonly className: string;
  readonly depth: number;
  readonly layerId: number;
  readonly isLeaf: boolean;
  readonly recursive: boolean;
  readonly numParams: number;
  readonly trainableParams: number;
  readonly paramBytes: number;
  readonly inputSize: readonly number[];
  readonly outputSize: readonly number[];
  readonly outputBytes: number;
  readonly macs: number;
  depthIndex: number;
  descendants: Row[];
  leftover?: number;
}

function concrete(values: readonly unknown[], module: IRModule): number[] {
  return values.map((v) => {
    if (typeof v !== 'number') fail('symbolic-shape', 'the torchinfo format needs concrete shapes', { path: module.path });
    return v;
  });
}

const prod = (values: readonly number[]) => values.reduce((a, b) => a * b, 1);

function subtreeParams(ir: IR, index: number): number[] {
  const ids = new Set<number>();
  const stack = [index];
  while (stack.length > 0) {
    const m = ir.modules[stack.pop()!]!;
    for (const id of m.params) ids.add(id);
    stack.push(...m.children);
  }
  return [...ids];
}

/** The subtree's parameter count, its trainable part and its bytes. */
function paramTotals(ir: IR, module: IRModule, params: readonly number[]): { numParams: number; trainableParams: number; paramBytes: number } {
  let numParams = 0;
  let trainableParams = 0;
  let paramBytes = 0;
  for (const id of params) {
    const t = ir.tensors[id]!;
    const n = prod(concrete(t.spec.shape, module));
    numParams += n;
    if (ir.storages[t.storage]!.trainable) trainableParams += n;
    paramBytes += (n * DTYPE_BITS[t.spec.dtype]) / 8;
  }
  return { numParams, trainableParams, paramBytes };
}

/** torchinfo's MACs of a row: its own weight and bias by layer kind, its descendants' parameters by the output's first two sizes. */
function moduleMacs(ir: IR, module: IRModule, params: readonly number[], outputSize: readonly number[]): number {
  let macs = 0;
  for (const id of params) {
    const t = ir.tensors[id]!;
    const count = prod(concrete(t.spec.shape, module));
    const name = t.key?.split('.').pop();
    const ownsDirectly = module.params.includes(id) && (name === 'weight' || name === 'bias');
    if (outputSize.length === 0) continue;
    if (ownsDirectly) {
      if (module.className.includes('Conv')) macs += count * outputSize[0]! * prod(outputSize.slice(2));
      else if (module.className.includes('Linear')) macs += count * prod(outputSize.slice(0, -1));
      else macs += count * outputSize[0]!;
    } else if (!module.params.includes(id)) {
      macs += count * outputSize[0]! * (outputSize[1] ?? 1);
    }
  }
  return macs;
}

function buildRows(ir: IR, wrapper: string | undefined): Row[] {
  const seenParams = new Set<number>();
  const seenLayers = new Set<number>();
  const rows: Row[] = [];
  // Children called only through their weights (F.linear with a child's weight) run no hooks.
  const silent = new Set<number>();
  for (const m of ir.modules)
    for (const c of m.children) if (m.functionalChildren?.includes(String(ir.modules[c]!.path[ir.modules[c]!.path.length - 1]))) silent.add(c);
  for (const module of ir.modules) {
    if (silent.has(module.index)) continue;
    const layerId = module.sharedWith ?? module.index;
    const params = subtreeParams(ir, module.index);
    const { numParams, trainableParams, paramBytes } = paramTotals(ir, module, params);
    const direct = module.params.filter((id) => prod(concrete(ir.tensors[id]!.spec.shape, module)) > 0);
    const tiedOnly = direct.length > 0 && direct.every((id) => seenParams.has(id));
    const recursive = seenLayers.has(layerId) || tiedOnly;
    seenLayers.add(layerId);
    for (const id of module.params) seenParams.add(id);
    const out = module.outputs[0];
    const outputSize = out === undefined ? [] : concrete(ir.tensors[out]!.spec.shape, module);
    const outputDtype = out === undefined ? 'float32' : ir.tensors[out]!.spec.dtype;
    const inp = module.inputs[0];
    const inputSize = inp === undefined ? [] : concrete(ir.tensors[inp]!.spec.shape, module);
    const macs = moduleMacs(ir, module, params, outputSize);
    rows.push({
      module,
      className: module.className,
      depth: module.path.length,
      layerId,
      // torchinfo: a leaf has no child modules at all, called or not (MultiheadAttention's out_proj).
      isLeaf: module.children.length === 0 && (module.idleChildren?.length ?? 0) === 0,
      recursive,
      numParams,
      trainableParams,
      paramBytes,
      inputSize,
      outputSize,
      outputBytes: (prod(outputSize) * DTYPE_BITS[outputDtype]) / 8,
      macs,
      depthIndex: 0,
      descendants: [],
    });
  }
  if (wrapper !== undefined) {
    // The wrapper runs the model as its only child: same totals, every row one level deeper.
    const shifted = rows.map((row) => ({ ...row, depth: row.depth + 1 }));
    rows.splice(0, rows.length, { ...shifted[0]!, className: wrapper, depth: 0, isLeaf: false, recursive: false, layerId: -1, macs: 0 }, ...shifted);
  }
  const counters = new Map<number, number>();
  rows.forEach((row, i) => {
    const next = (counters.get(row.depth) ?? 0) + 1;
    counters.set(row.depth, next);
    row.depthIndex = next;
    let end = i + 1;
    while (end < rows.length && rows[end]!.depth > row.depth) end += 1;
    row.descendants = rows.slice(i + 1, end);
  });
  return rows;
}

/**
 * torchinfo's `leftover_params`: the row's parameters less those its descendants account for
 * (every descendant row, as torchinfo counts them, recursive ones once per layer). Pure in the
 * row, so each row's value is computed once: linear in the rows times the depth, where the
 * plain recursion was exponential in the depth.
 */
function leftover(row: Row, attr: 'numParams'): number {
  if (row.leftover !== undefined) return row.leftover;
  row.leftover = leftoverOf(row, attr);
  return row.leftover;
}

function leftoverOf(row: Row, attr: 'numParams'): number {
  let total = row[attr];
  const seen = new Set<number>();
  const children = row.descendants;
  let i = 0;
  while (i < children.length) {
    const child = children[i]!;
    if (child.recursive) {
      if (!seen.has(child.layerId)) {
        seen.add(child.layerId);
        total -= child[attr];
      }
      i += 1;
      while (i < children.length && children[i]!.depth > child.depth) i += 1;
      continue;
    }
    seen.add(child.layerId);
    total -= child.isLeaf ? child[attr] : leftover(child, attr);
    i += 1;
  }
  return total;
}

function paramsCell(row: Row, atMax: boolean): string {
  if (row.numParams === 0) return '--';
  if (row.recursive) return '(recursive)';
  if (atMax || row.isLeaf) {
    const text = pyThousands(row.numParams);
    return row.trainableParams ? text : `(${text})`;
  }
  const rest = leftover(row, 'numParams');
  return rest > 0 ? pyThousands(rest) : '--';
}

function percentCell(row: Row, atMax: boolean, total: number): string {
  const zero = '     --';
  if (total === 0) return zero;
  if (row.recursive) return '(recursive)';
  const params = atMax || row.isLeaf ? row.numParams : leftover(row, 'numParams');
  if (params === 0) return zero;
  return `${pyFixed((params / total) * 100, 2)}%`.padStart(7);
}

function macsCell(row: Row, atMax: boolean): string {
  if (row.macs <= 0) return '--';
  if (row.isLeaf) return pyThousands(row.macs);
  if (atMax) return pyThousands(row.descendants.filter((d) => d.isLeaf).reduce((s, d) => s + d.macs, 0));
  return '--';
}

function trainableCell(row: Row): string {
  if (row.numParams === 0) return '--';
  if (row.trainableParams === 0) return 'False';
  return row.numParams === row.trainableParams ? 'True' : 'Partial';
}

function kernelOf(ir: IR, module: IRModule): string {
  const op = ir.ops.find((o) => o.module === module.index && o.op === 'conv2d');
  if (op === undefined) return '--';
  const kernel = (op.attrs as { kernel: number | readonly [number, number] }).kernel;
  return pyList(typeof kernel === 'number' ? [kernel, kernel] : [...kernel]);
}

function groupsOf(ir: IR, module: IRModule): string {
  const op = ir.ops.find((o) => o.module === module.index && o.op === 'conv2d');
  return op === undefined ? '--' : String((op.attrs as { groups?: number }).groups ?? 1);
}

/** torchinfo's number with an automatic decimal unit: `22.64` with `MB`, `82`, `440`. */
function scaled(value: number, units: readonly [string, string, string, string]): [string, string] {
  const thresholds = [1e12, 1e9, 1e6, 1e3];
  const letters = [units[3], units[2], units[1], units[0]];
  for (let i = 0; i < thresholds.length; i += 1) {
    if (value >= thresholds[i]!) {
      const converted = value / thresholds[i]!;
      return [` (${letters[i]})`, Number.isInteger(converted) ? pyThousands(converted) : withSeparators(pyFixed(converted, 2))];
    }
  }
  return ['', Number.isInteger(value) ? pyThousands(value) : withSeparators(pyFixed(value, 2))];
}

function withSeparators(fixed: string): string {
  const [whole, fraction] = fixed.split('.');
  return `${pyThousands(Number(whole))}${fraction !== undefined ? `.${fraction}` : ''}`;
}

/**
 * The table TylerYep/torchinfo prints for the same model and input, reproduced from
 * the IR (rows in call order, per-depth numbering, hidden rows counted, decimal units).
 * docs/notes/summary-formats.md describes every rule. The IR must be one traceModel() made (an
 * estimate's `ir`), the options torchinfo's: a VramError with the path otherwise.
 *
 * @example
 * ```ts
 * import { formatTorchinfo, mobilenetV3Small, traceModel } from 'vram-ts';
 * const text = formatTorchinfo(traceModel(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(text.split('\n').find((line) => line.startsWith('Total mult-adds'))); // "Total mult-adds (M): 55.51"
 * ```
 */
export function formatTorchinfo(ir: IR, options: TorchinfoOptions = {}): string {
  validate(ir, tracedModel, ['formatTorchinfo', 'ir']);
  validate(options, torchinfoOptions, ['formatTorchinfo', 'options']);
  const maxDepth = options.depth ?? 3;
  const columns = options.columns ?? ['output_size', 'num_params'];
  const colWidth = options.colWidth ?? 25;
  const overhead = options.inputObjectOverhead ?? 56;
  const rows = buildRows(ir, options.wrapper);
  const widest = Math.max(...rows.map((r) => r.className.length + (r.depth > 0 ? `: ${r.depth}-${r.depthIndex}`.length : 0) + 5 * r.depth + 1));
  const nameWidth = widest >= 40 ? Math.ceil(widest / 5) * 5 : 40;
  const divider = '='.repeat(columns.length * colWidth + nameWidth);
  const line = (name: string, cells: readonly string[]) => `${ljust(name, nameWidth)} ${cells.map((c) => `${ljust(c, colWidth)} `).join('')}`.trimEnd();
  const root = rows[0]!;
  const totalParams = root.numParams;
  const out: string[] = [
    divider,
    line(
      'Layer (type:depth-idx)',
      columns.map((c) => TITLES[c]),
    ),
    divider,
  ];
  for (const row of rows) {
    if (row.depth > maxDepth) continue;
    const atMax = row.depth === maxDepth;
    const prefix = row.depth === 0 ? '' : row.depth === 1 ? '├─' : `${'│    '.repeat(row.depth - 1)}└─`;
    const name = `${prefix}${row.className}${row.depth > 0 ? `: ${row.depth}-${row.depthIndex}` : ''}`;
    // biome-ignore lint/suspicious/useIterableCallbackReturn: the switch covers every column (the compiler checks it).
    const cells = columns.map((column) => {
      switch (column) {
        case 'input_size':
          return row.inputSize.length > 0 ? pyList(row.inputSize) : '--';
        case 'output_size':
          return row.outputSize.length > 0 ? pyList(row.outputSize) : '--';
        case 'num_params':
          return paramsCell(row, atMax);
        case 'params_percent':
          return percentCell(row, atMax, totalParams);
        case 'kernel_size':
          return kernelOf(ir, row.module);
        case 'groups':
          return groupsOf(ir, row.module);
        case 'mult_adds':
          return macsCell(row, atMax);
        case 'trainable':
          return trainableCell(row);
      }
    });
    out.push(line(name, cells));
  }
  const leaves = rows.filter((r) => r.isLeaf);
  const totalMacs = leaves.reduce((s, r) => s + r.macs, 0);
  const inputBytes = ir.inputs.reduce(
    (s, id) => s + (prod(concrete(ir.tensors[id]!.spec.shape, root.module)) * DTYPE_BITS[ir.tensors[id]!.spec.dtype]) / 8 + overhead,
    0,
  );
  const forwardBackward = 2 * leaves.filter((r) => r.numParams > 0).reduce((s, r) => s + r.outputBytes, 0);
  const paramBytes = root.paramBytes;
  const sizeLine = (label: string, value: number) => {
    const [unit, text] = scaled(value, ['kB', 'MB', 'GB', 'TB']);
    return `${label}${unit}: ${text}`;
  };
  const [macUnit, macText] = scaled(totalMacs, ['k', 'M', 'G', 'T']);
  out.push(
    divider,
    `Total params: ${pyThousands(totalParams)}`,
    `Trainable params: ${pyThousands(root.trainableParams)}`,
    `Non-trainable params: ${pyThousands(totalParams - root.trainableParams)}`,
    `Total mult-adds${macUnit}: ${macText}`,
    divider,
    sizeLine('Input size', inputBytes),
    sizeLine('Forward/backward pass size', forwardBackward),
    sizeLine('Params size', paramBytes),
    sizeLine('Estimated Total Size', inputBytes + forwardBackward + paramBytes),
    divider,
  );
  return `${out.join('\n')}\n`;
}
