import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { VramError, fromHFConfig, grpoStep, sftStep, trainerStep, type TrainerStepEstimate } from '../../src/index.js';

const tiny = (vocab: number, tied: boolean) =>
  fromHFConfig(
    {
      model_type: 'qwen2',
      hidden_size: 32,
      intermediate_size: 64,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: vocab,
      tie_word_embeddings: tied,
    },
    { attention: 'eager', transformers: '5.18.0' },
  );

function laws(t: TrainerStepEstimate): void {
  expect(t.peak).toBe(Math.max(...t.phases.map((p) => p.peak)));
  expect(t.phases.find((p) => p.name === t.peakPhase)?.peak).toBe(t.peak);
  for (const p of t.phases) {
    expect(p.peak, p.name).toBeGreaterThanOrEqual(p.start);
    expect(p.start, p.name).toBeGreaterThanOrEqual(t.between);
  }
  // Between steps: weights, buffers, optimizer state (and GRPO's buffered rollout), never gradients.
  expect(t.between).toBeGreaterThanOrEqual(t.resident.parameters + t.resident.buffers + t.resident.optimizer);
}

const grpoConfig = fc.record({
  per_device_train_batch_size: fc.constantFrom(2, 4),
  num_generations: fc.constant(2),
  max_completion_length: fc.integer({ min: 2, max: 12 }),
  beta: fc.constantFrom(0, 0.04),
  temperature: fc.constantFrom(1, 0.7),
  num_iterations: fc.constantFrom(1, 2),
  bf16: fc.boolean(),
  gradient_checkpointing: fc.boolean(),
});

describe('trainer steps: the accounting laws', () => {
  it('property: every GRPO step keeps the laws; the reference model adds its weights to every phase', () => {
    fc.assert(
      fc.property(grpoConfig, fc.integer({ min: 1, max: 8 }), fc.constantFrom(320, 1280), fc.boolean(), (config, prompt, vocab, tied) => {
        const model = tiny(vocab, tied);
        const g = grpoStep(model, config, { prompt, device: 'cpu' });
        laws(g);
        expect(g.generationBatch).toBe(config.per_device_train_batch_size);
        if (config.beta !== 0) {
          const without = grpoStep(model, { ...config, beta: 0 }, { prompt, device: 'cpu' });
          expect(g.resident.reference).toBe(g.resident.parameters + g.resident.buffers);
          // …and its log-probabilities, [G, L] float32, buffered with the rollout.
          const buffered = g.generationBatch * config.max_completion_length * 4;
          for (const name of ['prefill', 'decode', 'clip', 'optimizer'] as const)
            expect(g.phases.find((p) => p.name === name)!.peak - without.phases.find((p) => p.name === name)!.peak).toBe(g.resident.reference + buffered);
          expect(g.phases.some((p) => p.name === 'ref_logps')).toBe(true);
        } else expect(g.phases.some((p) => p.name === 'ref_logps')).toBe(false);
        expect(g.phases.some((p) => p.name === 'old_logps')).toBe(config.num_iterations > 1);
      }),
      { numRuns: 12 },
    );
  });

  it('property: a longer completion never lowers a GRPO phase', () => {
    fc.assert(
      fc.property(grpoConfig, fc.integer({ min: 1, max: 6 }), (config, more) => {
        const model = tiny(640, true);
        const a = grpoStep(model, config, { prompt: 4, device: 'cpu' });
        const b = grpoStep(model, { ...config, max_completion_length: config.max_completion_length + more }, { prompt: 4, device: 'cpu' });
        for (const p of a.phases) expect(b.phases.find((q) => q.name === p.name)!.peak, p.name).toBeGreaterThanOrEqual(p.peak);
      }),
      { numRuns: 8 },
    );
  });

  it('property: Trainer and SFT steps keep the laws; gradients exist only inside the step', () => {
    fc.assert(
      fc.property(
        fc.record({
          per_device_train_batch_size: fc.integer({ min: 1, max: 3 }),
          gradient_accumulation_steps: fc.integer({ min: 1, max: 3 }),
          bf16: fc.boolean(),
          gradient_checkpointing: fc.boolean(),
        }),
        fc.integer({ min: 4, max: 40 }),
        fc.constantFrom('nll', 'chunked_nll'),
        (args, sequence, loss) => {
          const model = tiny(640, false);
          const t = trainerStep(model, args, { sequence, device: 'cpu' });
          laws(t);
          const s = sftStep(model, { ...args, loss_type: loss }, { sequence, device: 'cpu' });
          laws(s);
          // The step holds the gradients from backward to zero_grad: the optimizer's start has them all.
          const optimizer = t.phases.find((p) => p.name === 'optimizer')!;
          expect(optimizer.start - t.between).toBeGreaterThanOrEqual(t.resident.gradients);
        },
      ),
      { numRuns: 10 },
    );
  });

  it('a model that cannot change its head is refused by name', () => {
    const gpt2 = fromHFConfig({ model_type: 'gpt2', n_embd: 32, n_layer: 1, n_head: 2, vocab_size: 256, n_positions: 64 });
    expect(() => grpoStep(gpt2, {}, { prompt: 8 })).toThrow(VramError);
  });
});

describe('GRPO with vLLM (use_vllm)', () => {
  const model = tiny(640, true);
  const config = { per_device_train_batch_size: 4, num_generations: 4, max_completion_length: 8 };
  const total = 80 * 2 ** 30;

  it("colocate: vLLM's ceil(util × total) while it generates, its weights and KV tensors beside every other phase; the old-policy pass runs (importance sampling)", () => {
    const hf = grpoStep(model, config, { prompt: 8, device: 'cpu' });
    const v = grpoStep(model, { ...config, use_vllm: true, vllm_gpu_memory_utilization: 0.3 }, { prompt: 8, device: 'cpu', gpuTotalBytes: total });
    const e = v.engine!;
    // TRL 1.13's LLM(...): max_num_seqs = per_device_train_batch_size × TP × steps_per_generation, 4096 batched tokens, the LLM class.
    expect(e.settings).toMatchObject({ maxNumSeqs: 4, maxNumBatchedTokens: 4096, entrypoint: 'llm', gpuMemoryUtilization: 0.3 });
    expect(e.footprint).toBe(Math.ceil(total * 0.3));
    const idle = e.weights + e.kvCache.blocks * e.kvCache.pageBytes * model.meta!.layers;
    expect(e.resident.idle).toBe(idle);
    expect(v.resident.rollout).toBe(idle);
    expect(v.phases.map((p) => p.name)).toEqual(['weight_sync', 'rollout', 'old_logps', 'forward', 'backward', 'clip', 'optimizer', 'zero_grad']);
    expect(v.phases[1]!.start - v.phases[0]!.start).toBe(e.footprint - idle);
    for (const name of ['forward', 'backward', 'optimizer'] as const) {
      const extra = v.phases.find((p) => p.name === name)!.peak - hf.phases.find((p) => p.name === name)!.peak;
      // The engine's weights and KV, plus the buffered sampling log-probabilities and ratios (a few hundred bytes).
      expect(extra).toBeGreaterThanOrEqual(idle);
      expect(extra).toBeLessThan(idle + 4096);
    }
    laws(v);
  });

  it('colocate with vllm_enable_sleep_mode: level 2 outside generation, the weights woken for the sync', () => {
    const sleeping = grpoStep(
      model,
      { ...config, use_vllm: true, vllm_enable_sleep_mode: true },
      { prompt: 8, device: 'cpu', gpuTotalBytes: total, vllm: { measured: { nonTorchBytes: 2 ** 28, cudaGraphBytes: 2 ** 27 } } },
    );
    const e = sleeping.engine!;
    expect(e.resident.asleep).toBe(2 ** 28 + 2 ** 27);
    expect(sleeping.resident.rollout).toBe(e.resident.asleep);
    const [sync, rollout] = sleeping.phases;
    expect(sync!.start - rollout!.start).toBe(e.resident.asleep + e.weights - e.footprint);
    laws(sleeping);
  });

  it('server: nothing of vLLM on this GPU; without the GPU total colocate is refused by name', () => {
    const s = grpoStep(model, { ...config, use_vllm: true, vllm_mode: 'server' }, { prompt: 8, device: 'cpu' });
    expect(s.phases.some((p) => p.name === 'rollout' || p.name === 'prefill')).toBe(false);
    expect(s.resident.rollout).toBe(0);
    try {
      grpoStep(model, { ...config, use_vllm: true }, { prompt: 8, device: 'cpu' });
      expect.unreachable();
    } catch (error) {
      expect((error as VramError).issues[0]!.path).toEqual(['options', 'gpuTotalBytes']);
    }
  });
});
