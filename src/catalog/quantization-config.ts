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

/** An integer field that must be one of `allowed`. */
function int(q: QuantReader, field: string, allowed: readonly number[], fallback: number): number {
  const value = q.c[field] ?? fallback;
  if (typeof value !== 'number' || !allowed.includes(value))
    q.issues.push({
      path: at(field),
      code: 'bad-config',
      message: `${field} is not one vram-ts models`,
      expected: allowed.join(' | '),
      received: JSON.stringify(value),
    });
  return typeof value === 'number' ? value : fallback;
}

/** `group_size`: a positive integer, or -1 (one group per row). */
function group(q: QuantReader, fallback: number): number {
  const value = q.c.group_size ?? fallback;
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

function bitsandbytes(q: QuantReader): QuantizationRead {
  const { c, issues } = q;
  const four = c.load_in_4bit === true;
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
  const doubleQuant = c.bnb_4bit_use_double_quant ?? false;
  if (typeof doubleQuant !== 'boolean')
    issues.push({ path: at('bnb_4bit_use_double_quant'), code: 'bad-config', message: 'must be true or false', received: JSON.stringify(doubleQuant) });
  // llm_int8_skip_modules replaces the automatic list (the output embedding), as transformers does.
  const skip =
    c.llm_int8_skip_modules === undefined || c.llm_int8_skip_modules === null
      ? ['lm_head']
      : names(c.llm_int8_skip_modules, at('llm_int8_skip_modules'), issues);
  const scheme: QuantScheme = four
    ? { method: 'bnb-4bit', quantType: quantType === 'nf4' ? 'nf4' : 'fp4', doubleQuant: doubleQuant === true }
    : { method: 'bnb-8bit' };
  return { plan: { scheme, skip }, dtype: 'float16' };
}

function gptq(q: QuantReader): QuantizationRead {
  const bits = int(q, 'bits', [2, 3, 4, 8], 4) as 2 | 3 | 4 | 8;
  // optimum converts the Linear layers of the repeated decoder blocks only.
  return {
    plan: { scheme: { method: 'gptq', bits, groupSize: group(q, 128), descAct: q.c.desc_act === true }, within: [q.blocks], skip: [] },
    dtype: 'float16',
  };
}

function awq(q: QuantReader): QuantizationRead {
  const { c } = q;
  int(q, 'bits', [4], 4);
  const version = typeof c.version === 'string' ? c.version.toLowerCase() : 'gemm';
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
 * A `quantization_config` as the quantizer of transformers applies it: which Linear layers
 * become which format, and the dtype everything else gets when the config names none.
 * `blocks` is the module path of the repeated decoder blocks (`model.layers`, GPT-2's
 * `transformer.h`). Bad fields are pushed onto `issues`.
 */
export function quantizationConfig(config: HFConfig, blocks: string, issues: VramIssue[]): QuantizationRead | undefined {
  const q = config.quantization_config;
  if (q === undefined || q === null) return undefined;
  if (typeof q !== 'object' || Array.isArray(q)) {
    issues.push({ path: at(), code: 'bad-config', message: 'quantization_config must be an object', received: JSON.stringify(q) });
    return undefined;
  }
  const c = q as Record<string, unknown>;
  const method = c.quant_method ?? (c.load_in_4bit === true || c.load_in_8bit === true ? 'bitsandbytes' : undefined);
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
