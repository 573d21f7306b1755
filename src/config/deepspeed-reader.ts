/* The DeepSpeed config reader's state and its batch and precision sections (fromDeepSpeedConfig in deepspeed.ts). */
import type { VramIssue } from '../errors.js';
import { boolean, type Check, didYouMean, integer, object, show, type Path } from '../validate.js';
import { BF16, FP16, type KeyRule } from './deepspeed-keys.js';

/*
 * Sources, deepspeedai/DeepSpeed edaa7221: rc deepspeed/runtime/config.py, zc
 * deepspeed/runtime/zero/config.py, cu deepspeed/runtime/config_utils.py, eng
 * deepspeed/runtime/engine.py; hf transformers 4.57.6 src/transformers/integrations/deepspeed.py
 * (HfTrainerDeepSpeedConfig.trainer_config_process / trainer_config_finalize).
 */

/** What the Hugging Face Trainer knows that its `"auto"` values are filled from (TrainingArguments). */
export interface DeepSpeedTrainerContext {
  /** `per_device_train_batch_size` (fills `train_micro_batch_size_per_gpu`). */
  readonly perDeviceTrainBatchSize?: number;
  /** `gradient_accumulation_steps` (fills `gradient_accumulation_steps`). */
  readonly gradientAccumulationSteps?: number;
  /** `bf16` (fills `bf16.enabled`). */
  readonly bf16?: boolean;
  /** `fp16` with the amp backend (fills `fp16.enabled`). */
  readonly fp16?: boolean;
  /** `world_size` (with the two above fills `train_batch_size`). */
  readonly worldSize?: number;
  /** `weight_decay` (fills `optimizer.params.weight_decay`; read only where it moves memory: torch Adam/SGD). */
  readonly weightDecay?: number;
}

/** What a DeepSpeed config alone does not say. */
export interface DeepSpeedContext {
  /** The Trainer's arguments, when the Trainer fills the config's `"auto"` values. */
  readonly trainer?: DeepSpeedTrainerContext;
  /** The model's `hidden_size` (fills the ZeRO buckets' `"auto"`, as trainer_config_finalize does). */
  readonly hiddenSize?: number;
  /** DeepSpeed's data-parallel world size (the GPUs); `trainer.worldSize` says it too. */
  readonly worldSize?: number;
}

/** A key read and accepted that moves no memory (or holds the default vram-ts models). */
export interface DeepSpeedIgnored {
  readonly path: readonly (string | number)[];
  readonly why: string;
}

/** Where each value of the options came from. */
export interface DeepSpeedSource {
  readonly path: readonly (string | number)[];
  /** `config` (written there), `default` (DeepSpeed's), `auto` (filled as the Trainer fills it), `context`, `derived` (DeepSpeed's batch arithmetic). */
  readonly from: 'config' | 'default' | 'auto' | 'context' | 'derived';
  readonly value: unknown;
  readonly why?: string;
}

export type Dict = Readonly<Record<string, unknown>>;
export const isDict = (v: unknown): v is Dict => typeof v === 'object' && v !== null && !Array.isArray(v);
export const DROPPED_AUTO = '"auto" that the Trainer does not fill: DeepSpeedConfigModel drops it (cu:54-55), DeepSpeed’s default';

/** The context's schema, built when read (a module-level schema would stay in every bundle). */
export const contextCheck = (): Check =>
  object({
    fields: {
      trainer: object({
        fields: {
          perDeviceTrainBatchSize: integer(1),
          gradientAccumulationSteps: integer(1),
          bf16: boolean,
          fp16: boolean,
          worldSize: integer(1),
          weightDecay: (value, path, issues) => {
            if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
              issues.push({ path, code: 'bad-option', message: 'must be a number ≥ 0', expected: 'number ≥ 0', received: show(value) });
          },
        },
      }),
      hiddenSize: integer(1),
      worldSize: integer(1),
    },
  });

/** An issue of a config reader (its received value shown as the errors show values). */
export function issueOf(code: string, path: Path, message: string, expected?: string, received?: unknown): VramIssue {
  return { path, code, message, ...(expected !== undefined ? { expected } : {}), ...(received !== undefined ? { received: show(received) } : {}) };
}

/** The reader's state: the issues found (all reported at once), the keys ignored, the sources. */
export class Reader {
  readonly issues: VramIssue[] = [];
  readonly ignored: DeepSpeedIgnored[] = [];
  readonly sources: DeepSpeedSource[] = [];
  constructor(readonly context: DeepSpeedContext) {}

  /** Records an issue; returns undefined (so that `return r.issue(…) ?? fallback` reads as one step). */
  issue(code: string, path: Path, message: string, expected?: string, received?: unknown): undefined {
    this.issues.push(issueOf(code, path, message, expected, received));
  }

  source(path: Path, from: DeepSpeedSource['from'], value: unknown, why?: string): void {
    this.sources.push({ path, from, value, ...(why !== undefined ? { why } : {}) });
  }

  /** A section: a plain object (or absent); each key is `handled` by the caller, under a rule, or unknown. */
  section(value: unknown, path: Path, handled: readonly string[], rules: Readonly<Record<string, KeyRule>>, dropsAuto: boolean): Dict {
    if (value === undefined || value === null) return {};
    if (!isDict(value)) {
      this.issue('bad-option', path, 'must be an object', 'object', value);
      return {};
    }
    const known = [...handled, ...Object.keys(rules)];
    for (const key of Object.keys(value)) {
      if (handled.includes(key)) continue;
      const rule = Object.hasOwn(rules, key) ? rules[key] : undefined;
      if (rule === undefined) {
        const near = didYouMean(key, known);
        this.issue(
          'unknown-option',
          [...path, key],
          `DeepSpeed has no such key here${near !== undefined ? `; did you mean ${JSON.stringify(near)}?` : ''}`,
          known.join(' | '),
          value[key],
        );
      } else this.rule([...path, key], value[key], rule, dropsAuto);
    }
    return value;
  }

  rule(path: Path, value: unknown, rule: KeyRule, dropsAuto: boolean): void {
    if (rule.kind === 'ignore' || (dropsAuto && value === 'auto')) {
      this.ignored.push({ path, why: rule.kind === 'ignore' ? rule.why : `${DROPPED_AUTO}: ${rule.why}` });
      return;
    }
    const on =
      rule.kind === 'default'
        ? value !== rule.value && !(value === undefined && rule.value === null)
        : rule.kind === 'enabled'
          ? isDict(value) && value.enabled === true
          : value !== null && !(isDict(value) && Object.keys(value).length === 0);
    if (on) {
      const at = rule.kind === 'enabled' ? [...path, 'enabled'] : path;
      const expected = rule.kind === 'default' ? `${JSON.stringify(rule.value)} (DeepSpeed’s default)` : rule.kind === 'enabled' ? 'false' : 'absent';
      this.issue('not-modelled', at, `${rule.why}: not modelled`, expected, rule.kind === 'enabled' ? true : value);
    } else this.ignored.push({ path, why: rule.kind === 'default' ? `DeepSpeed’s default, the behaviour vram-ts models: ${rule.why}` : `off: ${rule.why}` });
  }

  /** A non-negative safe integer as DeepSpeed's pydantic ints take it (5e8 is 500000000). */
  int(value: unknown, path: Path, min = 0): number | undefined {
    if (typeof value === 'number' && Number.isSafeInteger(value) && value >= min) return value;
    this.issue('bad-option', path, `must be an integer ≥ ${min}`, `integer ≥ ${min}`, value);
    return undefined;
  }

  bool(value: unknown, path: Path): boolean | undefined {
    if (typeof value === 'boolean') return value;
    this.issue('bad-option', path, 'must be a boolean', 'true | false', value);
    return undefined;
  }

  unresolved(path: Path, give: string): undefined {
    return this.issue('unresolved-auto', path, `"auto" is filled by the Hugging Face Trainer from ${give}: give it in the context`, give, 'auto');
  }

  /** HF's fill_match: a value that is not "auto" must equal the Trainer's (hf trainer_config_process). */
  match(path: Path, value: unknown, trainer: unknown, name: string): void {
    if (trainer !== undefined && value !== undefined && value !== 'auto' && value !== trainer)
      this.issue(
        'mismatch',
        path,
        `the Trainer refuses a DeepSpeed value that mismatches TrainingArguments ${name} (hf trainer_config_finalize)`,
        show(trainer),
        value,
      );
  }
}

/** The data-parallel world size, from the context (either place; they must agree). */
function worldOf(r: Reader): number | undefined {
  const { worldSize } = r.context;
  const trainer = r.context.trainer?.worldSize;
  if (worldSize !== undefined && trainer !== undefined && worldSize !== trainer)
    r.issue('bad-option', ['context', 'worldSize'], 'context.worldSize contradicts context.trainer.worldSize', String(trainer), worldSize);
  return worldSize ?? trainer;
}

/** One batch key: its value, "auto" filled from the Trainer, or absent. */
function batchKey(r: Reader, config: Dict, key: string, trainer: number | undefined, give: string): number | undefined {
  const value = config[key];
  r.match([key], value, trainer, give);
  if (value === undefined || value === null) return undefined;
  if (value === 'auto') {
    if (trainer === undefined) return r.unresolved([key], `context.trainer.${give}`);
    r.source([key], 'auto', trainer, `TrainingArguments ${give}`);
    return trainer;
  }
  const n = r.int(value, [key], 1);
  if (n !== undefined) r.source([key], 'config', n);
  return n;
}

/** DeepSpeed's batch arithmetic (rc `_set_batch_related_parameters`, `_batch_assertion`). */
export function readBatch(r: Reader, config: Dict): { micro: number; accumulation: number; train: number; world: number } | undefined {
  const t = r.context.trainer ?? {};
  const before = r.issues.length;
  const world = worldOf(r);
  const hfTrain = t.worldSize !== undefined && t.perDeviceTrainBatchSize !== undefined && t.gradientAccumulationSteps !== undefined;
  let micro = batchKey(r, config, 'train_micro_batch_size_per_gpu', t.perDeviceTrainBatchSize, 'perDeviceTrainBatchSize');
  let accumulation = batchKey(r, config, 'gradient_accumulation_steps', t.gradientAccumulationSteps, 'gradientAccumulationSteps');
  const trainAuto = hfTrain ? t.worldSize! * t.perDeviceTrainBatchSize! * t.gradientAccumulationSteps! : undefined;
  let train =
    config.train_batch_size === 'auto' && trainAuto === undefined
      ? r.unresolved(['train_batch_size'], 'context.trainer.worldSize × perDeviceTrainBatchSize × gradientAccumulationSteps')
      : batchKey(r, config, 'train_batch_size', trainAuto, 'worldSize × perDeviceTrainBatchSize × gradientAccumulationSteps');
  if (r.issues.length > before) return undefined;
  let w = world;
  if (w === undefined) {
    if (train === undefined || micro === undefined || accumulation === undefined || train % (micro * accumulation) !== 0) {
      r.issue(
        'missing-context',
        ['context', 'worldSize'],
        'the data-parallel world size: give context.worldSize, or train_batch_size with train_micro_batch_size_per_gpu and gradient_accumulation_steps',
        'integer ≥ 1',
        'missing',
      );
      return undefined;
    }
    w = train / (micro * accumulation);
    r.source(['context', 'worldSize'], 'derived', w, 'train_batch_size / (train_micro_batch_size_per_gpu × gradient_accumulation_steps)');
  }
  if (train !== undefined && micro !== undefined && accumulation === undefined) accumulation = Math.floor(Math.floor(train / micro) / w);
  else if (train !== undefined && accumulation !== undefined && micro === undefined) micro = Math.floor(Math.floor(train / w) / accumulation);
  else if (train === undefined && micro !== undefined) accumulation ??= 1;
  else if (train !== undefined && micro === undefined) [accumulation, micro] = [1, Math.floor(train / w)];
  if (micro === undefined) {
    r.issue(
      'missing-option',
      ['train_micro_batch_size_per_gpu'],
      'DeepSpeed needs train_batch_size or train_micro_batch_size_per_gpu (rc:984)',
      'a batch size',
      'missing',
    );
    return undefined;
  }
  train ??= micro * accumulation! * w;
  if (micro < 1 || accumulation! < 1 || train !== micro * accumulation! * w) {
    r.issue(
      'bad-option',
      ['train_batch_size'],
      'train_batch_size is not train_micro_batch_size_per_gpu × gradient_accumulation_steps × world size (rc:937)',
      `${micro} × ${accumulation} × ${w}`,
      train,
    );
    return undefined;
  }
  return { micro, accumulation: accumulation!, train, world: w };
}

/** The `bf16` / `bfloat16` and `fp16` sections: which 16-bit type the parameters are cast to. */
export function readPrecision(r: Reader, config: Dict): 'bf16' | 'fp16' | undefined {
  const t = r.context.trainer ?? {};
  const bfKey = config.bf16 === undefined && config.bfloat16 !== undefined ? 'bfloat16' : 'bf16';
  if (bfKey === 'bf16' && config.bfloat16 !== undefined)
    r.ignored.push({ path: ['bfloat16'], why: 'the old name of bf16, read only without bf16 (precision_config.py get_bfloat16_config)' });
  const flag = (key: string, rules: Readonly<Record<string, KeyRule>>, trainer: boolean | undefined, give: string): boolean => {
    const section = r.section(config[key], [key], ['enabled'], rules, true);
    const value = section.enabled;
    r.match([key, 'enabled'], value, trainer, give);
    if (value === undefined) return false;
    if (value === 'auto') {
      if (trainer === undefined) return r.unresolved([key, 'enabled'], `context.trainer.${give}`) ?? false;
      r.source([key, 'enabled'], 'auto', trainer, `TrainingArguments ${give}`);
      return trainer;
    }
    const on = r.bool(value, [key, 'enabled']) ?? false;
    r.source([key, 'enabled'], 'config', on);
    return on;
  };
  const bf16 = flag(bfKey, BF16, t.bf16, 'bf16');
  const fp16 = flag('fp16', FP16, t.fp16, 'fp16');
  if (bf16 && fp16) r.issue('bad-option', ['fp16', 'enabled'], 'bfloat16 and fp16 modes cannot be simultaneously enabled (rc:827)', 'one of them', true);
  return bf16 ? 'bf16' : fp16 ? 'fp16' : undefined;
}
