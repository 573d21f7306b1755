import type { Check, ObjectShape } from './validate.js';
import { anyOf, anything, arrayOf, boolean, integer, number, object, oneOf, string } from './validate.js';
import { LIMITS } from './limits.js';
import { dim, dtype } from './options.js';
import { ncclOptions } from './memory/nccl.js';
import { parallelSchema } from './parallel/plan.js';

/**
 * Run-time schemas of the public options objects, so that plain-JavaScript and browser
 * callers get an error with a path for every misspelt key, wrong type or value out of range
 * (never a silently ignored option): estimate's and those of the functions around it (fit, summary,
 * the scenarios). The catalog's builder options are in options.ts, below the catalog.
 */

const tensorSpec = object({ fields: { shape: arrayOf(dim, { min: 1 }), dtype }, required: ['shape'] });

/** estimate's `input`: a batch-first shape, one tensor spec, or a list of them. */
const input = anyOf(
  [arrayOf(dim, { min: 1 }), tensorSpec, arrayOf(tensorSpec, { min: 1 })],
  'a shape such as [1, 3, 224, 224], a tensor spec or a list of tensor specs',
);

const OPTIMIZER_NAMES = ['sgd', 'sgd_momentum', 'adam', 'adamw', 'adafactor', 'lion', 'adam8bit'];
const optimizerSpec = object({
  fields: {
    name: oneOf(OPTIMIZER_NAMES, 'optimizer'),
    impl: oneOf(['for-loop', 'foreach', 'fused']),
    stateDtype: dtype,
    weightDecay: number(0),
    nesterov: boolean,
  },
  required: ['name'],
});

const names = arrayOf(string);

const isNull: Check = (value, path, issues) => {
  if (value !== null) issues.push({ path, code: 'bad-option', message: 'must be null', expected: 'null' });
};

/** The fields of EstimateOptions. */
export const ESTIMATE_FIELDS: ObjectShape['fields'] = {
  input,
  mode: oneOf(['train', 'inference'], 'mode'),
  moduleMode: oneOf(['train', 'eval'], 'module mode'),
  dtype,
  precision: oneOf(['fp32', 'fp16', 'bf16', 'amp-fp16', 'amp-bf16'], 'precision'),
  checkpoint: object({ fields: { modules: names, within: string, every: integer(1), selective: names } }),
  lora: object({
    fields: {
      rank: integer(1, 1_000_000),
      targets: anyOf([names, oneOf(['all-linear'])], "a list of module names or 'all-linear'"),
      dropout: number(0, 1),
      quantizeBase: boolean,
      adapterDtype: dtype,
    },
    required: ['rank'],
  }),
  inputDtype: dtype,
  device: oneOf(['cuda', 'cpu'], 'device'),
  framework: oneOf(['torch-2', 'torch-1.13'], 'framework'),
  inputRequiresGrad: boolean,
  freeze: names,
  optimizer: anyOf([oneOf(OPTIMIZER_NAMES, 'optimizer'), optimizerSpec, isNull], `one of ${OPTIMIZER_NAMES.join(' | ')}, an optimizer spec, or null`),
  loss: oneOf(['cross_entropy', 'none'], 'loss'),
  microBatches: integer(1, LIMITS.microBatches),
  timeline: boolean,
  peakExpression: boolean,
  parallel: parallelSchema,
};

/** Keys that belong to the model, not to an estimate. */
export const MODEL_KEYS: Readonly<Record<string, string>> = {
  attention: 'attention belongs to the model: build it with fromHFConfig(config, { attention }) or llm(name, { attention })',
  transformers: 'the transformers release belongs to the model: fromHFConfig(config, { transformers }) or llm(name, { transformers })',
  useCache: 'use_cache belongs to the model: fromHFConfig(config, { useCache })',
  numClasses: 'the classifier size belongs to the model: mobilenetV3Small({ numClasses })',
};

/** EstimateOptions as a check. */
export const estimateOptions = object({ fields: ESTIMATE_FIELDS, misplaced: MODEL_KEYS, required: ['input'] });

/** Accepts anything: a field some other function checks itself. */
export { anything };

function without(fields: ObjectShape['fields'], keys: readonly string[]): ObjectShape['fields'] {
  return Object.fromEntries(Object.entries(fields).filter(([key]) => !keys.includes(key)));
}

/** A record of symbol values (maxFitting's `env`). */
const symbolValues: Check = (value, path, issues) => {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return issues.push({
      path,
      code: 'bad-option',
      message: 'must be an object of symbol values',
      expected: '{ name: integer }',
      received: String(value),
    }) as unknown as undefined;
  for (const [key, v] of Object.entries(value)) integer(1)(v, [...path, key], issues);
};

const bytesOrDefault = anyOf([boolean, integer(0)], 'true, false or a byte count');

/** RuntimeOptions (runtimeLines, fits). */
export const runtimeOptions = object({
  fields: { context: bytesOrDefault, cublas: bytesOrDefault, cublasHandles: integer(0, 1024), cudnnWorkspace: integer(0), nccl: ncclOptions },
});

/** A memory budget: a catalog GPU name or size (`24GB`), or a byte count. */
export const budget = anyOf([string, integer(1)], 'a GPU name, a size such as "24GB", or a byte count');

/** FitOptions (fits, maxFitting). */
export const fitOptions = object({
  fields: { ...ESTIMATE_FIELDS, gpu: budget, runtime: runtimeOptions, env: symbolValues, verdict: oneOf(['reserved', 'allocated'], 'fit verdict') },
  misplaced: MODEL_KEYS,
  required: ['input', 'gpu'],
});

/** UsableMemoryOptions. */
export const usableOptions = object({
  fields: {
    gpu: budget,
    mode: oneOf(['training', 'inference'], 'mode'),
    device: oneOf(['cuda', 'cpu'], 'device'),
    runtime: runtimeOptions,
    verdict: oneOf(['reserved', 'allocated'], 'fit verdict'),
  },
  required: ['gpu'],
});

const TORCHINFO_COLUMNS = ['input_size', 'output_size', 'num_params', 'params_percent', 'kernel_size', 'groups', 'mult_adds', 'trainable'];

/** SummaryOptions. */
export const summaryOptions = object({
  fields: {
    ...ESTIMATE_FIELDS,
    format: oneOf(['breakdown', 'torchsummary', 'torchinfo'], 'format'),
    torchsummary: object({ fields: { variant: oneOf(['master', '1.5.1']), wrapper: string, batchSize: integer(-1) } }),
    torchinfo: object({
      fields: {
        depth: integer(0, 1000),
        columns: arrayOf(oneOf(TORCHINFO_COLUMNS)),
        colWidth: integer(1, 1000),
        inputObjectOverhead: integer(0),
        wrapper: string,
      },
    }),
  },
  misplaced: MODEL_KEYS,
  required: ['input'],
});

/** KvCacheOptions. */
export const kvCacheOptions = object({ fields: { batch: dim, seq: dim, dtype }, required: ['batch', 'seq'] });

const ESTIMATE_WITHOUT_INPUT = without(ESTIMATE_FIELDS, ['input', 'mode']);

/** GenerationOptions. */
export const generationOptions = object({
  fields: { ...ESTIMATE_WITHOUT_INPUT, batch: integer(1), prompt: integer(1), generate: integer(0), kvDtype: dtype },
  misplaced: MODEL_KEYS,
  required: ['batch', 'prompt', 'generate'],
});

/** KorthikantiOptions. */
export const korthikantiOptions = object({
  fields: {
    seq: dim,
    batch: dim,
    hidden: integer(1),
    heads: integer(1),
    tensorParallel: integer(1),
    sequenceParallel: boolean,
    recompute: oneOf(['none', 'selective', 'full']),
  },
  required: ['seq', 'batch', 'hidden', 'heads'],
});
