/**
 * One argument generator per function export of src/index.ts, for the property suite of
 * test/properties/hostile.test.ts: the export's valid calls (from its TSDoc @example), which
 * the suite mutates (hostile-values.ts), extra arbitraries where the export takes layers or
 * callbacks, and the invariants a returned result must meet.
 */
import fc from 'fast-check';
import * as api from '../../src/index.js';
import type { Estimate, EstimateOptions, Layer, ModuleLayer } from '../../src/index.js';
import { LLAMA_SHAPE, TINY_DEEPSEEK, TINY_MIXTRAL, TINY_QWEN3_MOE } from './tiny-configs.js';
import { junk } from './hostile-values.js';

/** An invariant of a returned result broke (not an exception of the library). */
export class InvariantError extends Error {
  override name = 'InvariantError';
}

export function invariant(ok: unknown, message: string): asserts ok {
  if (!ok) throw new InvariantError(message);
}

/** String(value), or its tag where String throws (a null prototype, a symbol inside). */
export function str(value: unknown): string {
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function json(value: unknown): string {
  try {
    return JSON.stringify(value) ?? str(value);
  } catch {
    return str(value);
  }
}

/** A returned expression must format: one that crashes formatDim is garbage passed through. */
function wellFormed(value: unknown): void {
  if (!api.isExpr(value)) return;
  try {
    api.formatDim(value);
  } catch (error) {
    throw new InvariantError(`returned a malformed Expr (formatDim threw ${error instanceof Error ? error.constructor.name : typeof error})`);
  }
}

export interface Spec {
  /** Valid argument lists, built when the suite starts (a build that throws is a setup failure). */
  readonly valid: () => readonly (readonly unknown[])[];
  /** Generated cases for this export. */
  readonly numRuns: number;
  /** How many arguments the fully random lists hold at most. */
  readonly arity: number;
  /** More arguments: layers mixed with junk, hostile callbacks. */
  readonly extra?: () => fc.Arbitrary<unknown[]>;
  /** What a returned result must meet (throws InvariantError, or a VramError from a call it makes). */
  readonly check?: (result: unknown, args: readonly unknown[]) => void;
  /** The result is a layer: frozen plain data, estimated on these options. */
  readonly layer?: readonly EstimateOptions[];
  /** A class: called with `new`. */
  readonly construct?: boolean;
  /** Returns a promise (raced with the time box). */
  readonly async?: boolean;
}

// ---------------------------------------------------------------- invariants

export function exactCount(value: unknown, what: string): void {
  invariant(typeof value === 'number' && Number.isSafeInteger(value) && value >= 0, `${what} is not a non-negative safe integer: ${str(value)}`);
}

/** A Dim: a non-negative safe integer, or an expression. */
function exactDim(value: unknown, what: string): void {
  if (api.isExpr(value)) return;
  exactCount(value, what);
}

function checkEstimate(r: unknown, concrete: boolean): void {
  invariant(typeof r === 'object' && r !== null, 'estimate result is not an object');
  const e = r as Estimate;
  exactCount(e.params.total, 'params.total');
  exactCount(e.params.trainable, 'params.trainable');
  invariant(e.params.trainable <= e.params.total, 'trainable > total');
  for (const [key, value] of Object.entries(e.bytes)) (concrete ? exactCount : exactDim)(value, `bytes.${key}`);
  for (const row of e.modules) exactCount(row.params, `modules.${row.path.join('.')}.params`);
}

const isConcreteInput = (options: unknown): boolean => {
  const input = (options as { input?: unknown } | null)?.input;
  return Array.isArray(input) && input.every((d) => typeof d === 'number');
};

/** The strings inside the caller's arguments (a title, a term's derivation): printed back verbatim, they are no fault. */
function callerText(args: readonly unknown[] = []): string {
  const out: string[] = [];
  const seen = new Set<object>();
  const walk = (value: unknown, depth: number): void => {
    if (typeof value === 'string') out.push(value);
    else if (typeof value === 'object' && value !== null && depth < 8 && !seen.has(value) && seen.size < 20_000) {
      seen.add(value);
      for (const child of Object.values(value)) walk(child, depth + 1);
    }
  };
  walk(args, 0);
  return out.join('\n');
}

function checkString(r: unknown, args?: readonly unknown[]): void {
  invariant(typeof r === 'string', `not a string: ${typeof r}`);
  const given = callerText(args);
  for (const bad of ['NaN', 'undefined', '[object Object]']) {
    const pattern = bad === '[object Object]' ? /\[object Object\]/ : new RegExp(`\\b${bad}\\b`);
    invariant(!pattern.test(r) || given.includes(bad), `string holds ${bad}: ${r.slice(0, 200)}`);
  }
}

// ---------------------------------------------------------------- shared valid values

const B = () => api.sym('B');
const S = () => api.sym('S');

const TINY_LLAMA = {
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 64,
};
const TINY_GPT2 = { model_type: 'gpt2', n_embd: 64, n_layer: 1, n_head: 4, n_positions: 64, vocab_size: 128 };
const GPT2_SHAPE = { hidden: 64, layers: 1, heads: 4, inner: 256, vocab: 256, positions: 64, attnDropout: 0, residDropout: 0, embdDropout: 0 };

let cache: Record<string, unknown> | undefined;
/** Values built once (a tiny LLM, a few layers and estimates), shared by the valid argument lists. */
export function shared() {
  if (cache !== undefined) return cache as ReturnType<typeof build>;
  const built = build();
  cache = built;
  return built;
}
function build() {
  const llama = (): ModuleLayer => api.fromHFConfig(TINY_LLAMA);
  const moe = (): ModuleLayer => api.fromHFConfig(TINY_QWEN3_MOE);
  const cnn = (): Layer =>
    api.seq(api.conv2d({ out: 4, kernel: 3, padding: 1 }), api.bn(), api.relu(), api.adaptiveAvgPool2d(), api.flatten(), api.linear({ out: 3 }));
  const mlp = (): Layer => api.seq(api.linear({ out: 16 }), api.relu(), api.linear({ out: 4 }));
  return {
    llama: lazy(llama),
    moe: lazy(moe),
    cnn: lazy(cnn),
    mlp: lazy(mlp),
    cnnEstimate: lazy(() => api.estimate(cnn(), { input: [1, 3, 8, 8] })),
    mlpEstimate: lazy(() => api.estimate(mlp(), { input: [2, 8] })),
    symEstimate: lazy(() => api.estimate(cnn(), { input: [B(), 3, 8, 8] })),
    llamaEstimate: lazy(() => api.estimate(llama(), { input: [1, 8] })),
    cnnIR: lazy(() => api.traceModel(cnn(), { input: [1, 3, 8, 8] })),
    mlpIR: lazy(() => api.traceModel(mlp(), { input: [2, 8] })),
  };
}
function lazy<T>(make: () => T): () => T {
  let value: { v: T } | undefined;
  return () => {
    value ??= { v: make() };
    return value.v;
  };
}

/** Small valid layers to mix with junk. */
function layerPool(): Layer[] {
  return [
    api.linear({ out: 4 }),
    api.relu(),
    api.identity(),
    api.conv2d({ out: 4, kernel: 1 }),
    api.seq(api.linear({ out: 8 }), api.gelu()),
    api.residual(api.linear({ out: 16 })),
    api.layerNorm(),
    api.dropout({ p: 0.1 }),
  ];
}

/** A layer from the pool or a junk value. */
const layerOrJunk = (): fc.Arbitrary<unknown> => {
  const pool = layerPool();
  return fc.oneof({ weight: 2, arbitrary: fc.constantFrom(...pool) }, { weight: 1, arbitrary: junk });
};

// ---------------------------------------------------------------- builders

const SEQ_INPUT: EstimateOptions = { input: [1, 8, 16], loss: 'none' };
const IMAGE: EstimateOptions = { input: [1, 3, 16, 16], loss: 'none' };
const IMAGE8: EstimateOptions = { input: [1, 8, 16, 16], loss: 'none' };
const TOKENS: EstimateOptions = { input: [1, 8], inputDtype: 'int64', loss: 'none' };
const BIG_IMAGE: EstimateOptions = { input: [1, 3, 32, 32], loss: 'none' };

const builder = (valid: () => unknown[][], numRuns: number, layer: readonly EstimateOptions[], extra?: Spec['extra']): Spec => ({
  valid,
  numRuns,
  arity: 2,
  layer,
  ...(extra !== undefined ? { extra } : {}),
});

const hostileBuild = (): fc.Arbitrary<unknown> => {
  const rules = [api.addOp, api.mulOp, api.catOp, api.viewOp, api.softmaxOp, api.matmulOp, api.permuteOp, api.sliceOp, api.transposeOp];
  return fc
    .record({
      action: fc.integer({ min: 0, max: 9 }),
      a: junk,
      b: junk,
      rule: fc.constantFrom(...rules),
      layer: fc.constantFrom(...layerPool()),
    })
    .map(({ action, a, b, rule, layer }) => {
      const f = (g: api.GraphBuilder, inputs: readonly api.TensorRef[]): unknown => {
        const x = inputs[0]!;
        switch (action) {
          case 0:
            return g.apply(a as Layer, x);
          case 1:
            return g.call(a as never, [x], b);
          case 2:
            return g.call(rule as never, a as never, {});
          case 3:
            return g.call(rule as never, [{ id: 9999, shape: [], dtype: 'float32' } as never], {});
          case 4:
            return g.call(rule as never, [x, x], a);
          case 5:
            return a;
          case 6:
            return g.apply(layer, a as never);
          case 7:
            g.hold(a as never);
            return x;
          case 8:
            return g.applyAll(layer, x, a as never);
          default:
            return g.apply(layer, x);
        }
      };
      return f;
    });
};

// ---------------------------------------------------------------- the table

const v = (...lists: unknown[][]) => lists;

/** Every function export of src/index.ts and how to call it. */
export function specs(): Record<string, Spec> {
  const s = shared();
  const llama = s.llama;
  const est = (r: unknown, args: readonly unknown[]) => checkEstimate(r, isConcreteInput(args[1]));
  return {
    // ---- errors
    VramError: {
      valid: () => v([[{ path: ['features', 0], code: 'bad-dimension', message: 'dimension must be >= 1' }]], [[]]),
      numRuns: 1500,
      arity: 2,
      construct: true,
      check: (r) => {
        invariant(r instanceof api.VramError, 'not a VramError');
        invariant(typeof r.message === 'string', 'message not a string');
      },
    },

    // ---- sym
    sym: {
      valid: () => v(['B'], ['S', { max: 64 }], ['H', { min: 2, multipleOf: 2 }]),
      numRuns: 3000,
      arity: 3,
      check: (r) => invariant(api.isExpr(r), 'sym returned no Expr'),
    },
    add: symBinary((a, b) => a + b),
    sub: symBinary((a, b) => a - b),
    mul: symBinary((a, b) => a * b),
    neg: {
      valid: () => v([4], [B()]),
      numRuns: 2000,
      arity: 2,
      check: (r, [a]) => {
        wellFormed(r);
        if (typeof a === 'number') invariant(r === -a || (a === 0 && r === 0), `neg(${a}) = ${str(r)}`);
      },
    },
    sum: symList((xs) => xs.reduce((p, c) => p + c, 0)),
    product: symList((xs) => xs.reduce((p, c) => p * c, 1)),
    floorDiv: symDiv(Math.floor),
    ceilDiv: symDiv(Math.ceil),
    max: {
      valid: () => v([3, 5], [S(), 1], [B(), S(), 4]),
      numRuns: 2500,
      arity: 4,
      check: (r, args) => {
        wellFormed(r);
        if (args.length > 0 && args.every((a) => Number.isSafeInteger(a))) invariant(r === Math.max(...(args as number[])), `max = ${str(r)}`);
      },
    },
    bounds: {
      valid: () => v([api.mul(api.sym('B', { max: 64 }), 4)], [7], [api.add(S(), 1)]),
      numRuns: 2500,
      arity: 2,
      check: (r, [d]) => {
        const b = r as { min: number; max: number };
        invariant(typeof b.min === 'number' && typeof b.max === 'number' && b.min <= b.max, `bounds ${json(r)}`);
        if (typeof d === 'number') invariant(b.min === d && b.max === d, `bounds(${d}) = ${json(r)}`);
      },
    },
    evaluate: {
      valid: () => v([api.mul(B(), 3), { B: 4 }], [5, {}], [api.floorDiv(api.add(S(), 1), 2), { S: 7 }]),
      numRuns: 2500,
      arity: 3,
      check: (r, [d]) => {
        invariant(typeof r === 'number' && Number.isSafeInteger(r), `evaluate gave ${str(r)}`);
        if (typeof d === 'number') invariant(r === d, 'evaluate of a number changed it');
      },
    },
    compile: {
      valid: () => v([api.mul(S(), S())], [3]),
      numRuns: 2000,
      arity: 2,
      check: (r) => {
        invariant(typeof r === 'function', 'compile returned no function');
        const n = (r as (env: Record<string, number>) => number)({ S: 12, B: 2, H: 3 });
        invariant(Number.isSafeInteger(n), `compiled gave ${n}`);
      },
    },
    substitute: {
      valid: () => v([api.mul(B(), S()), { S: 128 }], [4, { B: 1 }]),
      numRuns: 2500,
      arity: 3,
      check: (r) => {
        wellFormed(r);
        invariant(typeof r === 'number' ? Number.isSafeInteger(r) : api.isExpr(r), 'substitute gave no Dim');
      },
    },
    isExpr: {
      valid: () => v([api.mul(B(), 2)], [8]),
      numRuns: 2000,
      arity: 2,
      check: (r, [x]) => invariant(typeof r === 'boolean' && (r === false || (typeof x === 'object' && x !== null)), `isExpr gave ${str(r)}`),
    },
    formatDim: { valid: () => v([api.mul(S(), S())], [12], [api.floorDiv(B(), 2)]), numRuns: 2500, arity: 2, check: checkString },

    // ---- tensors
    isDType: {
      valid: () => v(['bfloat16'], ['complex64']),
      numRuns: 2000,
      arity: 2,
      check: (r, [x]) => invariant(r === (typeof x === 'string' && Object.hasOwn(api.DTYPE_BITS, x)), `isDType(${str(x)}) = ${str(r)}`),
    },
    isFloating: {
      valid: () => v(['bfloat16'], ['int64'], ['nf4']),
      numRuns: 2000,
      arity: 2,
      check: (r) => invariant(typeof r === 'boolean', 'isFloating gave no boolean'),
    },
    bytesOf: {
      valid: () => v([10, 'bfloat16'], [5, 'nf4'], [B(), 'float32']),
      numRuns: 2500,
      arity: 3,
      check: (r, [n, d]) => {
        exactDim(r, 'bytesOf');
        if (typeof n === 'number') invariant(r === Math.ceil((n * api.DTYPE_BITS[d as api.DType]) / 8), `bytesOf(${n}, ${str(d)}) = ${str(r)}`);
      },
    },
    tensor: {
      valid: () => v([[1, 3, 224, 224], 'float32'], [[2, 3]], [[B(), 8], 'int64']),
      numRuns: 2500,
      arity: 3,
      check: (r) => {
        const t = r as api.TensorSpec;
        invariant(Array.isArray(t.shape) && api.isDType(t.dtype), 'tensor gave no spec');
        for (const d of t.shape) exactDim(d, 'tensor dim');
      },
    },
    numel: {
      valid: () => v([api.tensor([2, 3, 4])], [api.tensor([B(), 3])], [api.tensor([])]),
      numRuns: 2500,
      arity: 2,
      check: (r, [t]) => {
        exactDim(r, 'numel');
        const shape = (t as api.TensorSpec).shape;
        if (shape.every((d) => typeof d === 'number')) invariant(r === (shape as number[]).reduce((a, b) => a * b, 1), 'numel differs from the product');
      },
    },
    specBytes: {
      valid: () => v([api.tensor([1, 3, 224, 224])], [api.tensor([B(), 8], 'nf4')]),
      numRuns: 2500,
      arity: 2,
      check: (r) => exactDim(r, 'specBytes'),
    },

    // ---- estimate, fit, plan
    estimate: {
      valid: () =>
        v(
          [s.cnn(), { input: [1, 3, 8, 8] }],
          [s.mlp(), { input: [2, 8], optimizer: 'adam', precision: 'bf16' }],
          [s.cnn(), { input: [B(), 3, 8, 8], mode: 'inference' }],
          [llama(), { input: [1, 8] }],
          [s.mlp(), { input: [2, 8], parallel: { engine: 'fsdp2', dp: 2 } }],
          [s.mlp(), { input: [2, 8], checkpoint: { modules: ['0'] }, freeze: ['2'] }],
        ),
      numRuns: 1200,
      arity: 3,
      extra: () => fc.tuple(layerOrJunk(), fc.constantFrom<unknown>({ input: [1, 8, 16] }, { input: [1, 3, 8, 8] }, { input: junk })),
      check: est,
    },
    traceModel: {
      valid: () => v([s.cnn(), { input: [1, 3, 8, 8] }], [s.mlp(), { input: [2, 8], mode: 'inference' }]),
      numRuns: 1200,
      arity: 3,
      extra: () => fc.tuple(layerOrJunk(), fc.constant({ input: [1, 8, 16] })),
      check: (r) => invariant(Array.isArray((r as api.IR).ops), 'traceModel gave no IR'),
    },
    fits: {
      valid: () =>
        v(
          [s.cnn(), { input: [1, 3, 8, 8], gpu: '24GB' }],
          [s.mlp(), { input: [2, 8], gpu: 'H100-80GB', runtime: { context: true, cublas: true } }],
          [s.mlp(), { input: [2, 8], gpu: '1GB', verdict: 'allocated' }],
        ),
      numRuns: 800,
      arity: 3,
      check: (r) => {
        const f = r as api.FitResult;
        invariant(typeof f.fits === 'boolean', 'fits gave no boolean');
        exactCount(f.needed, 'needed');
        invariant(f.reserved >= f.allocated, `fits: reserved ${f.reserved} below allocated ${f.allocated}`);
        invariant(f.headroom === f.capacity - f.needed && f.fits === f.headroom >= 0, 'fits: headroom is not capacity - needed');
      },
    },
    maxFitting: {
      valid: () => v([s.mlp(), 'B', { input: [B(), 8], gpu: '1GB' }], [s.cnn(), 'B', { input: [B(), 3, 8, 8], gpu: '8GB' }]),
      numRuns: 300,
      arity: 4,
      check: (r) => invariant(typeof r === 'number' && (Number.isSafeInteger(r) || r === Number.POSITIVE_INFINITY) && r >= 0, `maxFitting gave ${str(r)}`),
    },
    advise: {
      valid: () =>
        v(
          [s.mlp(), { input: [4, 8], gpu: '1GB' }],
          [s.cnn(), { input: [2, 3, 8, 8], gpu: 2 ** 20, runtime: { context: false, cublas: false } }],
          [s.llama(), { input: [2, 8], gpu: '8GB', gpus: 2, maxCombination: 1 }],
        ),
      numRuns: 200,
      arity: 3,
      // Every lever judged as fits judges it, on the baseline's GPU; fitting ones first, best the first of them.
      check: (r) => {
        const a = r as api.AdviseResult;
        exactCount(a.baseline.needed, 'advise baseline.needed');
        invariant(a.baseline.headroom === a.baseline.capacity - a.baseline.needed, 'advise: baseline headroom is not capacity − needed');
        for (const l of a.levers) {
          exactCount(l.peak, `advise ${l.lever} peak`);
          exactCount(l.needed, `advise ${l.lever} needed`);
          invariant(l.reserved >= l.peak, `advise ${l.lever}: reserved below the allocated peak`);
          invariant(l.headroom === a.baseline.capacity - l.needed, `advise ${l.lever}: headroom is not capacity − needed`);
        }
        const miss = a.levers.findIndex((l) => !l.fits);
        invariant(miss === -1 || a.levers.slice(miss).every((l) => !l.fits), 'advise: a fitting lever after one that does not fit');
        invariant(a.best === a.levers.find((l) => l.fits), 'advise: best is not the first fitting lever');
      },
    },
    estimateRanks: {
      valid: () =>
        v(
          [s.mlp(), { input: [8, 16], optimizer: 'adam', parallel: { engine: 'zero-redundancy', dp: 2 } }],
          [s.mlp(), { input: [8, 16], parallel: { engine: 'ddp', dp: 2 } }],
        ),
      numRuns: 600,
      arity: 3,
      check: (r) => {
        invariant(Array.isArray(r) && r.length > 0, 'no ranks');
        for (const rank of r as Record<string, unknown>[])
          for (const key of ['parameters', 'gradients', 'optimizer']) if (key in rank) exactDim(rank[key], `rank.${key}`);
      },
    },
    plan: {
      valid: () =>
        v(
          [api.seq(api.linear({ out: 64 }), api.relu(), api.linear({ out: 10 })), { sample: [64], globalBatch: 8, gpu: '64MB', gpus: 2, optimizer: 'adam' }],
          [s.mlp(), { sample: [8], globalBatch: 4, gpu: '1GB', gpus: 2 }],
        ),
      numRuns: 120,
      arity: 3,
    },
    gpusOf: {
      valid: () => v([{ dp: 2, pp: 1, tp: 1, cp: 4 }], [{ dp: 1, pp: 2, tp: 2, cp: 1 }]),
      numRuns: 3000,
      arity: 2,
      check: (r, [l]) => {
        const { dp, pp, tp, cp } = l as Record<string, number>;
        invariant(r === dp! * pp! * tp! * cp!, `gpusOf gave ${str(r)}`);
        exactCount(r, 'gpus');
      },
    },

    // ---- builders
    adaptiveAvgPool2d: builder(() => v([], [{ output: 2 }], [{ output: [2, 1], name: 'pool' }]), 2000, [IMAGE]),
    adaptiveMaxPool2d: builder(() => v([], [{ output: 2 }], [{ output: [1, 2] }]), 2000, [IMAGE]),
    attention: builder(
      () =>
        v(
          [{ hidden: 16, heads: 4 }],
          [{ hidden: 16, heads: 4, kvHeads: 2, impl: 'sdpa' }],
          [{ hidden: 16, heads: 4, style: 'gpt2', positions: 32, qkvBias: true, outBias: true }],
          [{ hidden: 16, heads: 2, headDim: 8, dropout: 0.1, impl: 'eager' }],
        ),
      1200,
      [SEQ_INPUT],
    ),
    avgPool2d: builder(() => v([{ kernel: 2 }], [{ kernel: 3, stride: 2, padding: 1, ceilMode: true }], [{ kernel: [2, 3] }]), 2500, [IMAGE]),
    bn: builder(() => v([], [{ eps: 1e-3, momentum: 0.01 }], [{ affine: false, trackRunningStats: false, name: 'bn1' }]), 2500, [IMAGE]),
    branch: builder(
      () =>
        v(
          [[api.conv2d({ out: 8, kernel: 1 }), api.conv2d({ out: 8, kernel: 3, padding: 1 })], { merge: 'concat' }],
          [[api.relu(), api.identity()], { merge: 'add' }],
          [[api.sigmoid(), api.identity()], { merge: 'mul', inline: true }],
        ),
      2000,
      [IMAGE],
      () =>
        fc.tuple(fc.array(layerOrJunk(), { maxLength: 3 }), fc.oneof(fc.constantFrom<unknown>({ merge: 'add' }, { merge: 'concat' }, { merge: 'xor' }), junk)),
    ),
    conv1d: builder(
      () => v([{ out: 8, kernel: 3, padding: 1 }], [{ out: 4, kernel: 3, stride: 2, groups: 1, bias: false }], [{ out: 6, kernel: 3, padding: 'same' }]),
      2500,
      [{ input: [1, 3, 16], loss: 'none' }],
    ),
    conv2d: builder(
      () =>
        v(
          [{ out: 8, kernel: 3 }],
          [{ out: 16, kernel: 3, stride: 2, padding: 1, bias: false }],
          [{ out: 3, kernel: [3, 1], groups: 3, dilation: 2, padding: 'same' }],
          [{ out: 4, kernel: 1, in: 3, channelsLast: true }],
        ),
      2500,
      [IMAGE],
    ),
    convTranspose2d: builder(() => v([{ out: 4, kernel: 2, stride: 2 }], [{ out: 6, kernel: 3, padding: 1, outputPadding: 1, stride: 2, groups: 1 }]), 2500, [
      IMAGE,
    ]),
    dropout: builder(() => v([], [{ p: 0.2 }], [{ p: 0.5, inplace: true }]), 2500, [SEQ_INPUT]),
    embedding: builder(() => v([{ num: 100, dim: 16 }], [{ num: 10, dim: 4, name: 'wte' }]), 2500, [TOKENS]),
    flatten: builder(() => v([], [{ startDim: 1 }], [{ startDim: 0, endDim: -1 }]), 2500, [IMAGE]),
    functional: builder(
      () => v([api.flatten()], [api.relu()], [api.linear({ out: 2 })]),
      2000,
      [SEQ_INPUT],
      () => fc.tuple(layerOrJunk()),
    ),
    gatedMlp: builder(() => v([{ hidden: 16, intermediate: 32 }], [{ hidden: 16, intermediate: 24, bias: true, activation: 'gelu' }]), 1500, [SEQ_INPUT]),
    gelu: builder(() => v([], [{ approximate: 'tanh' }], [{ approximate: 'none', name: 'act' }]), 2500, [SEQ_INPUT]),
    graph: builder(
      () =>
        v(
          [
            (g: api.GraphBuilder, [x]: readonly api.TensorRef[]) => {
              const gate = g.apply(api.sigmoid({ name: 'gate' }), g.apply(api.linear({ out: 16, name: 'proj' }), x!));
              return g.call(api.mulOp, [x!, gate], {})[0]!;
            },
          ],
          [(g: api.GraphBuilder, [x]: readonly api.TensorRef[]) => g.call(api.permuteOp, [x!], { dims: [0, 2, 1] })[0]!, { name: 'perm' }],
        ),
      2000,
      [SEQ_INPUT],
      () => fc.tuple(hostileBuild(), fc.oneof(fc.constant({}), junk)),
    ),
    groupNorm: builder(() => v([{ groups: 1 }], [{ groups: 3, eps: 1e-6, affine: false }], [{ groups: 3, channels: 3 }]), 2500, [IMAGE]),
    hardsigmoid: builder(() => v([], [{ inplace: true }]), 2500, [SEQ_INPUT]),
    hardswish: builder(() => v([], [{ inplace: true }]), 2500, [SEQ_INPUT]),
    hfActivation: builder(() => v(['gelu_new', 'act'], ['silu', 'act_fn', ['config', 'hidden_act']], ['relu', 'a']), 2500, [SEQ_INPUT]),
    identity: builder(() => v([], [{ name: 'id' }]), 2500, [SEQ_INPUT]),
    interpolate: builder(() => v([{ size: [17, 23], mode: 'bilinear', alignCorners: true }], [{ scaleFactor: 2 }]), 2500, [IMAGE]),
    upsample: builder(() => v([{ scaleFactor: 2, mode: 'bilinear' }], [{ size: 8 }], [{ scaleFactor: [2, 1], mode: 'nearest' }]), 2500, [IMAGE]),
    layerNorm: builder(() => v([], [{ eps: 1e-5, elementwiseAffine: false }], [{ size: 16, bias: false }]), 2500, [SEQ_INPUT]),
    layerNorm2d: builder(() => v([], [{ channels: 3 }], [{ eps: 1e-6, channelsLast: true }]), 2500, [IMAGE]),
    linear: builder(
      () =>
        v(
          [{ out: 10 }],
          [{ out: 4, bias: false, in: 16 }],
          [{ out: 8, quant: { method: 'gptq', bits: 4, groupSize: 8 } }],
          [{ out: 8, quant: 'nf4' }],
          [{ out: 8, transposedWeight: true, storageRows: 9 }],
        ),
      2500,
      [SEQ_INPUT],
    ),
    maxPool2d: builder(() => v([{ kernel: 2 }], [{ kernel: 3, stride: 2, ceilMode: true }], [{ kernel: 3, padding: 1, dilation: 1 }]), 2500, [IMAGE]),
    mlp: builder(() => v([{ hidden: 16, inner: 64, activation: 'gelu_new', conv1d: true }], [{ hidden: 16, inner: 32, dropout: 0.1 }]), 1500, [SEQ_INPUT]),
    mlaAttention: builder(
      () =>
        v(
          [{ hidden: 16, heads: 2, qLoraRank: 8, kvLoraRank: 8, qkNopeHeadDim: 8, qkRopeHeadDim: 4, vHeadDim: 8, name: 'self_attn' }],
          [{ hidden: 16, heads: 2, qLoraRank: null, kvLoraRank: 8, qkNopeHeadDim: 8, qkRopeHeadDim: 4, vHeadDim: 8 }],
        ),
      800,
      [SEQ_INPUT],
    ),
    module: builder(
      () => v(['0', 'Block', api.seq(api.linear({ out: 16 }), api.relu())], ['mlp', 'MLP', api.linear({ out: 8 })]),
      2000,
      [SEQ_INPUT],
      () => fc.tuple(fc.oneof(fc.constant('block'), junk), fc.oneof(fc.constant('Block'), junk), layerOrJunk()),
    ),
    moeBlock: builder(
      () =>
        v(
          [{ name: 'mlp', hidden: 16, experts: 4, k: 2, intermediate: 8, impl: 'eager' }],
          [{ hidden: 16, experts: 4, k: 1, intermediate: 8, impl: 'eager', score: 'sigmoid' }],
        ),
      500,
      [SEQ_INPUT],
    ),
    multiheadAttention: builder(
      () => v([{ embedDim: 16, heads: 4, batchFirst: true, needWeights: false }], [{ embedDim: 16, heads: 2, dropout: 0.1, bias: false, batchFirst: true }]),
      1200,
      [SEQ_INPUT],
    ),
    parameter: builder(
      () =>
        v(
          [{ name: 'class_token', shape: [1, 1, 16], combine: 'prepend' }],
          [{ name: 'pos', shape: [1, 8, 16], combine: 'add' }],
          [{ name: 'scale', shape: [16], combine: 'scale' }],
        ),
      2500,
      [SEQ_INPUT],
    ),
    relu: builder(() => v([], [{ inplace: true }], [{ name: 'act' }]), 2500, [SEQ_INPUT]),
    relu6: builder(() => v([], [{ inplace: true }]), 2500, [SEQ_INPUT]),
    repeat: builder(
      () => v([3, () => api.seq(api.linear({ out: 16 }), api.relu())], [1, () => api.identity()], [0, () => api.relu()]),
      2000,
      [SEQ_INPUT],
      () =>
        fc.tuple(
          fc.oneof(fc.integer({ min: -2, max: 4 }), junk),
          fc.oneof(
            layerOrJunk().map((l) => () => l),
            junk,
          ),
        ),
    ),
    repeatedBlocks: {
      valid: () => {
        const body = { kind: 'seq', className: 'Sequential', isSequential: true, children: [] } as const;
        const make = (count: number) => ({ kind: 'module', className: `Net${count}`, body }) as ModuleLayer;
        return v([32, 'model.layers.', body, make], [2, 'h.', api.linear({ out: 4 }), make, make]);
      },
      numRuns: 2000,
      arity: 6,
      check: (r) => {
        const b = r as api.RepeatedBlocks;
        exactCount(b.count, 'count');
        invariant(typeof b.withCount === 'function', 'withCount is no function');
      },
    },
    residual: builder(
      () =>
        v(
          [api.seq(api.linear({ out: 16 }), api.layerNorm())],
          [api.linear({ out: 16 }), { inplace: true }],
          [api.linear({ out: 8 }), { shortcut: api.linear({ out: 8 }), inline: true }],
        ),
      2000,
      [SEQ_INPUT],
      () => fc.tuple(layerOrJunk(), fc.oneof(fc.constant({}), fc.record({ downsample: layerOrJunk() }), junk)),
    ),
    rmsNorm: builder(() => v([{ size: 16 }], [{ size: 16, eps: 1e-6, offset: true, className: 'GemmaRMSNorm' }], [{ size: 8 }]), 2500, [SEQ_INPUT]),
    seq: builder(
      () => v([api.conv2d({ out: 4, kernel: 3, padding: 1 }), api.bn(), api.relu()], [{ name: 'classifier' }, api.flatten(), api.linear({ out: 4 })], []),
      2500,
      [IMAGE],
      () => fc.array(layerOrJunk(), { maxLength: 4 }),
    ),
    sigmoid: builder(() => v([], [{ name: 's' }]), 2500, [SEQ_INPUT]),
    silu: builder(() => v([], [{ inplace: true }]), 2500, [SEQ_INPUT]),
    squeezeExcitation: builder(
      () => v([{ squeeze: 2 }], [{ squeeze: 4, activation: api.silu({ inplace: true }), name: 'se', scaleActivation: 'hardsigmoid' }]),
      2000,
      [IMAGE8],
    ),
    stochasticDepth: builder(() => v([{ p: 0.2 }], [{ p: 0.1, mode: 'batch' }]), 2500, [IMAGE]),
    tanh: builder(() => v([], [{ name: 't' }]), 2500, [SEQ_INPUT]),

    // ---- catalogs
    mobilenetV3Small: builder(() => v([], [{ numClasses: 3 }], [{ widthMult: 0.5, dropout: 0.1, reducedTail: true }]), 40, [BIG_IMAGE]),
    mobilenetV3Large: builder(() => v([], [{ numClasses: 3, dilated: true }]), 30, [BIG_IMAGE]),
    vision: builder(() => v(['resnet18'], ['squeezenet1_1', { numClasses: 10, dropout: 0.1 }], ['vgg11_bn', { numClasses: 2 }], ['mobilenet_v2']), 60, [
      BIG_IMAGE,
    ]),
    unet: builder(() => v([], [{ inChannels: 3, numClasses: 2, base: 4 }]), 40, [BIG_IMAGE]),
    llamaFamily: builder(() => v([LLAMA_SHAPE], [LLAMA_SHAPE, { dtype: 'bfloat16' }]), 150, [TOKENS]),
    gpt2Model: builder(() => v([GPT2_SHAPE], [GPT2_SHAPE, {}]), 150, [TOKENS]),
    fromHFConfig: builder(
      () => v([TINY_LLAMA], [TINY_GPT2], [TINY_QWEN3_MOE, { expertParallel: { size: 2 } }], [TINY_LLAMA, { attention: 'sdpa', dtype: 'bfloat16' }]),
      250,
      [TOKENS],
    ),
    moeFromHFConfig: builder(() => v([TINY_MIXTRAL, { transformers: '4.40.2' }], [TINY_QWEN3_MOE]), 150, [TOKENS]),
    deepseekFromHFConfig: builder(() => v([TINY_DEEPSEEK, { transformers: '5.18.0' }], [TINY_DEEPSEEK]), 100, [TOKENS]),
    llm: builder(() => v(['gpt2'], ['qwen2.5-0.5b', { attention: 'sdpa' }], ['qwen3-0.6b']), 60, [{ input: [1, 4], loss: 'none', mode: 'inference' }]),
    activeParams: modelCount(() => v([s.moe(), 1000], [llama(), 500])),
    wholeParams: modelCount(() => v([s.moe(), 1000], [llama(), 500])),
    transformersRules: {
      valid: () => v([], ['4.40.2'], ['5.18.0', ['transformers']]),
      numRuns: 2500,
      arity: 3,
      check: (r) => invariant(typeof r === 'object' && r !== null, 'no rules'),
    },

    // ---- LLM inference and RL
    decoderMeta: {
      valid: () => v([llama()], [s.moe()]),
      numRuns: 2000,
      arity: 2,
      check: (r) => {
        const m = r as api.ModelMeta;
        exactCount(m.kvHeads, 'kvHeads');
        exactCount(m.headDim, 'headDim');
      },
    },
    kvCache: {
      valid: () => v([llama(), { batch: 1, seq: 8 }], [llama(), { batch: 2, seq: 16, dtype: 'bfloat16' }], [llama(), { batch: B(), seq: S() }]),
      numRuns: 2000,
      arity: 3,
      check: (r, [, o]) => (isConcreteCounts(o) ? exactCount : exactDim)(r, 'kvCache'),
    },
    generation: {
      valid: () => v([llama(), { batch: 1, prompt: 8, generate: 4 }], [llama(), { batch: 2, prompt: 4, generate: 0, dtype: 'bfloat16', timeline: false }]),
      numRuns: 300,
      arity: 3,
      check: (r) => {
        const g = r as api.GenerationEstimate;
        exactCount(g.prefill.kvCache, 'prefill.kvCache');
        exactCount(g.decode.kvCache, 'decode.kvCache');
      },
    },
    korthikanti: {
      valid: () =>
        v(
          [{ seq: 2048, batch: 1, hidden: 4096, heads: 32 }],
          [{ seq: S(), batch: 2, hidden: 64, heads: 4, tensorParallel: 2, sequenceParallel: true, recompute: 'selective' }],
        ),
      numRuns: 3000,
      arity: 2,
      check: (r, [o]) => (isConcreteCounts(o, ['seq', 'batch']) ? exactCount : exactDim)(r, 'korthikanti'),
    },
    vllmEngine: {
      valid: () => v([llama(), { gpu: 'H100-80GB', gpuMemoryUtilization: 0.3 }], [llama(), { totalBytes: 2 ** 34, maxModelLen: 64, blockSize: 16 }]),
      numRuns: 400,
      arity: 3,
      check: (r) => exactCount((r as api.VllmEngine).kvCache.bytesPerToken, 'kvCache.bytesPerToken'),
    },
    vllmPageBytes: {
      valid: () =>
        v([llama().meta, { blockSize: 16, tensorParallelSize: 1, dtypeBytes: 2 }], [s.moe().meta, { blockSize: 32, tensorParallelSize: 2, dtypeBytes: 1 }]),
      numRuns: 3000,
      arity: 3,
      check: (r) => exactCount(r, 'vllmPageBytes'),
    },
    sglangEngine: {
      valid: () =>
        v([llama(), { totalBytes: 80 * 2 ** 30, memFractionStatic: 0.5 }], [llama(), { gpu: 'H100-80GB', memFractionStatic: 0.8, kvCacheDtype: 'bfloat16' }]),
      numRuns: 600,
      arity: 3,
      check: (r) => exactCount((r as api.SglangEngine).cellSize, 'cellSize'),
    },
    trainerFields: {
      valid: () => v(['grpo'], ['sft', '0.21.0'], ['trainer']),
      numRuns: 2500,
      arity: 3,
      check: (r) => invariant(typeof (r as api.TrainerFields).className === 'string', 'no className'),
    },
    resolveTrainerArgs: {
      valid: () =>
        v(
          ['grpo', { per_device_train_batch_size: 8 }],
          ['sft', { per_device_train_batch_size: 2, max_length: 64 }],
          ['trainer', { bf16: true }, { trl: '0.21.0' }],
        ),
      numRuns: 1500,
      arity: 4,
    },
    trainerStep: trainerSpec(() =>
      v(
        [llama(), { per_device_train_batch_size: 2, bf16: true }, { sequence: 16 }],
        [llama(), { per_device_train_batch_size: 1 }, { sequence: 8, device: 'cuda' }],
      ),
    ),
    sftStep: trainerSpec(() =>
      v([llama(), { per_device_train_batch_size: 2, max_length: 16 }], [llama(), { per_device_train_batch_size: 1, max_length: 8 }, {}]),
    ),
    grpoStep: trainerSpec(() =>
      v(
        [llama(), { per_device_train_batch_size: 8, max_completion_length: 8 }, { prompt: 8 }],
        [llama(), { per_device_train_batch_size: 2, num_generations: 2, max_completion_length: 4 }, { prompt: 4 }],
      ),
    ),
    rlJob: {
      valid: () =>
        v(
          [llama(), { framework: 'trl', gpu: 'H100-80GB', trainer: { config: { per_device_train_batch_size: 8, max_completion_length: 8 }, prompt: 8 } }],
          [llama(), { framework: 'verl', gpu: 'H100-80GB', trainer: { update: { input: [1, 8] }, logProbs: { input: [1, 8], mode: 'inference' } } }],
        ),
      numRuns: 120,
      arity: 3,
    },
    adviseRl: {
      valid: () =>
        v(
          [
            llama(),
            {
              framework: 'trl',
              totalBytes: 2 ** 30,
              trainer: { config: { per_device_train_batch_size: 4, num_generations: 2, max_completion_length: 8 }, prompt: 8 },
            },
          ],
          [
            llama(),
            { framework: 'openrlhf', totalBytes: 2 ** 30, rollout: { colocate: true }, trainer: { update: { input: [2, 8] }, logProbs: { input: [2, 8] } } },
          ],
        ),
      numRuns: 60,
      arity: 3,
      // Every lever is an RL job of its own options, judged on the baseline's GPU; fitting ones first, best the first of them.
      check: (r) => {
        const a = r as api.AdviseRlResult;
        exactCount(a.baseline.peak, 'adviseRl baseline.peak');
        for (const l of a.levers) {
          exactCount(l.peak, `adviseRl ${l.lever} peak`);
          invariant(l.levers.join('+') === l.lever, `adviseRl ${l.lever}: its ids are not its levers`);
          invariant(l.options.totalBytes === a.baseline.options.totalBytes, `adviseRl ${l.lever}: another GPU than the baseline's`);
        }
        const miss = a.levers.findIndex((l) => !l.fits);
        invariant(miss === -1 || a.levers.slice(miss).every((l) => !l.fits), 'adviseRl: a fitting lever after one that does not fit');
        invariant(a.best === a.levers.find((l) => l.fits), 'adviseRl: best is not the first fitting lever');
      },
    },

    // ---- configs
    fromDeepSpeedConfig: {
      valid: () =>
        v(
          [{ train_batch_size: 8, gradient_accumulation_steps: 2, zero_optimization: { stage: 1 }, fp16: { enabled: true } }, { worldSize: 2 }],
          [
            {
              train_micro_batch_size_per_gpu: 'auto',
              gradient_accumulation_steps: 1,
              zero_optimization: { stage: 3, reduce_bucket_size: 'auto', offload_param: { device: 'cpu' } },
            },
            { trainer: { perDeviceTrainBatchSize: 2, worldSize: 4 }, hiddenSize: 64 },
          ],
          [
            {
              train_batch_size: 16,
              train_micro_batch_size_per_gpu: 2,
              gradient_accumulation_steps: 4,
              zero_optimization: { stage: 2 },
              optimizer: { type: 'AdamW' },
            },
          ],
        ),
      numRuns: 2500,
      arity: 2,
      check: (r) => {
        const reading = r as api.DeepSpeedReading;
        exactCount(reading.options.parallel.dp, 'options.parallel.dp');
        exactCount(reading.microBatchSize, 'microBatchSize');
        invariant(
          reading.trainBatchSize === reading.microBatchSize * reading.options.microBatches * reading.options.parallel.dp,
          `fromDeepSpeedConfig: train_batch_size ${reading.trainBatchSize} is not micro × accumulation × world`,
        );
        invariant(Object.isFrozen(reading), 'fromDeepSpeedConfig: the reading is not frozen');
      },
    },
    fromTrainingArguments: {
      valid: () =>
        v(
          [{ output_dir: 'out', per_device_train_batch_size: 2, gradient_checkpointing: true, report_to: [] }],
          [{ per_device_train_batch_size: 4, bf16: true, debug: [], accelerator_config: null, optim: 'adamw_torch' }, { trl: '1.13.0' }],
          [
            {
              per_device_train_batch_size: 2,
              gradient_accumulation_steps: 2,
              deepspeed: { zero_optimization: { stage: 2 }, train_micro_batch_size_per_gpu: 'auto' },
            },
            { worldSize: 4, hiddenSize: 64 },
          ],
          [{ deepspeed: 'ds_config.json' }, { deepspeed: { train_batch_size: 16, zero_optimization: { stage: 3 } }, worldSize: 2 }],
        ),
      numRuns: 2500,
      arity: 2,
      check: (r) => {
        const reading = r as api.TrainingArgumentsReading;
        exactCount(reading.resolved.batch, 'resolved.batch');
        exactCount(reading.resolved.accumulation, 'resolved.accumulation');
        invariant(Object.isFrozen(reading) && Object.isFrozen(reading.args), 'fromTrainingArguments: the reading is not frozen');
        if (reading.options !== undefined) {
          exactCount(reading.options.parallel.dp, 'options.parallel.dp');
          invariant(reading.options.microBatches === reading.resolved.accumulation, "fromTrainingArguments: DeepSpeed accumulation is not the arguments'");
        }
      },
    },
    fromAccelerateConfig: {
      valid: () =>
        v(
          [{ distributed_type: 'MULTI_GPU', num_processes: 4, mixed_precision: 'bf16', rdzv_backend: 'static' }],
          [
            { distributed_type: 'MULTI_GPU', num_processes: 2, mixed_precision: 'no', fsdp_config: {}, deepspeed_config: {} },
            { layers: 4, gradientAccumulationSteps: 2 },
          ],
          [{ distributed_type: 'DEEPSPEED', num_processes: 2, deepspeed_config: { zero_stage: 3, offload_optimizer_device: 'cpu' } }, { batchSize: 2 }],
          [
            { distributed_type: 'DEEPSPEED', num_processes: 2, deepspeed_config: { deepspeed_config_file: 'ds.json' } },
            { deepspeedConfig: { zero_optimization: { stage: 2, reduce_bucket_size: 'auto' }, train_micro_batch_size_per_gpu: 'auto' }, hiddenSize: 64 },
          ],
          [{ distributed_type: 'NO', use_cpu: true }],
        ),
      numRuns: 2500,
      arity: 2,
      check: (r) => {
        const reading = r as api.AccelerateReading;
        exactCount(reading.processes, 'processes');
        exactCount(reading.machines, 'machines');
        if (reading.options.parallel !== undefined) exactCount(reading.options.parallel.dp, 'options.parallel.dp');
        invariant(reading.options.parallel === undefined || reading.options.parallel.dp === reading.processes, 'fromAccelerateConfig: dp is not num_processes');
        invariant(Object.isFrozen(reading) && Object.isFrozen(reading.options), 'fromAccelerateConfig: the reading is not frozen');
      },
    },

    // ---- closed forms
    zeroPaper: {
      valid: () => v([{ params: 7.5e9, gpus: 64 }], [{ params: 1000, gpus: 2, k: 12 }]),
      numRuns: 3000,
      arity: 2,
      check: (r) => {
        for (const [key, value] of Object.entries(r as object))
          invariant(typeof value === 'number' && Number.isFinite(value) && value >= 0, `zeroPaper.${key} = ${str(value)}`);
      },
    },
    deepspeedZero2: {
      valid: () => v([{ totalParams: 7.5e9, gpusPerNode: 8, nodes: 8, cpuOffload: false }], [{ totalParams: 1e6 }]),
      numRuns: 3000,
      arity: 2,
      check: (r) => nonNegativeNumbers(r, 'deepspeedZero2'),
    },
    deepspeedZero3: {
      valid: () =>
        v(
          [{ totalParams: 2851e6, largestLayerParams: 32e6, gpusPerNode: 8, cpuOffload: false }],
          [{ totalParams: 1e6, largestLayerParams: 1e3, zeroInit: true }],
        ),
      numRuns: 3000,
      arity: 2,
      check: (r) => nonNegativeNumbers(r, 'deepspeedZero3'),
    },
    megatronPaddedVocab: {
      valid: () => v([50257, 2], [32000, 1, 64], [128, 8]),
      numRuns: 3000,
      arity: 4,
      check: (r, [vocab, tp, by = 128]) => {
        const m = (by as number) * (tp as number);
        invariant(r === Math.ceil((vocab as number) / m) * m, `megatronPaddedVocab gave ${str(r)}`);
      },
    },
    megatronTheoretical: {
      valid: () =>
        v(
          [
            {
              numLayers: 24,
              hiddenSize: 2048,
              numAttentionHeads: 16,
              paddedVocabSize: 50432,
              tensorModelParallelSize: 2,
              dataParallelSize: 4,
              seqLength: 2048,
              microBatchSize: 4,
            },
            4,
          ],
          [
            {
              numLayers: 2,
              hiddenSize: 64,
              numAttentionHeads: 4,
              paddedVocabSize: 128,
              dataParallelSize: 1,
              seqLength: 16,
              microBatchSize: 1,
              swiglu: true,
              normalization: 'RMSNorm',
            },
          ],
        ),
      numRuns: 3000,
      arity: 3,
      check: (r) => exactCount((r as api.MegatronFigures).weightAndOptimizer, 'weightAndOptimizer'),
    },

    // ---- reports
    formatBreakdown: estimateReport(() => v([s.cnnEstimate()], [s.symEstimate()], [s.mlpEstimate()]), checkString),
    formatBreakdownMarkdown: estimateReport(() => v([s.cnnEstimate()], [s.mlpEstimate()]), checkString),
    explain: estimateReport(
      () => v([s.cnnEstimate()], [s.mlpEstimate()], [s.llamaEstimate()]),
      (r) => invariant(Array.isArray(r), 'explain gave no list'),
    ),
    formatExplain: {
      valid: () => v([api.explain(s.cnnEstimate()), 3], [api.explain(s.mlpEstimate())]),
      numRuns: 2000,
      arity: 3,
      check: checkString,
    },
    estimateToJSON: estimateReport(
      () => v([s.cnnEstimate()], [s.symEstimate()]),
      (r) => invariant(JSON.stringify(r) !== undefined, 'not JSON'),
    ),
    breakdownSvg: estimateReport(
      () => v([s.cnnEstimate()], [s.mlpEstimate(), 'title'], [s.mlpEstimate(), { title: 't', capacity: 2 ** 20, maxColumns: 10 }]),
      checkSvg,
    ),
    timelineSvg: estimateReport(() => v([s.cnnEstimate()], [s.mlpEstimate(), { title: 't', capacity: 2 ** 20, maxColumns: 10 }]), checkSvg),
    formatTorchinfo: estimateReport(() => v([s.cnnIR()], [s.mlpIR(), { depth: 2, colWidth: 20 }]), checkString),
    formatTorchsummary: estimateReport(() => v([s.cnnIR()], [s.mlpIR(), { variant: '1.5.1', batchSize: 2 }]), checkString),
    summary: {
      valid: () =>
        v(
          [s.cnn(), { input: [1, 3, 8, 8], format: 'torchsummary' }],
          [s.mlp(), { input: [2, 8], format: 'breakdown' }],
          [s.mlp(), { input: [2, 8], format: 'torchinfo', torchinfo: { depth: 2 } }],
        ),
      numRuns: 600,
      arity: 3,
      check: checkString,
    },
    formatBytes: {
      valid: () => v([3461925408], [0], [api.mul(B(), 1024)]),
      numRuns: 3000,
      arity: 2,
      check: checkString,
    },
    formatCount: { valid: () => v([1520931], [api.mul(B(), 8)]), numRuns: 3000, arity: 2, check: checkString },
    safetensorsSummary: {
      valid: () =>
        v(
          [{ w: { dtype: 'BF16', shape: [4, 8], data_offsets: [0, 64] }, __metadata__: {} }],
          [{ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'I64', shape: [], data_offsets: [8, 16] } }, { dataBytes: 16 }],
        ),
      numRuns: 3000,
      arity: 3,
      check: (r) => exactCount((r as api.SafetensorsSummary).params, 'params'),
    },

    // ---- GPUs, runtime
    gpu: {
      valid: () => v(['A800-80GB'], ['v100'], ['H100-80GB']),
      numRuns: 3000,
      arity: 2,
      check: (r) => invariant(api.GPUS.includes(r as api.GpuSpec), 'gpu gave no catalog entry'),
    },
    memoryBudget: {
      valid: () => v(['24GB'], [1e9], ['512MB'], ['H100-80GB']),
      numRuns: 3000,
      arity: 2,
      check: (r) => invariant(typeof r === 'number' && Number.isSafeInteger(r) && r > 0, `memoryBudget gave ${str(r)}`),
    },
    gpuCapacity: {
      valid: () => v(['24GB'], [1e9], ['RTX-3090'], ['H100-80GB']),
      numRuns: 3000,
      arity: 2,
      check: (r) => invariant(typeof r === 'number' && Number.isSafeInteger(r) && r > 0, `gpuCapacity gave ${str(r)}`),
    },
    usableMemory: {
      valid: () =>
        v(
          [{ gpu: 'RTX-3090' }],
          [{ gpu: '24GB', mode: 'inference' }],
          [{ gpu: 'H100-80GB', runtime: { context: 2 ** 29, cublasHandles: 4 } }],
          [{ gpu: 1e10, device: 'cpu' }],
          [{ gpu: 'A800-80GB', verdict: 'allocated' }],
        ),
      numRuns: 3000,
      arity: 2,
      // usable is the capacity less exactly the lines listed, each a byte count.
      check: (r) => {
        const u = r as api.UsableMemory;
        invariant(Number.isSafeInteger(u.capacity) && u.capacity > 0, `usableMemory capacity ${str(u.capacity)}`);
        for (const line of u.runtime) exactCount(line.bytes, `usableMemory ${line.label}`);
        invariant(u.capacity - u.runtime.reduce((t, l) => t + l.bytes, 0) === u.usable, 'usableMemory: usable is not capacity − the lines');
      },
    },
    torchCapacity: {
      valid: () => v(['RTX-3090'], ['H100-80GB'], ['A100-80GB'], [api.gpu('T4')]),
      numRuns: 3000,
      arity: 2,
      // The figure a cited log printed: torch's total is below the driver's and above 95 % of it.
      check: (r, [which]) => {
        const spec = api.gpu(typeof which === 'string' ? which : (which as api.GpuSpec).name);
        invariant(typeof r === 'number' && Number.isSafeInteger(r) && r <= spec.memoryBytes && r >= 0.95 * spec.memoryBytes, `torchCapacity gave ${str(r)}`);
      },
    },
    ncclConnectionBytes: {
      valid: () => v([{}], [{ p2pRead: true }], [{ buffSize: 2 ** 23 }]),
      numRuns: 3000,
      arity: 2,
      check: (r) => {
        const c = r as { send: number; recv: number };
        exactCount(c.send, 'send');
        exactCount(c.recv, 'recv');
      },
    },
    ncclLines: {
      valid: () =>
        v(
          [{ groups: [{ name: 'dp', ranks: 8 }], channels: 16 }],
          [
            {
              groups: [
                { name: 'tp', ranks: 2 },
                { name: 'dp', ranks: 4 },
              ],
              channels: 8,
            },
          ],
        ),
      numRuns: 2000,
      arity: 2,
      check: (r) => {
        invariant(Array.isArray(r), 'ncclLines gave no list');
        for (const line of r as api.RuntimeLine[]) exactCount(line.bytes, `ncclLines ${line.label}`);
      },
    },
    parseAllocConf: {
      valid: () =>
        v(['expandable_segments:True'], ['max_split_size_mb:128,garbage_collection_threshold:0.6'], ['roundup_power2_divisions:[256:1,512:2,>:8]'], ['']),
      numRuns: 3000,
      arity: 2,
      check: (r) => invariant(Object.isFrozen(r) && (r as api.AllocConf).roundupPower2Divisions.length === 16, 'parseAllocConf gave no frozen AllocConf'),
    },
    roundSize: {
      valid: () => v([1], [513], [1 << 20], [1200 * 2 ** 20, api.parseAllocConf('roundup_power2_divisions:4')]),
      numRuns: 3000,
      arity: 3,
      // Rounded up to 512 B at least, never down.
      check: (r, [size]) => invariant(typeof r === 'number' && Number.isSafeInteger(r) && r % 512 === 0 && r >= (size as number), `roundSize gave ${str(r)}`),
    },
    formatSize: {
      valid: () => v([0], [512], [3 << 20], [2 ** 40]),
      numRuns: 3000,
      arity: 2,
      check: checkString,
    },
    runtimeLines: {
      valid: () => v([{ cublas: true }, 'ampere'], [{ context: true, cublas: 2 ** 20, cublasHandles: 2, cudnnWorkspace: 1024 }, 'hopper'], [{}, 'volta']),
      numRuns: 3000,
      arity: 3,
      check: (r) => {
        invariant(Array.isArray(r), 'runtimeLines gave no list');
        for (const line of r as api.RuntimeLine[]) exactCount(line.bytes, `runtimeLines ${line.label}`);
      },
    },
    replayAllocator: {
      valid: () => v([[[0, 100], [1, 3 << 20], [-1], [2, 200]]], [[]], [[[0, 512], [1, 512], [-0], [-1]]]),
      numRuns: 3000,
      arity: 2,
      check: (r) => {
        const a = r as api.AllocatorReplay;
        exactCount(a.maxReserved, 'maxReserved');
        exactCount(a.maxAllocated, 'maxAllocated');
      },
    },

    // ---- the Hub
    fromHub: {
      valid: () => v(['my-org/tiny-llama', { fetch: cannedHub() }], ['my-org/tiny-llama', { fetch: cannedHub(), revision: 'main', timeout: 1000 }]),
      numRuns: 600,
      arity: 3,
      async: true,
      extra: () => fc.tuple(fc.oneof(fc.constant('my-org/tiny-llama'), junk), hostileHubOptions()),
      check: (r) => exactCount((r as api.HubModel).parameters, 'parameters'),
    },
    fromTrlConfig: {
      valid: () =>
        v(
          ['sft', { model_name_or_path: 'Qwen/Qwen2.5-0.5B', dataset_name: 'trl-lib/Capybara', per_device_train_batch_size: 8, use_peft: true, lora_r: 16 }],
          [
            'grpo',
            { dataset_name: 'x', reward_funcs: ['accuracy_reward'], dtype: 'bfloat16', attn_implementation: 'sdpa', env: { A: '1' } },
            { trl: '1.13.0' },
          ],
          ['sft', { torch_dtype: 'float32', lora_target_modules: ['q_proj'], num_processes: 1 }, {}],
        ),
      numRuns: 2500,
      arity: 3,
      check: (r) => {
        const reading = r as api.TrlScriptConfig;
        invariant(Object.isFrozen(reading) && Object.isFrozen(reading.config), 'fromTrlConfig: the reading is not frozen');
        if (reading.peft !== undefined) invariant(Object.isFrozen(reading.peft), 'fromTrlConfig: the LoraConfig is not frozen');
      },
    },
  };
}

// ---------------------------------------------------------------- spec families

function symBinary(ref: (a: number, b: number) => number): Spec {
  return {
    valid: () => v([api.sym('S'), 1], [3, 4], [api.sym('B'), api.sym('S')], [api.mul(api.sym('H'), 2), 2]),
    numRuns: 3000,
    arity: 3,
    check: (r, [a, b]) => {
      wellFormed(r);
      if (Number.isSafeInteger(a) && Number.isSafeInteger(b)) {
        const want = ref(a as number, b as number);
        invariant(Number.isSafeInteger(want) && r === want, `gave ${str(r)}, want ${want}`);
      } else invariant(typeof r === 'number' ? Number.isSafeInteger(r) : api.isExpr(r), `gave ${str(r)}`);
    },
  };
}

function symList(ref: (xs: number[]) => number): Spec {
  return {
    valid: () => v([[1, 2, 3]], [[api.sym('B'), 1]], [[]], [[2, api.sym('S'), api.sym('S')]]),
    numRuns: 3000,
    arity: 2,
    check: (r, [xs]) => {
      wellFormed(r);
      if (Array.isArray(xs) && xs.every((x) => Number.isSafeInteger(x)))
        invariant(Number.isSafeInteger(ref(xs as number[])) && r === ref(xs as number[]), `gave ${str(r)}`);
      else invariant(typeof r === 'number' ? Number.isSafeInteger(r) : api.isExpr(r), `gave ${str(r)}`);
    },
  };
}

function symDiv(round: (x: number) => number): Spec {
  return {
    valid: () => v([7, 2], [api.sym('H'), 2], [api.add(api.sym('S'), 3), 4]),
    numRuns: 3000,
    arity: 3,
    check: (r, [a, d]) => {
      wellFormed(r);
      if (Number.isSafeInteger(a) && Number.isSafeInteger(d))
        invariant(Number.isSafeInteger(round((a as number) / (d as number))) && r === round((a as number) / (d as number)), `gave ${str(r)}`);
      else invariant(typeof r === 'number' ? Number.isSafeInteger(r) : api.isExpr(r), `gave ${str(r)}`);
    },
  };
}

function modelCount(valid: () => unknown[][]): Spec {
  return { valid, numRuns: 3000, arity: 3, check: (r) => exactCount(r, 'count') };
}

function trainerSpec(valid: () => unknown[][]): Spec {
  return {
    valid,
    numRuns: 150,
    arity: 4,
    check: (r) => {
      const t = r as api.TrainerStepEstimate;
      exactCount(t.peak, 'peak');
    },
  };
}

function estimateReport(valid: () => unknown[][], check: Spec['check']): Spec {
  return { valid, numRuns: 800, arity: 3, ...(check !== undefined ? { check } : {}) };
}

function checkSvg(r: unknown, args?: readonly unknown[]): void {
  checkString(r, args);
  invariant((r as string).startsWith('<svg'), 'not an svg');
}

function nonNegativeNumbers(r: unknown, what: string): void {
  invariant(typeof r === 'object' && r !== null, `${what} gave no object`);
  for (const [key, value] of Object.entries(r)) if (typeof value === 'number') invariant(Number.isFinite(value) && value >= 0, `${what}.${key} = ${value}`);
}

function isConcreteCounts(o: unknown, keys = ['batch', 'seq']): boolean {
  return typeof o === 'object' && o !== null && keys.every((k) => typeof (o as Record<string, unknown>)[k] === 'number');
}

// ---------------------------------------------------------------- a Hub served from memory

const HUB_CONFIG = {
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  vocab_size: 256,
  torch_dtype: 'bfloat16',
  tie_word_embeddings: true,
};

function safetensorsFile(): Uint8Array {
  const tensors: Record<string, number[]> = {
    'model.embed_tokens.weight': [256, 64],
    'model.norm.weight': [64],
    'model.layers.0.input_layernorm.weight': [64],
    'model.layers.0.post_attention_layernorm.weight': [64],
    'model.layers.0.self_attn.q_proj.weight': [64, 64],
    'model.layers.0.self_attn.k_proj.weight': [64, 64],
    'model.layers.0.self_attn.v_proj.weight': [64, 64],
    'model.layers.0.self_attn.o_proj.weight': [64, 64],
    'model.layers.0.mlp.gate_proj.weight': [128, 64],
    'model.layers.0.mlp.up_proj.weight': [128, 64],
    'model.layers.0.mlp.down_proj.weight': [64, 128],
  };
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const [name, shape] of Object.entries(tensors)) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 2;
    header[name] = { dtype: 'BF16', shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const file = new Uint8Array(8 + json.length);
  new DataView(file.buffer).setBigUint64(0, BigInt(json.length), true);
  file.set(json, 8);
  return file;
}

type Fetch = (url: string, init?: RequestInit) => Promise<Response>;

/** A Hub answering config.json and model.safetensors from memory, 404 for the rest; `config` replaces the config's text. */
export function cannedHub(config: string = JSON.stringify(HUB_CONFIG), file: Uint8Array = safetensorsFile()): Fetch {
  return async (url: string) =>
    url.endsWith('/config.json')
      ? new Response(config)
      : url.endsWith('/model.safetensors')
        ? new Response(file.slice(), { status: 206 })
        : new Response('not found', { status: 404 });
}

/** Fetches that misbehave: wrong statuses, junk bodies and values, a rejected promise, one that never settles (with a timeout set). */
function hostileHubOptions(): fc.Arbitrary<unknown> {
  const fetches = fc.oneof(
    fc.constant(cannedHub()),
    fc.json({ maxDepth: 2 }).map((text) => cannedHub(text)),
    fc.constant<Fetch>(async () => new Response('oops', { status: 500 })),
    fc.constant<Fetch>(async () => new Response('{"model_type": "llama"', { status: 200 })),
    fc.constant<Fetch>(async () => null as unknown as Response),
    fc.constant<Fetch>(async () => ({ ok: true, status: 200 }) as unknown as Response),
    fc.constant<Fetch>(() => Promise.reject(new TypeError('fetch failed'))),
    fc.constant<Fetch>(() => {
      throw new TypeError('sync throw');
    }),
    fc.uint8Array({ maxLength: 64 }).map((bytes) => cannedHub(JSON.stringify(HUB_CONFIG), bytes)),
    junk,
  );
  return fc.oneof(
    fc.record({ fetch: fetches }),
    fc.record({ fetch: fetches, revision: fc.oneof(fc.constant('main'), junk) }),
    fc.record({ fetch: fc.constant<Fetch>(() => new Promise<Response>(() => undefined)), timeout: fc.constant(20) }),
    fc.record({
      fetch: fetches,
      cache: fc.oneof(junk, fc.constant({ get: () => undefined, set: () => undefined }), fc.constant({ get: () => ({ text: 'junk' }), set: () => undefined })),
    }),
  );
}
