import { fail } from './errors.js';
import { estimateOptions } from './estimate-options.js';
import { checkModuleNames } from './module-names.js';
import type { Estimate, EstimateOptions, ModuleRow, ParamCounts, PeakDetails, Precision, StepSummary } from './estimate-types.js';
import { show, validate, type Check } from './validate.js';
import type { StepProgram } from './memory/ledger.js';
import { optimizerSpec } from './memory/optimizers.js';
import { concreteTimeline, once, programPeakAt, programTimeline, type Repetition } from './memory/program.js';
import { concreteStep, replayReserved } from './memory/reserved.js';
import { savedBytesByOp, savedStorages } from './memory/saved.js';
import { simulateInference, simulateStep, type StepResult, type StepSettings } from './memory/simulate.js';
import type { Layer, ModuleLayer, QuantizationPlan } from './nn/types.js';
import { declaredBlocks } from './nn/repeated.js';
import { reducedBlocks, type ReducedBlocks } from './trace/blocks.js';
import { weigh } from './memory/residency/kit.js';
import { rankSetup, type RankSetup } from './parallel/index.js';
import { isExpr, type Dim } from './sym/expr.js';
import { add, sum } from './sym/ops.js';
import { checkDType, type DType } from './tensor/dtype.js';
import { specBytes, tensor, type TensorSpec } from './tensor/spec.js';
import type { IR } from './trace/ir.js';
import { trace, type TraceOptions } from './trace/trace.js';

/** QLoRA's base: `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`, every Linear but the output embedding. */
const QLORA_BASE: QuantizationPlan = { scheme: { method: 'bnb-4bit', quantType: 'nf4', doubleQuant: true }, skip: ['lm_head'] };

/**
 * PEFT's targets when `target_modules` is None (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING):
 * q_proj and v_proj for the Llama family, GPT-2's fused c_attn; the four attention projections
 * for models vram-ts does not know the family of.
 */
function defaultLoraTargets(model: Layer): readonly string[] {
  const family = model.kind === 'module' ? model.meta?.family : undefined;
  if (family === 'gpt2') return ['c_attn'];
  if (family === 'llama' || family === 'qwen2' || family === 'mistral') return ['q_proj', 'v_proj'];
  return ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
}

const PRECISIONS: Readonly<Record<Precision, { readonly dtype: DType; readonly autocast: DType | null }>> = {
  fp32: { dtype: 'float32', autocast: null },
  fp16: { dtype: 'float16', autocast: null },
  bf16: { dtype: 'bfloat16', autocast: null },
  'amp-fp16': { dtype: 'float32', autocast: 'float16' },
  'amp-bf16': { dtype: 'float32', autocast: 'bfloat16' },
};

const LAYER_KINDS = ['op', 'seq', 'module', 'residual', 'branch', 'graph'];

/** A VramError unless the value is a vram-ts layer (plain data made by this package's builders). */
export function checkModel(model: unknown): asserts model is Layer {
  const kind = typeof model === 'object' && model !== null ? (model as { kind?: unknown }).kind : undefined;
  if (typeof kind !== 'string' || !LAYER_KINDS.includes(kind))
    fail('bad-model', 'not a vram-ts model: build one with the layer builders, a catalog function or fromHFConfig', {
      path: ['model'],
      expected: 'a layer',
      received: show(model),
    });
}

/**
 * The results estimate() and traceModel() made (a WeakSet: nothing kept alive, nothing to read on
 * the hot path), so that the reports, which read deep into them, take those and refuse anything
 * else up front, a copy or a hand-made look-alike included, with a VramError rather than a
 * TypeError from deep inside.
 */
const ESTIMATES = new WeakSet<object>();
const TRACES = new WeakSet<object>();

/** Whether `value` is a result of {@link estimate} (the object it returned, not a copy). */
export function isEstimate(value: unknown): value is Estimate {
  return typeof value === 'object' && value !== null && ESTIMATES.has(value);
}

/** Whether `value` is an IR of {@link traceModel} (or an estimate's `ir`). */
export function isTraced(value: unknown): value is IR {
  return typeof value === 'object' && value !== null && TRACES.has(value);
}

/** An argument that must be a result of estimate(). */
export const estimateResult: Check = (value, path, issues) => {
  if (isEstimate(value)) return;
  issues.push({ path, code: 'bad-argument', message: 'must be a result of estimate()', expected: 'the object estimate() returned', received: show(value) });
};

/** An argument that must be an IR of traceModel() (an estimate's `ir` is one). */
export const tracedModel: Check = (value, path, issues) => {
  if (isTraced(value)) return;
  const hint = isEstimate(value) ? ': this is an estimate, pass its .ir' : '';
  issues.push({
    path,
    code: 'bad-argument',
    message: `must be the IR of traceModel()${hint}`,
    expected: 'the object traceModel() returned',
    received: show(value),
  });
};

/** Normalises estimate's `input` option to tensor specs. */
export function inputSpecs(input: EstimateOptions['input'], dtype: DType): TensorSpec[] {
  if (Array.isArray(input) && input.length > 0 && typeof input[0] === 'object' && input[0] !== null && 'shape' in (input[0] as object)) {
    return (input as readonly TensorSpec[]).map((spec) => tensor(spec.shape, spec.dtype));
  }
  if (!Array.isArray(input)) {
    if (typeof input === 'object' && input !== null && 'shape' in input) return [tensor((input as TensorSpec).shape, (input as TensorSpec).dtype)];
    return fail('bad-input', 'input must be a shape array or tensor specs', { path: ['input'], received: typeof input });
  }
  if (input.length === 0) fail('bad-input', 'input shape is empty', { path: ['input'], expected: 'batch-first shape' });
  return [tensor(input as readonly Dim[], dtype)];
}

/** Whether a parameter trains: not under a frozen prefix, and (with LoRA) an adapter. */
export function trainableBy(prefixes: readonly string[], loraOnly: boolean): (key: string) => boolean {
  return (key) =>
    !prefixes.some((prefix) => prefix === '' || key === prefix || key.startsWith(`${prefix}.`)) &&
    (!loraOnly || key.includes('.lora_A.') || key.includes('.lora_B.'));
}

/**
 * Traces a model with estimate's options (the IR that estimate and the reports read).
 *
 * @example
 * ```ts
 * import { mobilenetV3Small, traceModel } from 'vram-ts';
 * const ir = traceModel(mobilenetV3Small(), { input: [1, 3, 224, 224] });
 * console.log(ir.ops.length > 100); // true
 * ```
 */
export function traceModel(model: Layer, options: EstimateOptions): IR {
  checkModel(model);
  validate(options, estimateOptions);
  return traceWith(model, options);
}

/**
 * traceModel of checked options, with trace options the public options do not reach (a pipeline
 * rank's per-input gradients).
 */
/**
 * Traces kept while a search runs ({@link withTraces}), per model, keyed by what a trace reads of
 * the options: every rank of a job, and every layout a plan weighs, traces the same graph (the
 * parallel plan acts after the trace). Outside a search nothing is kept: an estimate traces afresh.
 */
let traceCache: WeakMap<Layer, Map<string, IR>> | undefined;
const TRACES_PER_MODEL = 16;

/**
 * `run()` with the traces it makes kept and reused until it returns (nested calls share the
 * outer one's): for searches that estimate one model under many plans (estimateRanks, plan).
 */
export function withTraces<T>(run: () => T): T {
  if (traceCache !== undefined) return run();
  traceCache = new WeakMap();
  try {
    return run();
  } finally {
    traceCache = undefined;
  }
}

/** What a trace reads of the options, as a key; undefined where a value is not plain data (never cached). */
function traceKey(options: EstimateOptions, overrides: Pick<TraceOptions, 'inputRequiresGrad'>): string | undefined {
  const { mode, precision, dtype, inputDtype, moduleMode, input, device, framework, loss, checkpoint, inputRequiresGrad, freeze, lora } = options;
  try {
    return JSON.stringify(
      [mode, precision, dtype, inputDtype, moduleMode, input, device, framework, loss, checkpoint, inputRequiresGrad, freeze, lora, overrides],
      (_, value) => {
        // A symbolic size by its canonical key (bounds included): plan's micro-batch solves trace one graph per bound.
        if (isExpr(value)) return { expr: value.key };
        if (typeof value === 'function' || typeof value === 'symbol' || typeof value === 'bigint') throw new TypeError('not plain data');
        return value;
      },
    );
  } catch {
    return undefined;
  }
}

function traceWith(model: Layer, options: EstimateOptions, overrides: Pick<TraceOptions, 'inputRequiresGrad'> = {}): IR {
  const cache = traceCache;
  const key = cache === undefined ? undefined : traceKey(options, overrides);
  const cached = key === undefined ? undefined : cache!.get(model)?.get(key);
  if (cached !== undefined) {
    checkModuleNames(cached, options);
    return cached;
  }
  const ir = traceFresh(model, options, overrides);
  if (key !== undefined) {
    let traces = cache!.get(model);
    if (traces === undefined) {
      traces = new Map();
      cache!.set(model, traces);
    }
    if (traces.size >= TRACES_PER_MODEL) traces.delete(traces.keys().next().value!);
    traces.set(key, ir);
  }
  return ir;
}

function traceFresh(model: Layer, options: EstimateOptions, overrides: Pick<TraceOptions, 'inputRequiresGrad'>): IR {
  const mode = options.mode ?? 'train';
  if (mode !== 'train' && mode !== 'inference') fail('bad-option', 'mode must be train or inference', { path: ['mode'], received: String(mode) });
  const precision = options.precision === undefined ? undefined : PRECISIONS[options.precision];
  if (precision !== undefined && options.dtype !== undefined && options.dtype !== precision.dtype) {
    fail('bad-option', `dtype ${options.dtype} contradicts precision ${options.precision} (parameters in ${precision.dtype})`, {
      path: ['dtype'],
      expected: `${precision.dtype}, or no dtype`,
      received: options.dtype,
    });
  }
  if (options.precision !== undefined && precision === undefined)
    fail('bad-option', 'unknown precision', { path: ['precision'], expected: Object.keys(PRECISIONS).join(' | '), received: String(options.precision) });
  const modelDtype = model.kind === 'module' ? model.dtype : undefined;
  const dtype = checkDType(options.dtype ?? precision?.dtype ?? modelDtype ?? 'float32', ['dtype']);
  const declared = model.kind === 'module' ? model.inputDtype : undefined;
  const inputDtype = checkDType(options.inputDtype ?? declared ?? dtype, ['inputDtype']);
  const moduleMode = options.moduleMode ?? (mode === 'train' ? 'train' : 'eval');
  // A model loaded quantized keeps its format; QLoRA loads in bitsandbytes NF4 (double quantised) otherwise.
  const quantize = (model.kind === 'module' ? model.quantization : undefined) ?? (options.lora?.quantizeBase ? QLORA_BASE : undefined);
  const ir = trace(model, {
    inputs: inputSpecs(options.input, inputDtype),
    training: moduleMode === 'train',
    gradEnabled: mode === 'train',
    device: options.device ?? 'cuda',
    ...(options.framework !== undefined ? { framework: options.framework } : {}),
    paramDtype: dtype,
    loss: options.loss ?? 'cross_entropy',
    autocast: precision?.autocast ?? null,
    ...(options.checkpoint !== undefined ? { checkpoint: options.checkpoint } : {}),
    ...(options.inputRequiresGrad !== undefined ? { inputRequiresGrad: options.inputRequiresGrad } : {}),
    ...(options.freeze !== undefined || options.lora !== undefined ? { trainable: trainableBy(options.freeze ?? [], options.lora !== undefined) } : {}),
    ...(options.lora !== undefined
      ? { lora: { ...options.lora, targets: options.lora.targets ?? defaultLoraTargets(model), adapterDtype: options.lora.adapterDtype ?? 'float32' } }
      : {}),
    ...(quantize !== undefined ? { quantize } : {}),
    ...overrides,
  });
  checkModuleNames(ir, options);
  TRACES.add(ir);
  return ir;
}

function numelOf(ir: IR, id: number): number {
  let n = 1;
  for (const d of ir.tensors[id]!.spec.shape) n *= typeof d === 'number' ? d : NaN;
  return n;
}

/** Parameters of every module and its subtree, each distinct tensor once (tied or shared weights too). */
function paramsPerModule(ir: IR): { own: number[]; total: number[] } {
  const own = ir.modules.map((m) => m.params.reduce((s, id) => s + numelOf(ir, id), 0));
  const owners = new Map<number, number>();
  let shared = false;
  for (const m of ir.modules)
    for (const id of m.params) {
      owners.set(id, (owners.get(id) ?? 0) + 1);
      if (owners.get(id)! > 1) shared = true;
    }
  const total = [...own];
  if (!shared) {
    // Modules are in pre-order, so children come after their parent: fold from the end.
    for (let i = ir.modules.length - 1; i >= 0; i -= 1) {
      const parent = ir.modules[i]!.parent;
      if (parent !== null) total[parent]! += total[i]!;
    }
    return { own, total };
  }
  const sets = ir.modules.map((m) => new Set(m.params));
  for (let i = ir.modules.length - 1; i >= 0; i -= 1) {
    const parent = ir.modules[i]!.parent;
    if (parent !== null) for (const id of sets[i]!) sets[parent]!.add(id);
  }
  return {
    own: ir.modules.map((m) => new Set(m.params)).map((set) => [...set].reduce((s, id) => s + numelOf(ir, id), 0)),
    total: sets.map((set) => [...set].reduce((s, id) => s + numelOf(ir, id), 0)),
  };
}

/**
 * Parameters, buffers, input and saved-activation bytes of a model, with per-module
 * rows. Concrete inputs give numbers; symbolic dimensions (see {@link sym}) give
 * expressions that {@link evaluate} turns into the same numbers. A model that declares
 * identical blocks (the catalog decoders do) is traced with three of them and the interior
 * one counted over, exactly: the cost does not grow with depth.
 *
 * @example
 * ```ts
 * import { estimate, mobilenetV3Small } from 'vram-ts';
 * const model = mobilenetV3Small({ numClasses: 3 });
 * const r = estimate(model, { input: [1, 3, 4000, 2672] });
 * console.log(r.params.total, r.bytes.activations); // 1520931 3437733408
 * // PyTorch 1.13 also kept the input of the global pooling (its mean saved it):
 * console.log(estimate(model, { input: [1, 3, 4000, 2672], framework: 'torch-1.13' }).bytes.activations); // 3461925408
 * ```
 */
export function estimate(model: Layer, options: EstimateOptions & { readonly input: readonly number[] }): Estimate<number>;
export function estimate(model: Layer, options: EstimateOptions): Estimate;
export function estimate(model: Layer, options: EstimateOptions): Estimate {
  checkModel(model);
  validate(options, estimateOptions);
  return estimateOf(
    model,
    rankSetup(model, options, () => storedDtype(model, options)),
  );
}

/** estimate(), its engine asked to stand for every rank of the group where it can (EngineEnv.family): rankPeaks' run. */
export function estimateFamily(model: Layer, options: EstimateOptions): Estimate {
  checkModel(model);
  validate(options, estimateOptions);
  return estimateOf(
    model,
    rankSetup(model, options, () => storedDtype(model, options), true),
  );
}

/** The dtype a model's parameters are stored in under the options (what traceModel resolves). */
function storedDtype(model: Layer, options: EstimateOptions): DType {
  const precision = options.precision === undefined ? undefined : PRECISIONS[options.precision];
  return checkDType(options.dtype ?? precision?.dtype ?? (model.kind === 'module' ? model.dtype : undefined) ?? 'float32', ['dtype']);
}

/** The estimate of the rank: a pipeline rank's stages, a model's reduced repeated blocks, or the whole trace. */
function estimateOf(model: Layer, rank: RankSetup<EstimateOptions>): Estimate {
  const { options } = rank;
  if (rank.pipeline !== null) {
    const cut = rank.pipeline(traceWith);
    return assemble(cut.ir, cut.options, undefined, cut.model, rank, cut.run);
  }
  const repeated = declaredBlocks(model);
  if (repeated !== undefined && repeated.count > 3 && !rank.wholeTrace && !mentionsBlock(model as ModuleLayer, options, repeated.prefix, rank.moduleNames)) {
    // Identical blocks: trace three (first, one interior, last) and count the interior one over.
    const ir = traceWith(reducedModel(model as ModuleLayer), options);
    const blocks = reducedBlocks(ir, repeated.prefix, repeated.count);
    if (blocks !== null) {
      const fullIr = once(() => traceWith(model, options));
      const full = once(() => assemble(fullIr(), options, undefined, model, rank));
      return assemble(ir, options, { blocks, fullIr, full }, model, rank);
    }
  }
  return assemble(traceWith(model, options), options, undefined, model, rank);
}

/** The model with three blocks in its body (kept per model: a model is immutable data). */
const reducedModels = new WeakMap<ModuleLayer, ModuleLayer>();

function reducedModel(model: ModuleLayer): ModuleLayer {
  let reduced = reducedModels.get(model);
  if (reduced === undefined) {
    reduced = Object.freeze({ ...model, body: model.repeated!.withCount(3).body });
    reducedModels.set(model, reduced);
  }
  return reduced;
}

const blockNames = new Map<string, RegExp>();

/** Whether an option, the quantization or the rank's plan (`planNames`) names one block (`model.layers.5`): then the blocks differ. */
function mentionsBlock(model: ModuleLayer, options: EstimateOptions, prefix: string, planNames: readonly string[]): boolean {
  const names = [
    ...(options.freeze ?? []),
    ...(options.checkpoint?.modules ?? []),
    ...(Array.isArray(options.lora?.targets) ? options.lora.targets : []),
    ...(model.quantization?.within ?? []),
    ...(model.quantization?.skip ?? []),
    ...planNames,
  ];
  // Conservative: any name with the container's last part and an index (`layers.5`, `h.0.attn`).
  let block = blockNames.get(prefix);
  if (block === undefined) {
    const container =
      prefix
        .split('.')
        .filter((part) => part !== '')
        .at(-1) ?? prefix;
    block = new RegExp(`(^|\\.)${container.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.\\d`);
    blockNames.set(prefix, block);
  }
  return names.some((name) => typeof name === 'string' && block.test(name));
}

/** Defines an enumerable property computed on first read (then kept). */
function lazy<T extends object>(target: T, key: string, make: () => unknown): T {
  const get = once(make);
  Object.defineProperty(target, key, { enumerable: true, get });
  return target;
}

/** The full model behind a reduced trace: its IR and estimate, made only when read. */
interface Reduced {
  readonly blocks: ReducedBlocks;
  readonly fullIr: () => IR;
  readonly full: () => Estimate;
}

/**
 * Where a step keeps its compact program (with its repetition), for maxFitting: a hidden
 * property of the step itself, so that it goes with the estimate (a WeakMap entry would keep
 * the program alive through minor collections).
 */
const COMPACT: unique symbol = Symbol('compact program');

type CompactStep = StepSummary & { readonly [COMPACT]?: () => { readonly program: StepProgram; readonly repeat?: Repetition } };

/**
 * An exact evaluator of a step's peak at symbol values (the step's program replayed; for a
 * model estimated from its reduced blocks, the compact program without expanding it).
 */
export function stepPeakAt(step: StepSummary): (env: Readonly<Record<string, number>>) => number {
  const compact = (step as CompactStep)[COMPACT]?.();
  return compact === undefined ? programPeakAt(step.program) : programPeakAt(compact.program, compact.repeat);
}

/** What the traced model holds by category outside the step: its parameters (counted), buffers, saved activations, gradients. */
function modelBytes(
  ir: IR,
  blocks: ReducedBlocks | undefined,
  saved: ReturnType<typeof savedStorages>,
): { readonly params: ParamCounts; readonly parameters: Dim; readonly buffers: Dim; readonly activations: Dim; readonly gradients: Dim } {
  // With reduced blocks, what the interior block has counts `times` over.
  const times = blocks?.times ?? 1;
  const unitOf = (storage: number) => blocks?.storageUnit[storage] ?? -1;
  let paramElements = 0;
  let trainable = 0;
  const paramBytes: Dim[] = [];
  const bufferBytes: Dim[] = [];
  for (const storage of ir.storages) {
    if (storage.role === 'param') paramBytes.push(weigh(storage.bytes, unitOf(storage.id), times));
    if (storage.role === 'buffer') bufferBytes.push(weigh(storage.bytes, unitOf(storage.id), times));
  }
  for (const t of ir.tensors) {
    if (t.role !== 'param') continue;
    const n = numelOf(ir, t.id) * (blocks !== undefined && blocks.storageUnit[t.storage] === 1 ? blocks.times : 1);
    paramElements += n;
    if (ir.storages[t.storage]!.trainable) trainable += n;
  }
  const activations =
    blocks === undefined
      ? saved.bytes
      : sum([
          ...[...saved.firstSaver].map(([storage, op]) => weigh(ir.storages[storage]!.bytes, blocks.opUnit[op]!, times)),
          ...[...saved.views.values()].map((v) => weigh(v.bytes, blocks.opUnit[v.op]!, times)),
        ]);
  let gradients: Dim = 0;
  if (ir.settings.gradEnabled) {
    for (const t of ir.tensors)
      if (t.role === 'param' && ir.storages[t.storage]!.trainable) gradients = add(gradients, weigh(specBytes(t.gradSpec ?? t.spec), unitOf(t.storage), times));
  }
  return { params: { total: paramElements, trainable }, parameters: sum(paramBytes), buffers: sum(bufferBytes), activations, gradients };
}

/** The step summaries, each figure worked out when first read (a reduced model's programs from the full model's). */
function stepSummaries(runs: readonly [keyof Estimate['steps'], () => StepResult][], reduced: Reduced | undefined): Record<string, StepSummary> {
  const steps: Record<string, StepSummary> = {};
  for (const [name, run] of runs) {
    const step = {} as StepSummary;
    lazy(step, 'peak', () => run().peak.bytes);
    lazy(step, 'baseline', () => run().baseline);
    lazy(step, 'end', () => run().end);
    lazy(step, 'program', () => (reduced === undefined ? (run().full?.() ?? run()).program : reduced.full().steps[name]!.program));
    Object.defineProperty(step, COMPACT, {
      value: () => {
        const r = run();
        return r.repeat === undefined ? { program: r.program } : { program: r.program, repeat: r.repeat };
      },
    });
    steps[name] = step;
  }
  return steps;
}

/** The estimate of a traced model; with `reduced`, of the full model its blocks stand for. */
function assemble(
  ir: IR,
  options: EstimateOptions,
  reduced: Reduced | undefined,
  model: Layer,
  rank: RankSetup<EstimateOptions>,
  run?: StepSettings['run'],
): Estimate {
  const blocks = reduced?.blocks;
  const saved = savedStorages(ir);
  const held = modelBytes(ir, blocks, saved);
  const rounded = ir.settings.device === 'cuda';
  const keepTimeline = options.timeline ?? !ir.storages.some((st) => typeof st.bytes !== 'number');
  const train = ir.settings.gradEnabled;
  const spec = train && options.optimizer !== null ? optimizerSpec(options.optimizer ?? 'adam') : null;
  let gradients = held.gradients;
  let optimizerBytes: Dim = 0;
  const peakExpression = options.peakExpression ?? true;
  const runs: [keyof Estimate['steps'], () => StepResult][] = [];
  let main: StepResult;
  if (train) {
    main = simulateStep(ir, {
      optimizer: spec,
      rounded,
      microBatches: options.microBatches ?? 1,
      peakExpression,
      ...(blocks !== undefined ? { blocks } : {}),
      ...rank.step(model, ir),
      ...(run !== undefined ? { run } : {}),
    });
    optimizerBytes = main.optimizerState ?? 0;
    if (main.resident !== undefined) gradients = main.resident.gradients;
    const steady = main;
    // The first step is worked out when read: it holds a subset of the steady step's blocks at
    // every moment (no gradients of a previous step, the optimizer state only from the step
    // on), so its peak is never the higher one.
    runs.push(['first', steady.first!], ['steady', () => steady]);
  } else {
    main = simulateInference(ir, rounded, peakExpression, blocks);
    const inference = main;
    runs.push(['inference', () => inference]);
  }
  const peak = details(main, train ? 'steady' : 'inference');
  const result = {
    params: held.params,
    bytes: {
      parameters: main.resident?.parameters ?? held.parameters,
      buffers: held.buffers,
      activations: held.activations,
      input: sum(ir.inputs.map((id) => ir.storages[ir.tensors[id]!.storage]!.bytes)),
      gradients,
      optimizer: optimizerBytes,
      peak: peak.bytes,
    },
    constraints: ir.constraints,
    peak,
    steps: stepSummaries(runs, reduced),
    optimizer: spec,
    parallel: options.parallel ?? null,
    ...(main.host !== undefined ? { host: main.host } : {}),
  } as Omit<Estimate, 'modules' | 'timeline' | 'ir'> as Estimate;
  // What is read less often is made when read: the module rows, the timeline and, for a
  // model estimated from reduced blocks, the full model's IR and programs.
  lazy(result, 'modules', () => (reduced === undefined ? moduleRows(ir, saved) : reduced.full().modules));
  lazy(result, 'timeline', () => {
    if (!keepTimeline || reduced !== undefined) return keepTimeline ? reduced!.full().timeline : [];
    const { program } = main.full?.() ?? main; // a pipeline's steady phase written out
    return (program.sizes.every((size) => typeof size === 'number') ? concreteTimeline : programTimeline)(program);
  });
  lazy(result, 'ir', () => (reduced === undefined ? ir : reduced.fullIr()));
  if (rounded && typeof peak.bytes === 'number') reservedFigures(result, train);
  ESTIMATES.add(result);
  return result;
}

/**
 * A concrete CUDA estimate's caching-allocator figures, made when first read (one replay for all
 * three): `bytes.reserved`, `peak.reserved`, `peak.fragmentation`. The log is the first step then
 * the peak's step (training: the first step, then the steady one; inference: the forward twice),
 * each the full model's program (a model estimated from reduced blocks is traced whole here).
 */
function reservedFigures(result: Estimate, train: boolean): void {
  const replay = once(() => {
    const step = (train ? result.steps.steady : result.steps.inference)!;
    const before = train ? result.steps.first! : step;
    return replayReserved(concreteStep(before.program), concreteStep(step.program));
  });
  // Not enumerable: what reads `bytes` key by key (its symbolic twin has no such key) or copies it does not replay.
  const hidden = (target: object, key: string, make: () => number | undefined) => Object.defineProperty(target, key, { enumerable: false, get: make });
  hidden(result.bytes, 'reserved', () => replay()?.reserved);
  hidden(result.peak, 'reserved', () => replay()?.reservedAtPeak);
  hidden(result.peak, 'fragmentation', () => {
    const r = replay();
    return r === undefined ? undefined : r.reservedAtPeak - r.allocatedAtPeak;
  });
}

function details(r: StepResult, step: PeakDetails['step'], bytes: Dim = r.peak.bytes): PeakDetails {
  const peak = { bytes, step, phase: r.peak.phase, label: r.peak.label, candidates: r.candidates } as Omit<PeakDetails, 'byCategory'>;
  // Symbolic totals by category are expressions made when read.
  return Object.defineProperty(peak, 'byCategory', { enumerable: true, get: () => r.peak.byCategory }) as PeakDetails;
}

/** The module rows: parameters (tied once) and saved bytes of every module and its subtree. */
function moduleRows(ir: IR, saved: ReturnType<typeof savedStorages>): ModuleRow[] {
  const byOp = savedBytesByOp(ir, saved);
  const counts = paramsPerModule(ir);
  return ir.modules.map((m): ModuleRow => {
    let activations: Dim = 0;
    for (let op = m.firstOp; op < m.endOp; op += 1) if (byOp[op] !== 0) activations = add(activations, byOp[op]!);
    const out = m.outputs[0];
    return {
      path: m.path,
      className: m.className,
      depth: m.path.length,
      params: counts.total[m.index]!,
      ownParams: counts.own[m.index]!,
      outputShape: out === undefined ? null : ir.tensors[out]!.spec.shape,
      activations,
    };
  });
}
