/**
 * Issue 13's dense families (Qwen3, Gemma 1-3, Phi-3): catalog totals against the real code's,
 * the sliding-window KV cache, parameter order, and the errors. The real-code fixtures
 * themselves are compared in test/fidelity/hf.test.ts.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decoderMeta, estimate, fromHFConfig, kvCache, llm, LLMS, traceModel, VramError, type HFConfig } from '../../src/index.js';
import { parameterOrder } from '../../src/internals.js';

interface ConfigFile {
  readonly name: string;
  readonly source: { readonly repo?: string; readonly path?: string; readonly kind?: string };
  readonly config: HFConfig;
  readonly totalParams: number;
  readonly computedWith: { readonly transformers: string; readonly how: string };
}

const configFile = (file: string) => JSON.parse(readFileSync(new URL(`../fixtures/hf-configs/${file}.json`, import.meta.url), 'utf8')) as ConfigFile;

/** Catalog id → its file in test/fixtures/hf-configs (totals from the real transformers 5.18.0 code on the meta device). */
const CATALOG: Readonly<Record<string, string>> = {
  'qwen3-0.6b': 'qwen3-0.6b',
  'qwen3-1.7b': 'qwen3-1.7b',
  'qwen3-4b': 'qwen3-4b',
  'qwen3-8b': 'qwen3-8b',
  'qwen3-14b': 'qwen3-14b',
  'qwen3-32b': 'qwen3-32b',
  'gemma-2-2b': 'gemma-2-2b',
  'gemma-2-9b': 'gemma-2-9b',
  'gemma-2-27b': 'gemma-2-27b',
  'gemma-3-1b': 'gemma-3-1b-it',
  'gemma-3-4b': 'gemma-3-4b-text',
  'gemma-3-12b': 'gemma-3-12b-text',
  'gemma-3-27b': 'gemma-3-27b-text',
  'phi-3-mini': 'phi-3-mini-4k-instruct',
};

const params = (id: string) => estimate(llm(id), { input: [1, 4], mode: 'inference', timeline: false }).params.total;

describe('dense families of issue 13: catalog', () => {
  for (const [id, file] of Object.entries(CATALOG)) {
    it(`${id}: the parameter total of transformers' own model (test/fixtures/hf-configs/${file}.json)`, () => {
      const truth = configFile(file);
      const entry = LLMS.find((e) => e.id === id);
      expect(entry, id).toBeDefined();
      // The total transformers 5.18.0 builds from this config on the meta device
      // (tools/oracle/hf_param_totals.py), config from the file's `source`.
      expect(truth.computedWith.transformers).toBe('5.18.0');
      const source = `${truth.name}: ${truth.source.repo ?? truth.source.kind ?? ''} ${truth.source.path ?? ''}`;
      expect(entry!.params, source).toBe(truth.totalParams);
      expect(params(id), source).toBe(truth.totalParams);
      expect(estimate(fromHFConfig(truth.config), { input: [1, 4], mode: 'inference', timeline: false }).params.total, source).toBe(truth.totalParams);
    });
  }

  it('builds a gemma3 config from its text_config (the text decoder alone)', () => {
    const model = llm('gemma-3-4b');
    expect(model.className).toBe('Gemma3ForCausalLM');
    expect(model.dtype).toBe('bfloat16');
    expect(decoderMeta(model).layerWindows?.filter((w) => w === null).length).toBe(Math.floor(34 / 6));
  });
});

/** A tiny Gemma 2 / Gemma 3 config with its layers' types. */
const tiny = (modelType: 'gemma2' | 'gemma3_text', types: readonly ('sliding_attention' | 'full_attention')[], window: number): HFConfig => ({
  model_type: modelType,
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: types.length,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  vocab_size: 64,
  sliding_window: window,
  layer_types: types,
  torch_dtype: 'bfloat16',
});

describe('dense families of issue 13: the KV cache', () => {
  it('stops growing at the window in a sliding-window layer (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('sliding_attention' as const, 'full_attention' as const), { minLength: 1, maxLength: 6 }),
        fc.integer({ min: 2, max: 64 }),
        fc.integer({ min: 1, max: 200 }),
        fc.constantFrom('gemma2' as const, 'gemma3_text' as const),
        (types, window, seq, family) => {
          const model = fromHFConfig(tiny(family, types, window));
          const perPosition = 2 * 2 * 8 * 2; // keys and values × kv heads × head_dim × bf16
          const globals = types.filter((t) => t === 'full_attention').length;
          const locals = types.length - globals;
          const at = (s: number) => kvCache(model, { batch: 1, seq: s });
          expect(at(seq)).toBe(perPosition * (globals * seq + locals * Math.min(seq, window)));
          // One position more: only the global layers (and the sliding ones still under their window) grow.
          expect(at(seq + 1) - at(seq)).toBe(perPosition * (globals + (seq < window ? locals : 0)));
          // A model of sliding layers only stops growing at the window.
          if (globals === 0 && seq >= window) expect(at(seq + 1)).toBe(at(seq));
        },
      ),
      { numRuns: 60 },
    );
  });

  it("caps Phi-3-mini's cache at its sliding window (every layer) and Gemma 2's local layers at 4096", () => {
    const phi = llm('phi-3-mini');
    expect(kvCache(phi, { batch: 1, seq: 10_000 })).toBe(kvCache(phi, { batch: 1, seq: 2047 }));
    const gemma = llm('gemma-2-9b');
    // 42 layers, 21 local (window 4096), 8 kv heads × 256 head_dim, bf16.
    const per = 2 * 8 * 256 * 2;
    expect(kvCache(gemma, { batch: 1, seq: 8192 })).toBe(per * (21 * 8192 + 21 * 4096));
  });
});

describe('dense families of issue 13: module tree and errors', () => {
  const order = (config: HFConfig) => {
    const ir = traceModel(fromHFConfig(config), { input: [1, 4], mode: 'inference' });
    return parameterOrder(ir)
      .map((id) => ir.tensors[id]!.key!)
      .filter((k) => k.startsWith('model.layers.0.'));
  };

  it('registers parameters as the checkpoints do (Phi-3: o_proj before qkv_proj; Qwen3: the q/k norms after o_proj; Gemma 2: four norms)', () => {
    const base = { hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 64 };
    expect(order({ ...base, model_type: 'phi3' })).toEqual(
      [
        'self_attn.o_proj.weight',
        'self_attn.qkv_proj.weight',
        'mlp.gate_up_proj.weight',
        'mlp.down_proj.weight',
        'input_layernorm.weight',
        'post_attention_layernorm.weight',
      ].map((k) => `model.layers.0.${k}`),
    );
    expect(order({ ...base, model_type: 'qwen3', head_dim: 8 }).slice(0, 6)).toEqual(
      ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'q_norm', 'k_norm'].map((k) => `model.layers.0.self_attn.${k}.weight`),
    );
    expect(order({ ...base, model_type: 'gemma2', head_dim: 8 }).slice(-4)).toEqual(
      ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm'].map((k) => `model.layers.0.${k}.weight`),
    );
  });

  it('names every supported model_type for an unknown one', () => {
    try {
      fromHFConfig({ model_type: 'bert' });
      expect.unreachable();
    } catch (error) {
      const issue = (error as VramError).issues[0]!;
      expect(issue.path).toEqual(['model_type']);
      for (const family of ['llama', 'qwen2', 'mistral', 'gpt2', 'qwen3', 'gemma', 'gemma2', 'gemma3_text', 'phi3']) expect(issue.expected).toContain(family);
    }
  });

  it('refuses a release whose modeling code of the family was not read, and prefixes text_config errors', () => {
    const gemma = {
      model_type: 'gemma',
      hidden_size: 32,
      intermediate_size: 64,
      num_hidden_layers: 1,
      num_attention_heads: 4,
      num_key_value_heads: 1,
      head_dim: 8,
      vocab_size: 64,
    };
    expect(estimate(fromHFConfig(gemma, { transformers: '4.40.2' }), { input: [1, 4], mode: 'inference' }).params.total).toBeGreaterThan(0);
    // Read in 4.57.6 (issue 22); 4.41 – 4.56 were not.
    expect(estimate(fromHFConfig(gemma, { transformers: '4.57.6' }), { input: [1, 4], mode: 'inference' }).params.total).toBeGreaterThan(0);
    expect(() => fromHFConfig(gemma, { transformers: '4.50.0' })).toThrow(VramError);
    try {
      fromHFConfig({ ...gemma, model_type: 'qwen3' }, { transformers: '4.40.2' });
      expect.unreachable();
    } catch (error) {
      expect((error as VramError).issues[0]!.path).toEqual(['transformers']);
      expect((error as VramError).issues[0]!.expected).toContain('5.17.0');
    }
    try {
      fromHFConfig({ model_type: 'gemma3', text_config: { ...gemma, model_type: 'gemma3_text', layer_types: ['global'] } });
      expect.unreachable();
    } catch (error) {
      expect((error as VramError).issues[0]!.path).toEqual(['text_config', 'layer_types']);
    }
  });
});
