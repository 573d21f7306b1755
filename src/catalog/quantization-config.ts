import type { VramIssue } from '../errors.js';
import type { QuantizationPlan } from '../nn/types.js';
import type { QuantScheme } from '../ops/quant.js';
import type { DType } from '../tensor/dtype.js';
import type { HFConfig } from './config-reader.js';

const QUANT_METHODS = ['bitsandbytes', 'gptq', 'awq', 'fp8', 'fbgemm_fp8'] as const;

/** A quantization plan and the dtype its quantizer gives what stays unquantized when the config names none. */
export interface QuantizationRead {
  readonly plan: QuantizationPlan;
  readonly dtype: DType;
}

/** One `quantization_config` object being read: its fields, the issues found so far, the modules every scheme but bitsandbytes and GPTQ keeps. */
interface QuantReader {
  readonly c: Record<string, unknown>;
  readonly issues: VramIssue[];
  readonly notConverted: string[];
  /** The module path of the repeated decoder blocks (GPTQ converts only those). */
  readonly blocks: string;
}

const at = (...rest: (string | number)[]) => ['quantization_config', ...rest];

/** A list of module names from a quantization_config field, or the issue why not. */
function names(value: unknown, path: readonly (string | number)[], issues: VramIssue[]): string[] {
  if (value === undefined || value === null) return [];
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value as string[];
  issues.push({ path, code: 'bad-config', message: 'must be a list of module names', expected: 'string[]', received: JSON.stringify(value) });
  return [];
}

/**
 * An integer field that must be one of `allowed`: absent, it takes `fallback` (none: the field is
 * required, as GPTQConfig's `bits`); null or another type is an error, not the default.
 */
function int(q: QuantReader, field: string, allowed: readonly number[], fallback: number | undefined): number {
  const value = q.c[field] === undefined ? fallback : q.c[field];
  if (typeof value !== 'number' || !allowed.includes(value))
    q.issues.push({
      path: at(field),
      code: 'bad-config',
      message: value === undefined ? `${field} is required` : `${field} is not one vram-ts models`,
      expected: allowed.join(' | '),
      received: value === undefined ? 'absent' : JSON.stringify(value),
    });
  return typeof value === 'number' ? value : (fallback ?? allowed[0]!);
}

/** A field that must be true or false when given (null or absent: `fallback`), as transformers' type checks. */
function flag(q: QuantReader, field: string, fallback: boolean): boolean {
  const value = q.c[field];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean')
    q.issues.push({
      path: at(field),
      code: 'bad-config',
      message: `${field} must be true or false`,
      expected: 'true | false',
      received: JSON.stringify(value),
    });
  return value === true;
}

/** A field that, when given, must be one of `allowed` (strings compared in lower case when `lower`). */
function oneOf(q: QuantReader, field: string, allowed: readonly string[], message: string, lower = false): void {
  const value = q.c[field];
  if (value === undefined || value === null) return;
  if (typeof value !== 'string' || !allowed.includes(lower ? value.toLowerCase() : value))
    q.issues.push({ path: at(field), code: 'bad-config', message, expected: allowed.join(' | '), received: JSON.stringify(value) });
}

/** `group_size`: a positive integer, or -1 (one group per row); absent, `fallback` (null is no group size). */
function group(q: QuantReader, fallback: number): number {
  const value = q.c.group_size === undefined ? fallback : q.c.group_size;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || (value < 1 && value !== -1))
    q.issues.push({
      path: at('group_size'),
      code: 'bad-config',
      message: 'group_size must be a positive integer or -1',
      expected: 'integer >= 1 | -1',
      received: JSON.stringify(value),
    });
  return typeof value === 'number' ? value : fallback;
}

/** The torch dtypes BitsAndBytesConfig takes for `bnb_4bit_quant_storage`. */
const QUANT_STORAGE = ['float16', 'float32', 'int8', 'uint8', 'float64', 'bfloat16'] as const;

/** BitsAndBytesConfig's checks (`__init__` and `post_init`) of the fields vram-ts does not otherwise read. */
function bitsandbytesTypes(q: QuantReader): void {
  const { c, issues } = q;
  for (const field of ['llm_int8_enable_fp32_cpu_offload', 'llm_int8_has_fp16_weight']) flag(q, field, false);
  const threshold = c.llm_int8_threshold;
  if (threshold !== undefined && threshold !== null && (typeof threshold !== 'number' || !Number.isFinite(threshold)))
    issues.push({ path: at('llm_int8_threshold'), code: 'bad-config', message: 'llm_int8_threshold must be a number', received: JSON.stringify(threshold) });
  const compute = c.bnb_4bit_compute_dtype;
  if (compute !== undefined && compute !== null && typeof compute !== 'string')
    issues.push({
      path: at('bnb_4bit_compute_dtype'),
      code: 'bad-config',
      message: 'bnb_4bit_compute_dtype must be a torch dtype name',
      received: JSON.stringify(compute),
    });
  oneOf(q, 'bnb_4bit_quant_storage', QUANT_STORAGE, 'bnb_4bit_quant_storage must be a torch dtype bitsandbytes packs into');
}

function bitsandbytes(q: QuantReader): QuantizationRead {
  const { c, issues } = q;
  const four = c.load_in_4bit === true;
  bitsandbytesTypes(q);
  if (!four && c.load_in_8bit !== true)
    issues.push({
      path: at('load_in_4bit'),
      code: 'bad-config',
      message: 'bitsandbytes needs load_in_4bit or load_in_8bit',
      expected: 'true',
      received: JSON.stringify(c.load_in_4bit),
    });
  const quantType = c.bnb_4bit_quant_type ?? 'fp4';
  if (quantType !== 'nf4' && quantType !== 'fp4')
    issues.push({
      path: at('bnb_4bit_quant_type'),
      code: 'bad-config',
      message: 'unknown 4-bit type',
      expected: 'nf4 | fp4',
      received: JSON.stringify(quantType),
    });
  const doubleQuant = flag(q, 'bnb_4bit_use_double_quant', false);
  // llm_int8_skip_modules replaces the automatic list (the output embedding), as transformers does.
  const skip =
    c.llm_int8_skip_modules === undefined || c.llm_int8_skip_modules === null
      ? ['lm_head']
      : names(c.llm_int8_skip_modules, at('llm_int8_skip_modules'), issues);
  const scheme: QuantScheme = four ? { method: 'bnb-4bit', quantType: quantType === 'nf4' ? 'nf4' : 'fp4', doubleQuant } : { method: 'bnb-8bit' };
  return { plan: { scheme, skip }, dtype: 'float16' };
}

function gptq(q: QuantReader): QuantizationRead {
  // GPTQConfig takes bits with no default, and its post_init refuses a damp_percent outside (0, 1).
  const bits = int(q, 'bits', [2, 3, 4, 8], undefined) as 2 | 3 | 4 | 8;
  const damp = q.c.damp_percent;
  if (damp !== undefined && !(typeof damp === 'number' && damp > 0 && damp < 1))
    q.issues.push({
      path: at('damp_percent'),
      code: 'bad-config',
      message: 'damp_percent must be between 0 and 1',
      expected: '0 < x < 1',
      received: JSON.stringify(damp),
    });
  const descAct = flag(q, 'desc_act', false);
  // optimum converts the Linear layers of the repeated decoder blocks only.
  return {
    plan: { scheme: { method: 'gptq', bits, groupSize: group(q, 128), descAct }, within: [q.blocks], skip: [] },
    dtype: 'float16',
  };
}

function awq(q: QuantReader): QuantizationRead {
  const { c } = q;
  int(q, 'bits', [4], 4);
  // AwqConfig.post_init: a backend it knows; the version a string (from_str lowers it).
  oneOf(q, 'backend', ['autoawq', 'llm-awq'], 'AWQ backend not known to transformers');
  const version = c.version === undefined ? 'gemm' : typeof c.version === 'string' ? c.version.toLowerCase() : String(c.version);
  if (version !== 'gemm' && version !== 'gemv')
    q.issues.push({
      path: at('version'),
      code: 'bad-config',
      message: 'AWQ version not modelled',
      expected: 'gemm | gemv',
      received: JSON.stringify(c.version),
    });
  return {
    plan: { scheme: { method: 'awq', bits: 4, groupSize: group(q, 128), version: version === 'gemv' ? 'gemv' : 'gemm' }, skip: q.notConverted },
    dtype: 'float16',
  };
}

function fp8(q: QuantReader): QuantizationRead {
  // FineGrainedFP8Config.post_init: dynamic activations (newer releases take static too).
  oneOf(q, 'activation_scheme', ['dynamic', 'static'], 'FP8 activation scheme not known to transformers', true);
  if (q.c.weight_block_size === null)
    q.issues.push({
      path: at('weight_block_size'),
      code: 'not-modelled',
      message: 'per-tensor FP8 (weight_block_size null) is not modelled: blocks of [n, k] are',
      expected: '[n, k]',
      received: 'null',
    });
  const block = q.c.weight_block_size ?? [128, 128];
  const ok = Array.isArray(block) && block.length === 2 && block.every((b) => typeof b === 'number' && Number.isSafeInteger(b) && b >= 1);
  if (!ok)
    q.issues.push({
      path: at('weight_block_size'),
      code: 'bad-config',
      message: 'weight_block_size must be two positive integers',
      expected: '[n, k]',
      received: JSON.stringify(block),
    });
  const [bn, bk] = ok ? (block as [number, number]) : [128, 128];
  return { plan: { scheme: { method: 'fp8', block: [bn, bk] }, skip: q.notConverted }, dtype: 'float32' };
}

/**
 * The method a config names, as AutoQuantizationConfig.from_dict picks it: a true `load_in_4bit`
 * or `load_in_8bit` means bitsandbytes whatever `quant_method` says, so another `quant_method`
 * beside one is a contradiction (an error, not a guess: undefined); both true is
 * BitsAndBytesConfig's error; a flag that is not a boolean its TypeError.
 */
function methodOf(c: Record<string, unknown>, issues: VramIssue[]): { method: unknown } | undefined {
  for (const field of ['load_in_4bit', 'load_in_8bit'] as const) {
    const value = c[field];
    if (value !== undefined && value !== null && typeof value !== 'boolean')
      issues.push({
        path: at(field),
        code: 'bad-config',
        message: `${field} must be true or false`,
        expected: 'true | false',
        received: JSON.stringify(value),
      });
  }
  const four = c.load_in_4bit === true;
  if (four && c.load_in_8bit === true)
    issues.push({
      path: at('load_in_8bit'),
      code: 'bad-config',
      message: 'load_in_4bit and load_in_8bit are both true, but only one can be used at the same time',
      expected: 'one of load_in_4bit, load_in_8bit',
      received: 'both true',
    });
  const flagged = four || c.load_in_8bit === true;
  const method = c.quant_method;
  if (flagged && method !== undefined && method !== null && method !== 'bitsandbytes') {
    issues.push({
      path: at('quant_method'),
      code: 'bad-config',
      message: `quant_method contradicts ${four ? 'load_in_4bit' : 'load_in_8bit'}: true (transformers would load it with bitsandbytes, ignoring quant_method)`,
      expected: '"bitsandbytes", or neither load_in_4bit nor load_in_8bit',
      received: JSON.stringify(method),
    });
    return undefined;
  }
  return { method: method ?? (flagged ? 'bitsandbytes' : undefined) };
}

/**
 * A `quantization_config` as the quantizer of transformers applies it: which Linear layers
 * become which format, and the dtype everything else gets when the config names none.
 * `blocks` is the module path of the repeated decoder blocks (`model.layers`, GPT-2's
 * `transformer.h`). Bad fields are pushed onto `issues`, with transformers' own checks of its
 * config classes: contradictory flags (`load_in_4bit` and `load_in_8bit`, or either beside another
 * `quant_method`), `bits` outside the method's set (GPTQ's required), fields of the wrong type
 * (never read as their default), values its `post_init` refuses.
 */
export function quantizationConfig(config: HFConfig, blocks: string, issues: VramIssue[]): QuantizationRead | undefined {
  const q = config.quantization_config;
  if (q === undefined || q === null) return undefined;
  if (typeof q !== 'object' || Array.isArray(q)) {
    issues.push({ path: at(), code: 'bad-config', message: 'quantization_config must be an object', received: JSON.stringify(q) });
    return undefined;
  }
  const c = q as Record<string, unknown>;
  const named = methodOf(c, issues);
  if (named === undefined) return undefined;
  const { method } = named;
  const notConverted = ['lm_head', ...names(c.modules_to_not_convert, at('modules_to_not_convert'), issues)];
  const reader: QuantReader = { c, issues, notConverted, blocks };
  switch (method) {
    case 'bitsandbytes':
      return bitsandbytes(reader);
    case 'gptq':
      return gptq(reader);
    case 'awq':
      return awq(reader);
    case 'fp8':
      return fp8(reader);
    case 'fbgemm_fp8':
      return { plan: { scheme: { method: 'fbgemm-fp8' }, skip: notConverted }, dtype: 'bfloat16' };
    default:
      issues.push({
        path: at('quant_method'),
        code: 'unsupported-quantization',
        message: 'quantization method not modelled',
        expected: QUANT_METHODS.join(' | '),
        received: JSON.stringify(method),
      });
      return undefined;
  }
}
