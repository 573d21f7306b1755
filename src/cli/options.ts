/** The library's EstimateOptions from the command's flags (the commands that estimate share them). */
import { DEFAULT_ENGINE, sym, type Dim, type EstimateOptions, type Layer } from '../index.js';
import { imageSize, oneOf, wholeNumber } from './args.js';
import { usage } from './errors.js';
import { DEFAULTS, FRAMEWORKS, type SOLVES, type Values } from './flags.js';
import { cnnCheckpoint, decoderLayers, type DecoderExtra, type ModelRef } from './model.js';
import { choice, count } from './values.js';
import { withAccelerate } from './accelerate-config.js';
import { withDeepSpeed } from './config-options.js';

/** A count that is 1 when left out (a parallel size). */
const size = (values: Values, flag: 'tp' | 'cp' | 'ep' | 'pp' | 'gpus') => (values[flag] === undefined ? 1 : count(values, flag, 1));

/** The batch-first input: --batch × --seq for an LLM, --batch × --input for a CNN; `solve` makes one a symbol. */
function inputOf(values: Values, ref: ModelRef, solve: (typeof SOLVES)[number] | undefined): Dim[] {
  const batch: Dim = solve === 'batch' ? sym('B') : count(values, 'batch', DEFAULTS.batch);
  if (ref.kind === 'llm') {
    // Context parallelism with load balancing cuts the sequence into 2 · cp equal pieces.
    const cp = size(values, 'cp');
    return [batch, solve === 'seq' ? sym('S', cp > 1 ? { multipleOf: 2 * cp } : {}) : count(values, 'seq', DEFAULTS.seq)];
  }
  const [c, h, w] = imageSize(values.input ?? DEFAULTS.input);
  const side = sym('R');
  return solve === 'resolution' ? [batch, c, side, side] : [batch, c, h, w];
}

/** The options of an estimate of one rank. */
export function estimateOptions(values: Values, ref: ModelRef, model: Layer, solve?: (typeof SOLVES)[number]): EstimateOptions {
  const input = inputOf(values, ref, solve);
  const rank = values['lora-rank'] === undefined ? undefined : count(values, 'lora-rank', 1);
  const parallel = values.deepspeed === undefined && values['accelerate-config'] === undefined ? parallelOf(values) : {};
  const precision = choice(values, 'precision');
  const optimizer = choice(values, 'optimizer');
  const device = choice(values, 'device');
  const framework = values.framework === undefined ? undefined : oneOf(values.framework, '--framework', FRAMEWORKS);
  const options: EstimateOptions = {
    input,
    mode: values.infer ? 'inference' : 'train',
    ...(precision !== undefined ? { precision } : {}),
    ...(optimizer !== undefined ? { optimizer } : {}),
    ...(device !== undefined ? { device } : {}),
    ...(framework !== undefined ? { framework } : {}),
    ...(values.checkpointing ? { checkpoint: ref.kind === 'llm' ? decoderLayers(model) : cnnCheckpoint(ref, model) } : {}),
    ...(rank !== undefined ? { lora: { rank, quantizeBase: Boolean(values.qlora) } } : {}),
    ...(values['micro-batches'] !== undefined ? { microBatches: count(values, 'micro-batches', 1) } : {}),
    ...parallel,
  };
  return withAccelerate(values, model, withDeepSpeed(values, model, options, solve === 'batch'), solve === 'batch');
}

/** --gpus and its layout: the engine, the rank, the tensor/context/expert/pipeline split. */
function parallelOf(values: Values): Pick<EstimateOptions, 'parallel'> {
  const gpus = size(values, 'gpus');
  const zero = zeroStage(values);
  const explicitEngine = values.fsdp === true || zero !== undefined || values.engine !== undefined;
  const engine = values.fsdp ? 'fsdp2' : zero !== undefined ? 'deepspeed' : (choice(values, 'engine') ?? DEFAULT_ENGINE);
  const [pp, tp, cp, ep] = [size(values, 'pp'), size(values, 'tp'), size(values, 'cp'), size(values, 'ep')];
  const split = pp * tp * cp * ep;
  if (gpus % split !== 0)
    usage('--gpus', `must be a multiple of --tp × --pp × --cp × --ep (${split}): the rest are data-parallel ranks`, { received: String(gpus) });
  const dp = gpus / split;
  // Context-parallel ranks share the data-parallel engine's group (dp · cp ranks).
  const rankOf = values.rank === undefined ? 0 : wholeNumber(values.rank, '--rank', 0, dp * cp - 1);
  const pipeline =
    pp > 1
      ? {
          pp,
          ...(values.stage !== undefined ? { stage: wholeNumber(values.stage, '--stage', 0, pp - 1) } : {}),
          ...(values.schedule !== undefined ? { schedule: choice(values, 'schedule')! } : {}),
          ...(values['virtual-stages'] !== undefined ? { virtualStages: count(values, 'virtual-stages', 1) } : {}),
          ...(values['no-return-outputs'] ? { keepOutputs: false } : {}),
        }
      : {};
  const offload = values.offload === undefined ? {} : { offload: offloadOf(values) };
  if (values['distributed-optimizer'] && engine !== 'megatron') usage('--distributed-optimizer', "is Megatron's: give --engine megatron");
  const megatronOptions = values['distributed-optimizer'] ? { megatron: { distributedOptimizer: true } } : {};
  // One GPU is one GPU whatever the engine; a pipeline stage on one rank per stage has no data-parallel engine unless asked for.
  return gpus > 1
    ? {
        parallel: {
          ...(dp * cp > 1 || explicitEngine ? { engine } : {}),
          dp,
          rank: rankOf,
          ...(zero !== undefined ? { zero } : {}),
          ...(tp > 1 ? { tp } : {}),
          ...(cp > 1 ? { cp } : {}),
          ...(ep > 1 ? { ep } : {}),
          ...pipeline,
          ...offload,
          ...megatronOptions,
        },
      }
    : {};
}

/**
 * --tp N (--sp): the decoder built as one tensor-parallel rank (PyTorch DTensor's plan); --cp N:
 * one context-parallel rank (ring attention needs sdpa: the default attention then).
 */
export function tensorParallelOf(values: Values): DecoderExtra {
  const tp = size(values, 'tp');
  const cp = size(values, 'cp');
  const ep = size(values, 'ep');
  const context = {
    ...(cp > 1 ? { contextParallel: { size: cp }, ...(values.attention === undefined ? { attention: 'sdpa' as const } : {}) } : {}),
    ...(ep > 1 ? { expertParallel: { size: ep } } : {}),
  };
  if (tp === 1) {
    if (values.sp) usage('--sp', 'sequence parallelism shards across tensor-parallel ranks: give --tp N (N > 1)');
    return context;
  }
  return { tensorParallel: { size: tp, ...(values.sp ? { sequenceParallel: true } : {}) }, ...context };
}

/** --offload: what DeepSpeed (or FSDP2's CPUOffloadPolicy, with all) keeps in host memory. */
function offloadOf(values: Values): { optimizer?: boolean; parameters?: boolean } {
  const which = choice(values, 'offload');
  return which === 'optimizer' ? { optimizer: true } : which === 'parameters' ? { parameters: true } : { optimizer: true, parameters: true };
}

/** --zero: DeepSpeed's stage, which only the deepspeed engine takes. */
export function zeroStage(values: Values): 1 | 2 | 3 | undefined {
  if (values.zero === undefined) return undefined;
  const stage = count(values, 'zero', 1) as 1 | 2 | 3;
  if (values.engine !== undefined && values.engine !== 'deepspeed') usage('--zero', `is a DeepSpeed ZeRO stage: not with --engine ${values.engine}`);
  return stage;
}
