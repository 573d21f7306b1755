/**
 * scaled_dot_product_attention's CPU flash buffer (src/ops/attention.ts cpuFlashScratch) with a
 * symbolic sequence: the same splits as expressions, so a symbolic estimate is the concrete one at
 * every length (it was dropped before: fast-check found the sdpa peak at batch 1 short by it).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, evaluate, fromHFConfig, sym } from '../../src/index.js';

const model = fromHFConfig(
  {
    model_type: 'llama',
    hidden_size: 16,
    intermediate_size: 8,
    num_hidden_layers: 1,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    vocab_size: 16,
    tie_word_embeddings: false,
  },
  { attention: 'sdpa', transformers: '4.40.2' },
);
const options = { mode: 'inference', device: 'cpu', timeline: true } as const;
const symbolic = estimate(model, { ...options, input: [sym('B'), sym('S')] });
const timelineAt = (b: number, s: number) => symbolic.timeline.map((event) => evaluate(event.live, { B: b, S: s }));

describe('the CPU flash buffer of sdpa with a symbolic sequence', () => {
  it('gives the concrete timeline at each split boundary (32, 192, 512, 768 positions)', () => {
    for (const s of [1, 21, 31, 32, 33, 191, 192, 193, 511, 512, 513, 767, 768, 769]) {
      expect(timelineAt(1, s), `S = ${s}`).toEqual(estimate(model, { ...options, input: [1, s] }).timeline.map((event) => event.live));
    }
  });

  it('and at any batch and length', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 1100 }), (b, s) => {
        expect(timelineAt(b, s)).toEqual(estimate(model, { ...options, input: [b, s] }).timeline.map((event) => event.live));
      }),
      { numRuns: 25 },
    );
  });
});
