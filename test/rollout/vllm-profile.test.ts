/**
 * vLLM V1's profiling run as a program: the decoder layer's largest live set and the sampler's
 * top-k/top-p sort over min(max_num_seqs, tokens) rows, whichever is larger.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { llm } from '../../src/index.js';
import { vllmProfilePeak } from '../../src/internals.js';

const llama = llm('llama-3-8b').meta!;
const base = { tokens: 8192, seqs: 256, tensorParallelSize: 1, dtypeBytes: 2, eager: false } as const;

describe("vLLM's profiling run (profile_run)", () => {
  it('the sampler: the hidden states, the bf16 logits (vocabulary padded to 64) and 26 bytes per logit of the sort (28 with the logits themselves)', () => {
    const p = vllmProfilePeak(llama, base);
    const R = 256;
    const V = 128256;
    expect(p.requests).toBe(R);
    expect(p.sampler).toBe(8192 * 4096 * 2 + 2 * R * 4096 * 2 + R * V * 2 + R * V * (4 + 4 + 8 + 1 + 4 + 1 + 4));
  });

  it("the forward: gate_up and SiluAndMul's output beside the residual; eager mode keeps the MLP's input too", () => {
    const compiled = vllmProfilePeak(llama, { ...base, seqs: 1 });
    const eager = vllmProfilePeak(llama, { ...base, seqs: 1, eager: true });
    expect(compiled.forward).toBe(8192 * (4096 + 3 * 14336) * 2);
    expect(eager.forward - compiled.forward).toBe(8192 * 4096 * 2);
    expect(compiled.at).toBe('forward');
  });

  it('requests are min(max_num_seqs, tokens); other families are refused, not guessed', () => {
    expect(vllmProfilePeak(llama, { ...base, tokens: 100, seqs: 1024 }).requests).toBe(100);
    for (const name of ['gpt2', 'mixtral-8x7b', 'deepseek-v3'])
      expect(() => vllmProfilePeak(llm(name).meta!, base), name).toThrow(/measured.activationPeakBytes/);
  });

  it('property: the peak grows with the tokens and the sequences, and falls with tensor parallelism', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 32768 }), fc.integer({ min: 1, max: 2048 }), (tokens, seqs) => {
        const p = vllmProfilePeak(llama, { ...base, tokens, seqs });
        expect(vllmProfilePeak(llama, { ...base, tokens: tokens + 1, seqs }).bytes).toBeGreaterThanOrEqual(p.bytes);
        expect(vllmProfilePeak(llama, { ...base, tokens, seqs: seqs + 1 }).bytes).toBeGreaterThanOrEqual(p.bytes);
        expect(vllmProfilePeak(llama, { ...base, tokens, seqs, tensorParallelSize: 2 }).forward).toBeLessThan(p.forward);
        expect(p.bytes).toBe(Math.max(p.forward, p.sampler));
      }),
    );
  });
});
