/**
 * A `quantization_config` that transformers refuses is refused here too, naming the field:
 * contradictory flags (BitsAndBytesConfig: "load_in_4bit and load_in_8bit are both True, but only
 * one can be used at the same time"; AutoQuantizationConfig.from_dict loads bitsandbytes whenever a
 * flag is true, whatever quant_method says), bits outside the method's set (GPTQConfig's bits has
 * no default), fields of the wrong type (BitsAndBytesConfig.post_init's TypeErrors) and the values
 * the post_inits refuse. None is read as its default.
 */
import { describe, expect, it } from 'vitest';
import { fromHFConfig, type HFConfig } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const tiny: HFConfig = { model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 100 };
const build = (q: unknown) => fromHFConfig({ ...tiny, quantization_config: q });
/** Every issue of the build, as `path:code`. */
const issues = (q: unknown) => errorOf(() => build(q)).issues.map((i) => `${i.path.join('.')}:${i.code}`);
const nf4 = { quant_method: 'bitsandbytes', load_in_4bit: true, bnb_4bit_quant_type: 'nf4' };

describe('contradictory flags', () => {
  it('load_in_4bit and load_in_8bit both true: transformers’ error, at load_in_8bit', () => {
    const error = errorOf(() => build({ quant_method: 'bitsandbytes', load_in_4bit: true, load_in_8bit: true }));
    expect(error.issues).toHaveLength(1);
    expect(error.issues[0]).toMatchObject({ path: ['quantization_config', 'load_in_8bit'], code: 'bad-config', received: 'both true' });
    expect(error.message).toMatch(/load_in_4bit and load_in_8bit are both true, but only one can be used at the same time/);
    // Without quant_method too (an old bitsandbytes config).
    expect(issues({ load_in_4bit: true, load_in_8bit: true })).toEqual(['quantization_config.load_in_8bit:bad-config']);
  });

  it('quant_method naming another method beside a true flag: refused, not read as either', () => {
    for (const method of ['gptq', 'awq', 'fp8', 'fbgemm_fp8']) {
      const error = errorOf(() => build({ quant_method: method, bits: 4, load_in_4bit: true }));
      expect(error.issues.map((i) => i.path.join('.'))).toEqual(['quantization_config.quant_method']);
      expect(error.message).toMatch(/quant_method contradicts load_in_4bit: true/);
    }
    expect(errorOf(() => build({ quant_method: 'gptq', bits: 4, load_in_8bit: true })).message).toMatch(/contradicts load_in_8bit/);
    // A false flag beside another method is no contradiction (saved configs carry them).
    expect(build({ quant_method: 'gptq', bits: 4, load_in_4bit: false, load_in_8bit: false }).quantization?.scheme.method).toBe('gptq');
    expect(build({ quant_method: 'bitsandbytes', load_in_8bit: true, load_in_4bit: false }).quantization?.scheme.method).toBe('bnb-8bit');
  });

  it('a flag that is not a boolean is an error, never read as false', () => {
    expect(issues({ ...nf4, load_in_4bit: 'true' })).toContain('quantization_config.load_in_4bit:bad-config');
    expect(issues({ quant_method: 'bitsandbytes', load_in_8bit: 1 })).toContain('quantization_config.load_in_8bit:bad-config');
  });
});

describe('bits in the method’s set', () => {
  it('GPTQ: 2, 3, 4 or 8, and required (GPTQConfig has no default)', () => {
    for (const bits of [2, 3, 4, 8]) expect(build({ quant_method: 'gptq', bits }).quantization?.scheme).toMatchObject({ method: 'gptq', bits });
    for (const bits of [1, 5, 16, 4.5, '4', null])
      expect(issues({ quant_method: 'gptq', bits }), String(bits)).toEqual(['quantization_config.bits:bad-config']);
    const missing = errorOf(() => build({ quant_method: 'gptq' }));
    expect(missing.issues[0]).toMatchObject({ path: ['quantization_config', 'bits'], message: 'bits is required', received: 'absent' });
  });

  it('AWQ: 4 (absent: 4); null is not the default', () => {
    expect(build({ quant_method: 'awq' }).quantization?.scheme).toMatchObject({ method: 'awq', bits: 4 });
    expect(issues({ quant_method: 'awq', bits: 8 })).toEqual(['quantization_config.bits:bad-config']);
    expect(issues({ quant_method: 'awq', bits: null })).toEqual(['quantization_config.bits:bad-config']);
  });
});

describe('fields of the wrong type are errors, not their defaults', () => {
  it('bitsandbytes: the post_init type checks', () => {
    const bad: Record<string, unknown> = {
      bnb_4bit_use_double_quant: 'yes',
      llm_int8_enable_fp32_cpu_offload: 1,
      llm_int8_has_fp16_weight: 'false',
      llm_int8_threshold: '6.0',
      bnb_4bit_compute_dtype: 16,
      bnb_4bit_quant_storage: 'int4',
    };
    for (const [field, value] of Object.entries(bad)) expect(issues({ ...nf4, [field]: value }), field).toEqual([`quantization_config.${field}:bad-config`]);
    // What transformers itself writes is read.
    const saved = {
      ...nf4,
      load_in_8bit: false,
      llm_int8_threshold: 6,
      llm_int8_skip_modules: null,
      llm_int8_enable_fp32_cpu_offload: false,
      llm_int8_has_fp16_weight: false,
      bnb_4bit_compute_dtype: 'bfloat16',
      bnb_4bit_quant_storage: 'uint8',
      bnb_4bit_use_double_quant: true,
      _load_in_4bit: true,
      _load_in_8bit: false,
    };
    expect(build(saved).quantization?.scheme).toEqual({ method: 'bnb-4bit', quantType: 'nf4', doubleQuant: true });
  });

  it('GPTQ: desc_act a boolean, group_size an integer (null is none), damp_percent in (0, 1)', () => {
    expect(issues({ quant_method: 'gptq', bits: 4, desc_act: 'true' })).toEqual(['quantization_config.desc_act:bad-config']);
    expect(build({ quant_method: 'gptq', bits: 4, desc_act: true }).quantization?.scheme).toMatchObject({ descAct: true });
    expect(issues({ quant_method: 'gptq', bits: 4, group_size: null })).toEqual(['quantization_config.group_size:bad-config']);
    expect(issues({ quant_method: 'gptq', bits: 4, group_size: 0 })).toEqual(['quantization_config.group_size:bad-config']);
    for (const damp of [0, 1, 5, '0.1'])
      expect(issues({ quant_method: 'gptq', bits: 4, damp_percent: damp })).toEqual(['quantization_config.damp_percent:bad-config']);
    expect(build({ quant_method: 'gptq', bits: 4, group_size: -1, damp_percent: 0.01 }).quantization?.scheme).toMatchObject({ groupSize: -1 });
  });

  it('AWQ: version a string (not gemm when a number), backend autoawq or llm-awq', () => {
    expect(issues({ quant_method: 'awq', version: 2 })).toEqual(['quantization_config.version:bad-config']);
    expect(issues({ quant_method: 'awq', backend: 'vllm' })).toEqual(['quantization_config.backend:bad-config']);
    expect(build({ quant_method: 'awq', version: 'GEMV', backend: 'llm-awq' }).quantization?.scheme).toMatchObject({ version: 'gemv' });
  });

  it('FP8: a known activation scheme; weight_block_size null (per-tensor) is not read as [128, 128]', () => {
    expect(issues({ quant_method: 'fp8', activation_scheme: 'weird' })).toEqual(['quantization_config.activation_scheme:bad-config']);
    expect(issues({ quant_method: 'fp8', activation_scheme: 7 })).toEqual(['quantization_config.activation_scheme:bad-config']);
    expect(issues({ quant_method: 'fp8', weight_block_size: null })).toEqual(['quantization_config.weight_block_size:not-modelled']);
    expect(build({ quant_method: 'fp8', activation_scheme: 'Dynamic', weight_block_size: [64, 64] }).quantization?.scheme).toEqual({
      method: 'fp8',
      block: [64, 64],
    });
  });
});
