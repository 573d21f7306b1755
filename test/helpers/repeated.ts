/**
 * Models for the law "a decoder traced with three layers gives the whole trace's figures": a small
 * bf16 Llama, and any repeated model with its repetition removed (so it is traced whole).
 */
import { fromHFConfig, type Layer, type ModuleLayer } from '../../src/index.js';

/** A bf16 Llama of hidden 64 with `layers` decoder layers (four heads, two kv heads, vocabulary 300). */
export function smallLlama(layers: number): ModuleLayer {
  return fromHFConfig({
    model_type: 'llama',
    hidden_size: 64,
    intermediate_size: 160,
    num_hidden_layers: layers,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    vocab_size: 300,
    torch_dtype: 'bfloat16',
  });
}

/** The same model traced whole: no repetition declared. */
export function whole(model: ModuleLayer): Layer {
  const { repeated: _repeated, ...rest } = model;
  return rest as Layer;
}
