import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, evaluate, fromHFConfig, kvCache, korthikanti, LLMS, llm, sym, type VramError, type Dim, type Expr } from '../../src/index.js';

const num = (d: Dim) => d as number;

describe('LLM catalog', () => {
  it('has the exact parameter totals of the checkpoints', () => {
    const count = (id: string) => estimate(llm(id), { input: [1, 4], mode: 'inference', timeline: false }).params.total;
    expect(count('qwen2.5-0.5b')).toBe(494_032_768);
    expect(count('qwen2.5-1.5b')).toBe(1_543_714_304);
    expect(count('llama-3-8b')).toBe(8_030_261_248);
    expect(count('gpt2')).toBe(124_439_808);
    for (const entry of LLMS) expect(count(entry.id), entry.repo).toBe(entry.params);
  });

  it('sizes the KV cache exactly (Llama-3-8B: 131,072 bytes per token in bf16)', () => {
    expect(kvCache(llm('llama-3-8b'), { batch: 1, seq: 1, dtype: 'bfloat16' })).toBe(131_072);
    expect(kvCache(llm('llama-3-8b'), { batch: 1, seq: 1, dtype: 'float8_e4m3' })).toBe(65_536);
    expect(kvCache(llm('llama-3-8b'), { batch: 1, seq: 1, dtype: 'int8' })).toBe(65_536);
    expect(kvCache(llm('llama-2-7b'), { batch: 2, seq: 10, dtype: 'float16' })).toBe(2 * 32 * 32 * 128 * 10 * 2 * 2);
    // Mistral's sliding window caps the cache at 4096 positions.
    expect(kvCache(llm('mistral-7b'), { batch: 1, seq: 32_768 })).toBe(kvCache(llm('mistral-7b'), { batch: 1, seq: 4096 }));
    expect(String(kvCache(llm('qwen2.5-0.5b'), { batch: sym('B'), seq: sym('S') }))).toBe('12288·B·S');
  });

  it('rejects bad configs with the field named', () => {
    const base = { model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1, num_attention_heads: 4, vocab_size: 100 };
    const issue = (config: Record<string, unknown>) => {
      try {
        fromHFConfig(config);
      } catch (error) {
        return (error as VramError).issues[0]!;
      }
      return undefined;
    };
    expect(issue({ ...base, num_key_value_heads: 3 })?.path).toEqual(['num_key_value_heads']);
    expect(issue({ ...base, hidden_size: 'big' })?.path).toEqual(['hidden_size']);
    expect(issue({ ...base, model_type: 'bert' })?.path).toEqual(['model_type']);
    expect(issue({ ...base, hidden_act: 'laplace' })?.path).toEqual(['hidden_act']);
    expect(issue({ model_type: 'gpt2', n_embd: 100, n_head: 12 })?.path).toEqual(['n_head']);
    expect(() => fromHFConfig({ ...base, intermediate_size: undefined })).toThrow(/intermediate_size/);
  });
});

const tinyConfig = fc.record({
  heads: fc.constantFrom(2, 4, 8),
  headDim: fc.constantFrom(8, 16),
  kvDivisor: fc.constantFrom(1, 2),
  layers: fc.integer({ min: 1, max: 2 }),
  vocab: fc.integer({ min: 16, max: 300 }),
  intermediate: fc.integer({ min: 8, max: 200 }),
  tied: fc.boolean(),
  family: fc.constantFrom('llama', 'qwen2'),
});
interface Tiny {
  heads: number;
  headDim: number;
  kvDivisor: number;
  layers: number;
  vocab: number;
  intermediate: number;
  tied: boolean;
  family: string;
}
const llamaConfig = (c: Tiny) => ({
  model_type: c.family,
  hidden_size: c.heads * c.headDim,
  intermediate_size: c.intermediate,
  num_hidden_layers: c.layers,
  num_attention_heads: c.heads,
  num_key_value_heads: c.heads / c.kvDivisor,
  vocab_size: c.vocab,
  tie_word_embeddings: c.tied,
});

function degreeIn(expr: Dim, name: string): number {
  if (typeof expr === 'number') return 0;
  return Math.max(...(expr as Expr).terms.map((t) => t.factors.filter((f) => f.atom.kind === 'sym' && f.atom.name === name).reduce((a, f) => a + f.power, 0)));
}

describe('LLM laws (property-based)', () => {
  it('the KV cache is linear in B and in S', () => {
    fc.assert(
      fc.property(tinyConfig, fc.integer({ min: 1, max: 9 }), fc.integer({ min: 1, max: 4000 }), (c, b, s) => {
        const model = fromHFConfig(llamaConfig(c));
        const at = (batch: number, seq: number) => num(kvCache(model, { batch, seq }));
        expect(at(b + 1, s) - at(b, s)).toBe(at(1, s));
        expect(at(b, s + 1) - at(b, s)).toBe(at(b, 1));
      }),
      { numRuns: 40 },
    );
  });

  it('eager attention keeps an S² term; sdpa and flash do not', () => {
    fc.assert(
      fc.property(tinyConfig, fc.constantFrom('sdpa', 'flash') as fc.Arbitrary<'sdpa' | 'flash'>, (c, fused) => {
        const input = [sym('B'), sym('S')];
        const eager = estimate(fromHFConfig(llamaConfig(c), { attention: 'eager' }), { input, timeline: false, peakExpression: false }).bytes.activations;
        const other = estimate(fromHFConfig(llamaConfig(c), { attention: fused }), { input, timeline: false, peakExpression: false }).bytes.activations;
        expect(degreeIn(eager, 'S')).toBe(2);
        expect(degreeIn(other, 'S')).toBe(1);
      }),
      { numRuns: 12 },
    );
  });

  it('GQA never keeps more than MHA of the same shape', () => {
    fc.assert(
      fc.property(
        tinyConfig,
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 2, max: 48 }),
        fc.constantFrom('eager', 'sdpa', 'flash') as fc.Arbitrary<'eager' | 'sdpa' | 'flash'>,
        (c, b, s, attention) => {
          const mha = estimate(fromHFConfig(llamaConfig({ ...c, kvDivisor: 1 }), { attention }), { input: [b, s], timeline: false }).bytes.activations;
          const gqa = estimate(fromHFConfig(llamaConfig({ ...c, kvDivisor: 2 }), { attention }), { input: [b, s], timeline: false }).bytes.activations;
          expect(num(gqa)).toBeLessThanOrEqual(num(mha));
        },
      ),
      { numRuns: 30 },
    );
  });

  it('LoRA trains r·(in + out) parameters per adapted matrix', () => {
    fc.assert(
      fc.property(
        tinyConfig,
        fc.integer({ min: 1, max: 16 }),
        fc.constantFrom<readonly string[]>(['q_proj', 'v_proj'], ['q_proj', 'k_proj', 'v_proj', 'o_proj'], ['gate_proj', 'up_proj', 'down_proj']),
        (c, rank, targets) => {
          const config = llamaConfig(c);
          const h = config.hidden_size;
          const kv = config.num_key_value_heads * c.headDim;
          const shapes: Record<string, [number, number]> = {
            q_proj: [h, h],
            k_proj: [h, kv],
            v_proj: [h, kv],
            o_proj: [h, h],
            gate_proj: [h, c.intermediate],
            up_proj: [h, c.intermediate],
            down_proj: [c.intermediate, h],
          };
          const expected = c.layers * targets.reduce((a, t) => a + rank * (shapes[t]![0] + shapes[t]![1]), 0);
          const r = estimate(fromHFConfig(config), { input: [1, 8], lora: { rank, targets }, timeline: false });
          expect(r.params.trainable).toBe(expected);
          expect(r.bytes.gradients).toBe(expected * 4);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('tied embeddings count once', () => {
    fc.assert(
      fc.property(tinyConfig, (c) => {
        const tied = estimate(fromHFConfig(llamaConfig({ ...c, tied: true })), { input: [1, 4], mode: 'inference' }).params.total;
        const untied = estimate(fromHFConfig(llamaConfig({ ...c, tied: false })), { input: [1, 4], mode: 'inference' }).params.total;
        expect(untied - tied).toBe(c.vocab * c.heads * c.headDim);
      }),
      { numRuns: 30 },
    );
  });

  it('symbolic B and S give the concrete saved bytes and peaks at every batch, 1 included (copies that are views at batch 1)', () => {
    fc.assert(
      fc.property(
        tinyConfig,
        fc.constantFrom('eager', 'sdpa') as fc.Arbitrary<'eager' | 'sdpa'>,
        fc.constantFrom('train', 'inference') as fc.Arbitrary<'train' | 'inference'>,
        fc.constantFrom('cuda', 'cpu') as fc.Arbitrary<'cuda' | 'cpu'>,
        fc.constantFrom('4.40.2', '4.46.0', '5.18.0'),
        fc.integer({ min: 2, max: 40 }),
        (c, attention, mode, device, transformers, s) => {
          const model = fromHFConfig(llamaConfig(c), { attention, transformers });
          const options = { mode, device, timeline: false } as const;
          const symbolic = estimate(model, { ...options, input: [sym('B'), sym('S')] });
          for (const b of [1, 2, 3]) {
            const concrete = estimate(model, { ...options, input: [b, s] });
            expect(evaluate(symbolic.bytes.activations, { B: b, S: s })).toBe(concrete.bytes.activations);
            expect(evaluate(symbolic.bytes.peak, { B: b, S: s })).toBe(concrete.bytes.peak);
          }
        },
      ),
      { numRuns: 12 },
    );
  });

  it('symbolic B and S evaluate to the concrete training estimate', () => {
    const model = llm('gpt2');
    const symbolic = estimate(model, { input: [sym('B'), sym('S')], timeline: false, peakExpression: false }).bytes.activations;
    for (const [b, s] of [
      [1, 16],
      [2, 100],
      [3, 7],
    ] as const) {
      expect(evaluate(symbolic, { B: b, S: s })).toBe(estimate(model, { input: [b, s], timeline: false }).bytes.activations);
    }
  });
});

describe('Korthikanti et al. 2022 cross-check', () => {
  it('gives sbh(34 + 5as/h) per layer and its parallel and recompute variants', () => {
    const base = { seq: 2048, batch: 4, hidden: 4096, heads: 32 };
    const sbh = 2048 * 4 * 4096;
    expect(korthikanti(base)).toBe(sbh * (34 + (5 * 32 * 2048) / 4096));
    expect(korthikanti({ ...base, tensorParallel: 8 })).toBe(sbh * (10 + 24 / 8 + (5 * 32 * 2048) / (4096 * 8)));
    expect(korthikanti({ ...base, tensorParallel: 8, sequenceParallel: true })).toBe(sbh * (34 / 8 + (5 * 32 * 2048) / (4096 * 8)));
    expect(korthikanti({ ...base, tensorParallel: 8, sequenceParallel: true, recompute: 'selective' })).toBe((sbh * 34) / 8);
    expect(korthikanti({ ...base, recompute: 'full' })).toBe(2 * sbh);
  });
});
