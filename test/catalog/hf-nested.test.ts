/**
 * A multimodal config's text_config (Gemma 3): one level only (a cycle was a stack overflow), and the
 * top-level quantization_config applies to the decoder (it was ignored: full-precision weights).
 */
import { describe, expect, it } from 'vitest';
import { estimate, fromHFConfig } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const text = { hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 1, head_dim: 16, vocab_size: 512 };
const nf4 = { quant_method: 'bitsandbytes', load_in_4bit: true, bnb_4bit_quant_type: 'nf4', bnb_4bit_compute_dtype: 'bfloat16' };
const weights = (config: Record<string, unknown>) => estimate(fromHFConfig(config), { input: [1, 4], mode: 'inference' }).bytes.parameters;

const issue = (run: () => unknown) => errorOf(run).issues[0];

describe('text_config', () => {
  it('a config that is its own text_config, or a nested text_config, is an error with its path', () => {
    const cyclic: Record<string, unknown> = { model_type: 'gemma3' };
    cyclic.text_config = cyclic;
    expect(issue(() => fromHFConfig(cyclic))).toMatchObject({ code: 'bad-config', path: ['text_config', 'text_config'] });
    expect(issue(() => fromHFConfig({ model_type: 'gemma3', text_config: { ...text, text_config: text } }))?.path).toEqual(['text_config', 'text_config']);
  });

  it('the top-level quantization_config quantizes the decoder, as at the text level', () => {
    const plain = weights({ model_type: 'gemma3', text_config: text });
    const top = weights({ model_type: 'gemma3', text_config: text, quantization_config: nf4 });
    expect(top).toBeLessThan(plain / 2);
    expect(top).toBe(weights({ model_type: 'gemma3', text_config: { ...text, quantization_config: nf4 } }));
  });

  it('a quantization_config at both levels is an error, not a choice', () => {
    expect(issue(() => fromHFConfig({ model_type: 'gemma3', text_config: { ...text, quantization_config: nf4 }, quantization_config: nf4 }))?.path).toEqual([
      'text_config',
      'quantization_config',
    ]);
  });
});
