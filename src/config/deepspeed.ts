/**
 * A DeepSpeed `ds_config.json` read as DeepSpeed reads it (deepspeedai/DeepSpeed edaa7221:
 * deepspeed/runtime/config.py, deepspeed/runtime/zero/config.py), its `"auto"` values filled as
 * the Hugging Face Trainer fills them (transformers 4.57.6 integrations/deepspeed.py).
 */
import { deepspeedEngine } from '../parallel/engines/deepspeed/index.js';
import { fail, VramError } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import type { OptimizerSpec } from '../memory/optimizers.js';
import { show, validate } from '../validate.js';
import { ACTIVATION_CHECKPOINTING, DATA_TYPES, TOP_LEVEL } from './deepspeed-keys.js';
import {
  contextCheck,
  isDict,
  Reader,
  readBatch,
  readPrecision,
  type DeepSpeedContext,
  type DeepSpeedIgnored,
  type DeepSpeedSource,
} from './deepspeed-reader.js';
import { readOptimizer, readZero, type DeepSpeedKnobValues } from './deepspeed-zero.js';

export type {
  DeepSpeedContext,
  DeepSpeedIgnored,
  DeepSpeedSource,
  DeepSpeedTrainerContext,
} from './deepspeed-reader.js';
export type { DeepSpeedKnobValues } from './deepspeed-zero.js';

/** The estimate options a DeepSpeed config means (give `input`: `[microBatchSize, sequence]`). */
export interface DeepSpeedOptions {
  readonly parallel: {
    readonly engine: typeof deepspeedEngine.name;
    readonly dp: number;
    readonly zero: 1 | 2 | 3;
    readonly deepspeed: DeepSpeedKnobValues;
    readonly offload: { readonly optimizer: boolean; readonly parameters: boolean };
  };
  /** `gradient_accumulation_steps`. */
  readonly microBatches: number;
  /** `bf16.enabled` / `fp16.enabled`: the parameters in 16 bits (DeepSpeed keeps the fp32 master); absent, the model's dtype (eng:1528). */
  readonly precision?: 'bf16' | 'fp16';
  /** The `optimizer` section; absent without one (the client's optimizer: the Trainer's own). */
  readonly optimizer?: OptimizerSpec;
}

/** A DeepSpeed config read as DeepSpeed reads it. */
export interface DeepSpeedReading {
  readonly options: DeepSpeedOptions;
  /** `train_micro_batch_size_per_gpu`: the input's batch. */
  readonly microBatchSize: number;
  /** `train_batch_size` = micro × accumulation × world (rc:937). */
  readonly trainBatchSize: number;
  readonly ignored: readonly DeepSpeedIgnored[];
  readonly sources: readonly DeepSpeedSource[];
}

/** The top-level keys read into the options (the rest go by deepspeed-keys.ts's TOP_LEVEL). */
const HANDLED = [
  'train_batch_size',
  'train_micro_batch_size_per_gpu',
  'gradient_accumulation_steps',
  'zero_optimization',
  'bf16',
  'bfloat16',
  'fp16',
  'optimizer',
  'activation_checkpointing',
  'data_types',
];

/**
 * The estimate options a DeepSpeed config means: the ZeRO stage and every knob vram-ts models
 * (DeepSpeed's default where the config is silent), offloading, the data-parallel world,
 * gradient accumulation, the 16-bit type and the optimizer; and the micro-batch size, the input's
 * batch. `"auto"` values are filled as the Hugging Face Trainer fills them, from `context`
 * (batch sizes and precision from `context.trainer`, the ZeRO buckets from `context.hiddenSize`);
 * an `"auto"` the context does not fill is a VramError `unresolved-auto` at its path. A key
 * DeepSpeed accepts that moves no memory is accepted and listed in `ignored` with why; one that
 * moves memory in a way vram-ts does not model (stage 0, NVMe, ZeRO++, …) is `not-modelled`;
 * one DeepSpeed does not know is `unknown-option` (DeepSpeed itself ignores unknown top-level keys
 * silently). The world size comes from `context.worldSize` (or `trainer.worldSize`), or from
 * `train_batch_size` = micro × accumulation × world. Every issue is reported at once.
 *
 * @example
 * ```ts
 * import { estimate, fromDeepSpeedConfig, llm } from 'vram-ts';
 * const reading = fromDeepSpeedConfig(
 *   {
 *     train_batch_size: 16,
 *     train_micro_batch_size_per_gpu: 2,
 *     gradient_accumulation_steps: 4,
 *     bf16: { enabled: true },
 *     zero_optimization: { stage: 2, reduce_bucket_size: 'auto' },
 *     steps_per_print: 100,
 *   },
 *   { hiddenSize: 896 },
 * );
 * console.log(reading.options.parallel.dp, reading.options.parallel.deepspeed.reduceBucketSize); // 2 802816
 * console.log(reading.ignored.map((i) => i.path.join('.'))); // [ 'steps_per_print' ]
 * const r = estimate(llm('qwen2.5-0.5b'), { ...reading.options, input: [reading.microBatchSize, 64], timeline: false });
 * console.log(r.bytes.peak > 0); // true
 * ```
 */
export function fromDeepSpeedConfig(config: unknown, context: DeepSpeedContext = {}): DeepSpeedReading {
  validate(context, contextCheck(), ['context']);
  if (!isDict(config)) fail('bad-option', 'a DeepSpeed config is an object (ds_config.json, parsed)', { path: [], expected: 'object', received: show(config) });
  const r = new Reader(context);
  r.section(config, [], HANDLED, TOP_LEVEL, false);
  r.section(config.activation_checkpointing, ['activation_checkpointing'], [], ACTIVATION_CHECKPOINTING, false);
  r.section(config.data_types, ['data_types'], [], DATA_TYPES, false);
  const batch = readBatch(r, config);
  const precision = readPrecision(r, config);
  const zero = readZero(r, config);
  const optimizer = readOptimizer(r, config);
  if (r.issues.length > 0 || batch === undefined || zero === undefined) throw new VramError(r.issues);
  if (precision === undefined) r.source(['bf16', 'enabled'], 'default', false, 'neither bf16 nor fp16: DeepSpeed keeps the model’s dtype (eng:1528)');
  if (!r.sources.some((s) => s.from === 'derived')) r.source(['context', 'worldSize'], 'context', batch.world);
  const options: DeepSpeedOptions = {
    parallel: { engine: deepspeedEngine.name, dp: batch.world, zero: zero.zero, deepspeed: zero.knobs, offload: zero.offload },
    microBatches: batch.accumulation,
    ...(precision !== undefined ? { precision } : {}),
    ...(optimizer !== undefined ? { optimizer } : {}),
  };
  return deepFreeze({ options, microBatchSize: batch.micro, trainBatchSize: batch.train, ignored: r.ignored, sources: r.sources });
}
