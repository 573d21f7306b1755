/**
 * Repeated blocks (src/trace/blocks.ts, memory/program.ts, memory/peak.ts): a decoder whose
 * identical layers are traced as three and counted over must give exactly what tracing every
 * layer gives — every byte count, the peak, where it happens, what is live then, the step
 * programs replayed at any values — whatever the options. The full trace is the same model
 * without its `repeated` declaration.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CATEGORIES,
  estimate,
  evaluate,
  fromHFConfig,
  maxFitting,
  sym,
  type Dim,
  type Estimate,
  type EstimateOptions,
  type Layer,
  type ModuleLayer,
  type StepProgram,
} from '../../src/index.js';
import { MARK } from '../../src/memory/ledger.js';
import { stepPeakAt } from '../../src/estimate.js';
import { programPeakAt } from '../../src/memory/program.js';
import { whole } from '../helpers/repeated.js';

const at = (d: Dim, env: Record<string, number>) => (typeof d === 'number' ? d : evaluate(d, env));

/** Live bytes at one event of a program, replayed at symbol values (CUDA's 512-byte blocks when rounded). */
function liveAt(program: StepProgram, event: number, env: Record<string, number>): number {
  let live = 0;
  let seen = 0;
  for (const entry of program.log) {
    if (entry === MARK) {
      if (seen === event) return live;
      seen += 1;
      continue;
    }
    const bytes = at(program.sizes[entry >= 0 ? entry : -1 - entry]!, env);
    const size = program.rounded ? (bytes <= 0 ? 0 : Math.ceil(bytes / 512) * 512) : bytes;
    live += entry >= 0 ? size : -size;
  }
  return live;
}

/** Everything an estimate reports, at symbol values. */
function figures(r: Estimate, env: Record<string, number>) {
  const step = (name: 'first' | 'steady' | 'inference') => {
    const s = r.steps[name];
    return s === undefined ? null : { peak: at(s.peak, env), baseline: at(s.baseline, env), end: at(s.end, env) };
  };
  return {
    params: r.params,
    bytes: Object.fromEntries(Object.entries(r.bytes).map(([k, v]) => [k, at(v as Dim, env)])),
    constraints: r.constraints.map((c) => (typeof c === 'number' ? String(c) : c.key)).sort(),
    steps: { first: step('first'), steady: step('steady'), inference: step('inference') },
  };
}

/** What only a concrete estimate pins down: the peak's event, label and totals by category. */
function concretePeak(r: Estimate) {
  return {
    step: r.peak.step,
    phase: r.peak.phase,
    label: r.peak.label,
    event: r.peak.candidates[0]!.event,
    byCategory: Object.fromEntries(CATEGORIES.map((c) => [c, r.peak.byCategory[c]])),
  };
}

const decoder = fc.record({
  family: fc.constantFrom('llama', 'qwen2', 'mistral', 'gpt2'),
  layers: fc.integer({ min: 4, max: 9 }),
  heads: fc.constantFrom(2, 4),
  kvDivisor: fc.constantFrom(1, 2),
  headDim: fc.constantFrom(8, 16),
  vocab: fc.integer({ min: 16, max: 300 }),
  tied: fc.boolean(),
  dtype: fc.constantFrom('float32', 'bfloat16'),
});

type DecoderShape = typeof decoder extends fc.Arbitrary<infer T> ? T : never;

function configOf(d: DecoderShape): Record<string, unknown> {
  const hidden = d.heads * d.headDim;
  if (d.family === 'gpt2')
    return { model_type: 'gpt2', n_embd: hidden, n_layer: d.layers, n_head: d.heads, n_positions: 256, vocab_size: d.vocab, tie_word_embeddings: d.tied };
  return {
    model_type: d.family,
    torch_dtype: d.dtype,
    hidden_size: hidden,
    intermediate_size: hidden * 3,
    num_hidden_layers: d.layers,
    num_attention_heads: d.heads,
    num_key_value_heads: d.heads / d.kvDivisor,
    vocab_size: d.vocab,
    tie_word_embeddings: d.tied,
    max_position_embeddings: 4096,
    ...(d.family === 'mistral' ? { sliding_window: 64 } : {}),
  };
}

const options = fc.record(
  {
    mode: fc.constantFrom('train', 'inference'),
    precision: fc.constantFrom('fp32', 'bf16', 'amp-bf16', 'amp-fp16'),
    checkpoint: fc.constantFrom({ within: 'model', every: 1 }, { within: 'transformer', every: 1 }, { within: 'model', every: 2 }, { selective: ['softmax'] }),
    microBatches: fc.integer({ min: 1, max: 2 }),
    optimizer: fc.constantFrom('adam', 'adamw', 'sgd', 'sgd_momentum', null, { name: 'adamw', impl: 'foreach' }, { name: 'adam', impl: 'fused' }),
    lora: fc.record(
      { rank: fc.constantFrom(2, 4), targets: fc.constantFrom(undefined, 'all-linear', ['q_proj', 'o_proj', 'c_proj']) },
      { requiredKeys: ['rank'] },
    ),
    device: fc.constantFrom('cuda', 'cpu'),
    freeze: fc.constantFrom(['model.embed_tokens'], ['transformer.wte'], ['model.layers.1'], ['transformer.h.5.attn']),
  },
  { requiredKeys: [] },
);

describe('repeated blocks', () => {
  it('give exactly what tracing every block gives (random decoders and options, concrete inputs)', () => {
    fc.assert(
      fc.property(decoder, options, fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 40 }), (d, o, batch, seq) => {
        const model = fromHFConfig(configOf(d)) as ModuleLayer;
        expect(model.repeated?.count).toBe(d.layers);
        const opts = { ...o, input: [batch, seq] } as EstimateOptions;
        const run = (m: Layer) => {
          try {
            return estimate(m, opts);
          } catch (error) {
            return error as Error;
          }
        };
        const fast = run(model);
        const full = run(whole(model));
        if (full instanceof Error) {
          // The same refusal, the same way.
          expect(fast).toBeInstanceOf(Error);
          expect((fast as Error).message).toBe(full.message);
          return;
        }
        if (fast instanceof Error) throw fast;
        expect(figures(fast, {})).toEqual(figures(full, {}));
        expect(concretePeak(fast)).toEqual(concretePeak(full));
        // Read lazily, made from the full model: the same rows, timeline and programs.
        expect(fast.modules.length).toBe(full.modules.length);
        expect(fast.timeline.length).toBe(full.timeline.length);
      }),
      { numRuns: 60 },
    );
  });

  it('give exactly what tracing every block gives (symbolic batch and length, at many values)', () => {
    const B = sym('B');
    const S = sym('S', { max: 200 });
    fc.assert(
      fc.property(decoder, options, (d, o) => {
        const model = fromHFConfig(configOf(d)) as ModuleLayer;
        const opts = { ...o, input: [B, S] } as EstimateOptions;
        let full: Estimate;
        try {
          full = estimate(whole(model), opts);
        } catch (error) {
          expect(() => estimate(model, opts)).toThrow((error as Error).message);
          return;
        }
        const fast = estimate(model, opts);
        for (const env of [
          { B: 1, S: 1 },
          { B: 3, S: 17 },
          { B: 2, S: 200 },
          { B: 64, S: 128 },
        ]) {
          expect(figures(fast, env)).toEqual(figures(full, env));
          for (const name of ['first', 'steady', 'inference'] as const) {
            const step = fast.steps[name];
            if (step === undefined) continue;
            expect(stepPeakAt(step)(env)).toBe(programPeakAt(full.steps[name]!.program)(env));
          }
        }
        // Every candidate of the peak is the full step's event of that index, label and value.
        const program = (full.steps.steady ?? full.steps.inference)!.program;
        for (const c of fast.peak.candidates) {
          expect(program.events[c.event]).toEqual({ phase: c.phase, label: c.label });
          for (const env of [
            { B: 1, S: 1 },
            { B: 5, S: 33 },
          ])
            expect(at(c.bytes, env)).toBe(liveAt(program, c.event, env));
        }
      }),
      { numRuns: 25 },
    );
  });

  it('solve maxFitting to the same value', () => {
    const model = fromHFConfig({
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 160,
      num_hidden_layers: 12,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 500,
    }) as ModuleLayer;
    const options = { input: [sym('B'), 256], gpu: '2GB' } as const;
    expect(maxFitting(model, 'B', options)).toBe(maxFitting(whole(model), 'B', options));
  });

  it('relabel the peak to the block of the full model where it happens', () => {
    const model = fromHFConfig({
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 160,
      num_hidden_layers: 40,
      num_attention_heads: 4,
      num_key_value_heads: 4,
      vocab_size: 32,
    }) as ModuleLayer;
    // Inference: the highest moment is in a block's MLP, named as the whole trace names it.
    const fast = estimate(model, { input: [2, 512], mode: 'inference' });
    const full = estimate(whole(model), { input: [2, 512], mode: 'inference' });
    expect(fast.peak.label).toBe(full.peak.label);
    expect(fast.peak.label).toMatch(/^model\.layers\.\d+\./);
  });

  it('are not trusted when the model was changed after it declared them, or an option names one block', () => {
    const model = fromHFConfig({
      model_type: 'llama',
      hidden_size: 32,
      intermediate_size: 64,
      num_hidden_layers: 6,
      num_attention_heads: 2,
      num_key_value_heads: 2,
      vocab_size: 64,
    }) as ModuleLayer;
    const other = fromHFConfig({
      model_type: 'llama',
      hidden_size: 32,
      intermediate_size: 64,
      num_hidden_layers: 7,
      num_attention_heads: 2,
      num_key_value_heads: 2,
      vocab_size: 64,
    }) as ModuleLayer;
    // A body from another model under this one's declaration: traced whole, 7 layers counted.
    const swapped = { ...model, body: other.body };
    expect(estimate(swapped, { input: [1, 8] }).params.total).toBe(estimate(whole(other), { input: [1, 8] }).params.total);
    // Freezing block 5 (which a three-block trace does not have) changes what trains.
    const frozen = estimate(model, { input: [1, 8], freeze: ['model.layers.5'] });
    expect(frozen.params.trainable).toBe(estimate(whole(model), { input: [1, 8], freeze: ['model.layers.5'] }).params.trainable);
    expect(frozen.params.trainable).toBeLessThan(frozen.params.total);
  });
});
