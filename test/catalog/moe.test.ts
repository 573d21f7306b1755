/**
 * Mixture-of-experts and multi-head latent attention (issue 13): catalog totals against the
 * checkpoints' own figures, active parameters, and the properties the issue asks for.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { activeParams, estimate, fromHFConfig, kvCache, llm, moeBlock, VramError } from '../../src/index.js';
import { mlaCachePerToken } from '../../src/internals.js';
import { TINY_DEEPSEEK } from '../helpers/tiny-configs.js';
import { errorOf } from '../helpers/errors.js';

const fixture = (name: string) =>
  JSON.parse(readFileSync(new URL(`../fixtures/hf-configs/${name}.json`, import.meta.url), 'utf8')) as {
    totalParams: number;
    breakdown: { activePerToken: number; moeLayers: number; expertsPerLayer: number; topK: number; routedExperts: number };
    source: unknown;
    computedWith: unknown;
  };

/** A small DeepSeek-V3: 8 routed experts, 2 groups, one dense layer, MLA with q and kv LoRA. */
// TINY_DEEPSEEK with three layers (two of them MoE) and a larger vocabulary.
const DEEPSEEK_V3 = { ...TINY_DEEPSEEK, num_hidden_layers: 3, vocab_size: 256 };

describe('MoE catalog entries: totals against the real code on the meta device', () => {
  // Source of each total: test/fixtures/hf-configs/<file>.json `totalParams` — transformers 5.18.0's
  // own classes built on the meta device from the checkpoint's config.json (`computedWith`), cross-checked
  // with the model cards (`crossCheck`: Qwen3-30B-A3B 30.5B / 3.3B active, Mixtral 46.7B / 12.9B, DeepSeek-V3 671B / 36.6B + 0.9B embedding).
  for (const [id, file] of [
    ['qwen3-30b-a3b', 'qwen3-30b-a3b'],
    ['mixtral-8x7b', 'mixtral-8x7b-v0.1'],
    ['deepseek-v3', 'deepseek-v3'],
  ] as const) {
    it(`${id}: total and active parameters exact`, () => {
      const expected = fixture(file);
      const model = llm(id);
      const total = estimate(model, { input: [1, 8], mode: 'inference' }).params.total;
      expect(total).toBe(expected.totalParams);
      expect(activeParams(model, total)).toBe(expected.breakdown.activePerToken);
      expect(model.meta?.moe?.moeLayers).toBe(expected.breakdown.moeLayers);
      expect(model.meta?.moe?.experts).toBe(expected.breakdown.expertsPerLayer);
    });
  }
});

describe('MoE properties', () => {
  const configs = [
    {
      model_type: 'mixtral',
      hidden_size: 64,
      intermediate_size: 96,
      num_hidden_layers: 3,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 256,
      num_local_experts: 6,
      num_experts_per_tok: 2,
    },
    {
      model_type: 'qwen2_moe',
      hidden_size: 64,
      intermediate_size: 128,
      moe_intermediate_size: 32,
      shared_expert_intermediate_size: 96,
      num_hidden_layers: 4,
      num_attention_heads: 4,
      num_key_value_heads: 4,
      vocab_size: 256,
      num_experts: 5,
      num_experts_per_tok: 3,
      decoder_sparse_step: 2,
    },
    {
      model_type: 'qwen3_moe',
      hidden_size: 64,
      intermediate_size: 128,
      moe_intermediate_size: 32,
      num_hidden_layers: 3,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      head_dim: 16,
      vocab_size: 256,
      num_experts: 8,
      num_experts_per_tok: 2,
      mlp_only_layers: [0],
    },
    DEEPSEEK_V3,
  ];
  for (const config of configs) {
    for (const experts of ['eager', 'grouped_mm'] as const) {
      it(`${config.model_type} (${experts}): total = dense part + MoE layers × experts × expert size; active ≤ total`, () => {
        const model = fromHFConfig(config, { moe: { experts } });
        const total = estimate(model, { input: [1, 8], mode: 'inference' }).params.total;
        const moe = model.meta!.moe!;
        // The dense part: the same model with one routed expert per MoE layer, less that expert.
        const key = config.model_type === 'mixtral' ? 'num_local_experts' : config.model_type === 'deepseek_v3' ? 'n_routed_experts' : 'num_experts';
        const one = fromHFConfig(
          { ...config, [key]: 1, num_experts_per_tok: 1, ...(config.model_type === 'deepseek_v3' ? { n_group: 1, topk_group: 1 } : {}) },
          { moe: { experts } },
        );
        const dense = estimate(one, { input: [1, 8], mode: 'inference' }).params.total - moe.moeLayers * moe.expertParams;
        // the router's gate is [E, H]: one expert's model has a [1, H] gate.
        const gates = moe.moeLayers * (moe.experts - 1) * config.hidden_size;
        expect(total).toBe(dense + gates + moe.moeLayers * moe.experts * moe.expertParams);
        const active = activeParams(model, total);
        expect(active).toBeLessThanOrEqual(total);
        expect(active).toBe(total - moe.moeLayers * (moe.experts - moe.k) * moe.expertParams);
      });
    }
  }

  it("balanced routing by default; measured counts move the largest expert's temporaries; a capacity factor drops pairs", () => {
    const block = (extra: object) => moeBlock({ name: 'mlp', hidden: 64, experts: 4, k: 2, intermediate: 32, impl: 'eager', ...extra });
    const run = (extra: object, mode: 'training' | 'inference') =>
      estimate(block(extra), { input: [2, 16, 64], loss: 'none', ...(mode === 'inference' ? { mode } : {}) }).bytes;
    // What the loop keeps is linear in each expert's pairs: only the total counts.
    expect(run({}, 'training').activations).toBe(run({ counts: [16, 16, 16, 16] }, 'training').activations);
    expect(run({ counts: [64, 0, 0, 0] }, 'training').activations).toBe(run({}, 'training').activations);
    // One expert with every pair: its forward temporaries are four times as large.
    expect(run({ counts: [64, 0, 0, 0] }, 'inference').peak).toBeGreaterThan(run({}, 'inference').peak);
    expect(run({ capacityFactor: 0.5 }, 'training').activations).toBeLessThan(run({}, 'training').activations);
    expect(() => block({ counts: [1, 2, 3] })).toThrow(VramError);
    expect(() => estimate(block({ counts: [1, 2, 3, 4] }), { input: [2, 16, 64], loss: 'none' })).toThrow(/add up/);
  });

  it('grouped_mm saves the same whatever the split (only routing-independent [T·k, ·] tensors)', () => {
    const saved = (counts?: number[]) =>
      estimate(moeBlock({ hidden: 64, experts: 4, k: 2, intermediate: 32, impl: 'grouped_mm', ...(counts ? { counts } : {}) }), {
        input: [2, 16, 64],
        loss: 'none',
      }).bytes.activations;
    expect(saved([64, 0, 0, 0])).toBe(saved());
  });
});

describe('MLA', () => {
  const base = {
    model_type: 'deepseek_v3',
    hidden_size: 64,
    intermediate_size: 128,
    moe_intermediate_size: 32,
    num_hidden_layers: 2,
    n_routed_experts: 4,
    num_experts_per_tok: 2,
    n_group: 1,
    topk_group: 1,
    first_k_dense_replace: 1,
    q_lora_rank: 32,
    kv_lora_rank: 16,
    qk_rope_head_dim: 8,
    qk_nope_head_dim: 16,
    v_head_dim: 16,
    vocab_size: 256,
  };
  it('the latent KV cache per token does not depend on the head count', () => {
    const cacheBytes = (heads: number) =>
      kvCache(fromHFConfig({ ...base, num_attention_heads: heads, num_key_value_heads: heads }), { batch: 1, seq: 32, dtype: 'float32' });
    // 2 layers × 32 tokens × (16 + 8) fp32.
    expect(cacheBytes(4)).toBe(2 * 32 * 24 * 4);
    expect(cacheBytes(8)).toBe(cacheBytes(4));
    // The traced forward's cache holds the same latent: a bigger peak with use_cache by at least its size.
    const peak = (useCache: boolean) =>
      estimate(fromHFConfig({ ...base, num_attention_heads: 4, num_key_value_heads: 4 }, { useCache }), { input: [1, 32], mode: 'inference' }).bytes.peak;
    expect(peak(true) - peak(false)).toBeGreaterThanOrEqual(2 * 32 * 24 * 4);
    expect(mlaCachePerToken({ kvLoraRank: 512, qkRopeHeadDim: 64, qkNopeHeadDim: 128, vHeadDim: 128, heads: 128 }).latent).toBe(576);
    expect(mlaCachePerToken({ kvLoraRank: 512, qkRopeHeadDim: 64, qkNopeHeadDim: 128, vHeadDim: 128, heads: 16 }).latent).toBe(576);
  });

  it('records the latent in the model meta', () => {
    const meta = llm('deepseek-v3').meta!;
    expect(meta.mla?.latentPerToken).toBe(576);
    expect(meta.family).toBe('deepseek_v3');
  });

  it('refuses what is not modelled with a path', () => {
    expect(() => fromHFConfig({ ...base, num_attention_heads: 4 }, { transformers: '4.40.2' })).toThrow(VramError);
    expect(() => fromHFConfig({ ...base, num_attention_heads: 4 }, { attention: 'flash' })).toThrow(VramError);
    // sdpa keeps no S×S scores: a smaller training footprint than eager.
    const saved = (attention: 'eager' | 'sdpa') =>
      estimate(fromHFConfig({ ...base, num_attention_heads: 4 }, { attention }), { input: [1, 64] }).bytes.activations as number;
    expect(saved('sdpa')).toBeLessThan(saved('eager'));
    expect(() => fromHFConfig({ model_type: 'mixtral', num_hidden_layers: 2 }, { transformers: '4.40.2', moe: { experts: 'eager' } })).toThrow(
      /experts_implementation/,
    );
  });
});

describe("DeepSeek-V3's selection bias (gate.e_score_correction_bias)", () => {
  const buffers = (transformers: string) =>
    estimate(fromHFConfig(DEEPSEEK_V3, { transformers }), { input: [1, 8], dtype: 'bfloat16', mode: 'inference' }).bytes.buffers;
  it('is a float32 buffer per MoE layer in 5.x (_keep_in_fp32_modules_strict) and cast with the model in 4.57', () => {
    // Two MoE layers × 8 experts; the rotary tables (inv_freq and 5.x's original_inv_freq, [4] float32) besides.
    expect(buffers('5.18.0')).toBe(2 * 8 * 4 + 2 * 4 * 4);
    expect(buffers('4.57.6')).toBe(2 * 8 * 2 + 4 * 4);
  });
  it('belongs to sigmoid routing: on softmax routing it is an error with a path', () => {
    const block = () => moeBlock({ name: 'mlp', hidden: 64, experts: 8, k: 2, intermediate: 32, impl: 'eager', correctionBias: { fp32: true } });
    expect(errorOf(block).issues[0]?.path).toEqual(['moeBlock', 'mlp', 'correctionBias']);
  });
});
