import type { VramIssue } from '../errors.js';
import { showJson } from '../validate.js';
import { HF_ACTIVATIONS } from '../nn/hfActivation.js';
import type { DType } from '../tensor/dtype.js';

/** A Hugging Face `config.json` object. */
export type HFConfig = Readonly<Record<string, unknown>>;

/** The `torch_dtype` (5.x: `dtype`) names a config.json uses, with or without `torch.`. */
const DTYPES: Readonly<Record<string, DType>> = { float32: 'float32', float16: 'float16', bfloat16: 'bfloat16', float: 'float32', half: 'float16' };

/**
 * Reads config.json fields with the config class's defaults (dense, MoE and DeepSeek configs
 * alike); every problem becomes an issue with the field's path, so one VramError names them all.
 */
export class ConfigReader {
  readonly issues: VramIssue[] = [];
  constructor(
    readonly config: HFConfig,
    readonly defaults: Readonly<Record<string, unknown>> = {},
  ) {}

  value(field: string): unknown {
    return Object.hasOwn(this.config, field) ? this.config[field] : this.defaults[field];
  }

  integer(field: string, min = 1, max = Number.MAX_SAFE_INTEGER): number {
    const value = this.value(field);
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
      this.issues.push({
        path: [field],
        code: 'bad-config',
        message: `${field} must be an integer ${range}`,
        expected: `integer ${range}`,
        received: value === undefined ? 'missing' : showJson(value),
      });
      return min;
    }
    return value;
  }

  /** An integer, or null when the field is null / absent with a null default. */
  optionalInteger(field: string, min = 1): number | null {
    const value = this.value(field);
    return value === null || value === undefined ? null : this.integer(field, min);
  }

  probability(field: string): number {
    const value = this.value(field);
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > 1) {
      this.issues.push({
        path: [field],
        code: 'bad-config',
        message: `${field} must be a number from 0 to 1`,
        expected: '0 <= p <= 1',
        received: showJson(value),
      });
      return 0;
    }
    return value;
  }

  flag(field: string): boolean {
    const value = this.value(field);
    if (typeof value !== 'boolean') {
      this.issues.push({
        path: [field],
        code: 'bad-config',
        message: `${field} must be true or false`,
        expected: 'true | false',
        received: showJson(value),
      });
      return false;
    }
    return value;
  }

  activation(field: string): string {
    const value = this.value(field);
    if (typeof value !== 'string' || !(HF_ACTIVATIONS as readonly string[]).includes(value)) {
      this.issues.push({
        path: [field],
        code: 'bad-config',
        message: `${field} is not an activation vram-ts models`,
        expected: HF_ACTIVATIONS.join(' | '),
        received: showJson(value),
      });
      return 'silu';
    }
    return value;
  }

  /** A list of layer indices (absent: none). */
  integers(field: string): number[] {
    const value = this.value(field) ?? [];
    if (!Array.isArray(value) || !value.every((x) => Number.isSafeInteger(x))) {
      this.issues.push({
        path: [field],
        code: 'bad-config',
        message: `${field} must be a list of layer indices`,
        expected: 'integer[]',
        received: showJson(value),
      });
      return [];
    }
    return value as number[];
  }

  string(field: string): string {
    const value = this.value(field);
    if (typeof value !== 'string') {
      this.issues.push({ path: [field], code: 'bad-config', message: `${field} must be a string`, expected: 'string', received: showJson(value) });
      return '';
    }
    return value;
  }

  /** The config's `torch_dtype` (or 5.x's `dtype`), undefined when it names none. */
  dtype(): DType | undefined {
    const value = this.config.torch_dtype ?? this.config.dtype;
    if (value === undefined || value === null) return undefined;
    const dtype = typeof value === 'string' ? DTYPES[value.replace(/^torch\./, '')] : undefined;
    if (dtype === undefined)
      this.issues.push({
        path: [Object.hasOwn(this.config, 'torch_dtype') ? 'torch_dtype' : 'dtype'],
        code: 'bad-config',
        message: 'unknown torch_dtype',
        expected: Object.keys(DTYPES).join(' | '),
        received: showJson(value),
      });
    return dtype;
  }
}

/**
 * The attention's sizes every Llama-style config names alike: hidden_size, the heads, the kv heads
 * (null or missing: the class default, null meaning num_attention_heads) and the head width
 * (`head_dim` where the release reads it, else hidden / heads), each divisibility checked.
 */
export function attentionHeads(r: ConfigReader, readsHeadDim: boolean): { hidden: number; heads: number; kvHeads: number; headDim: number } {
  const hidden = r.integer('hidden_size');
  const heads = r.integer('num_attention_heads');
  const kvHeads = r.optionalInteger('num_key_value_heads') ?? heads;
  const declaredHeadDim = r.optionalInteger('head_dim');
  const headDim = declaredHeadDim !== null && readsHeadDim ? declaredHeadDim : hidden / heads;
  if (!Number.isInteger(headDim))
    r.issues.push({
      path: ['num_attention_heads'],
      code: 'bad-config',
      message: 'num_attention_heads must divide hidden_size',
      expected: `a divisor of ${hidden}`,
      received: String(heads),
    });
  if (heads % kvHeads !== 0)
    r.issues.push({
      path: ['num_key_value_heads'],
      code: 'bad-config',
      message: 'num_key_value_heads must divide num_attention_heads',
      expected: `a divisor of ${heads}`,
      received: String(kvHeads),
    });
  return { hidden, heads, kvHeads, headDim };
}
