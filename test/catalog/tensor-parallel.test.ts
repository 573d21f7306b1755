/**
 * Tensor and sequence parallelism of the Hugging Face decoders, per rank (PyTorch DTensor's
 * ColwiseParallel / RowwiseParallel plan, vocab-parallel embedding and LM head,
 * SequenceParallel norms, loss_parallel): hand-worked local shapes and counts, the laws TP and
 * SP obey, and the per-layer activations beside Korthikanti et al.'s formula.
 */
import fc from 'fast-check';
import { estimateTpFixture, loadTpFixtures } from '../helpers/tp-oracle.js';
import { describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/errors.js';
import {
  estimate,
  evaluate,
  fromHFConfig,
  gpt2Model,
  korthikanti,
  kvCache,
  llamaFamily,
  sym,
  type LlamaShape,
  type TensorParallelOptions,
} from '../../src/index.js';
import { chunkRows, localDecoderSizes } from '../../src/internals.js';

const SMALL: LlamaShape = {
  family: 'llama',
  hidden: 64,
  intermediate: 172,
  layers: 2,
  heads: 8,
  kvHeads: 4,
  headDim: 8,
  vocab: 256,
  tied: false,
  qkvBias: false,
  outBias: false,
  mlpBias: false,
  attentionDropout: 0,
};

/** Parameter shapes by key, from the traced IR. */
function paramShapes(model: ReturnType<typeof llamaFamily>): Record<string, readonly number[]> {
  const ir = estimate(model, { input: [1, 8], optimizer: null }).ir;
  const out: Record<string, readonly number[]> = {};
  for (const t of ir.tensors) if (t.role === 'param' && t.key !== undefined) out[t.key] = t.spec.shape as readonly number[];
  return out;
}

const num = (d: unknown): number => {
  if (typeof d !== 'number') throw new Error('expected a number');
  return d;
};

describe('tensor parallelism: one rank of a Llama', () => {
  it('local parameter counts, hand-worked at t = 1, 2, 4', () => {
    // Whole: embed 256·64 + 2 × (q 64·64 + k 64·32 + v 64·32 + o 64·64 + 3 × 64·172 + norms 2·64) + norm 64 + lm_head 256·64.
    const whole = 256 * 64 + 2 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 172 + 2 * 64) + 64 + 256 * 64;
    expect(whole).toBe(123_712);
    expect(estimate(llamaFamily(SMALL), { input: [1, 8] }).params.total).toBe(whole);
    // t = 2: 4 heads and 2 kv heads of 8, intermediate 86, vocabulary 128 rows; norms whole.
    const t2 = 128 * 64 + 2 * (64 * 32 + 64 * 16 + 64 * 16 + 32 * 64 + 3 * 64 * 86 + 2 * 64) + 64 + 128 * 64;
    expect(t2).toBe(62_016);
    expect(estimate(llamaFamily(SMALL, { tensorParallel: { size: 2 } }), { input: [1, 8], parallel: { engine: 'ddp', dp: 1, tp: 2 } }).params.total).toBe(t2);
    // t = 4: 2 heads, 1 kv head, intermediate 43, 64 rows.
    const t4 = 64 * 64 + 2 * (64 * 16 + 64 * 8 + 64 * 8 + 16 * 64 + 3 * 64 * 43 + 2 * 64) + 64 + 64 * 64;
    expect(t4).toBe(31_168);
    expect(estimate(llamaFamily(SMALL, { tensorParallel: { size: 4 } }), { input: [1, 8] }).params.total).toBe(t4);
    // The ranks together hold the model once plus t − 1 more copies of the replicated norms (2·64 per layer + 64).
    const norms = 2 * 2 * 64 + 64;
    expect(2 * t2).toBe(whole + norms);
    expect(4 * t4).toBe(whole + 3 * norms);
  });

  it('local parameter shapes at t = 4: column-parallel rows, row-parallel columns, vocab-parallel tables', () => {
    const shapes = paramShapes(llamaFamily(SMALL, { tensorParallel: { size: 4 } }));
    expect(shapes['model.embed_tokens.weight']).toEqual([64, 64]);
    expect(shapes['model.layers.0.self_attn.q_proj.weight']).toEqual([16, 64]);
    expect(shapes['model.layers.0.self_attn.k_proj.weight']).toEqual([8, 64]);
    expect(shapes['model.layers.0.self_attn.v_proj.weight']).toEqual([8, 64]);
    expect(shapes['model.layers.0.self_attn.o_proj.weight']).toEqual([64, 16]);
    expect(shapes['model.layers.0.mlp.gate_proj.weight']).toEqual([43, 64]);
    expect(shapes['model.layers.0.mlp.up_proj.weight']).toEqual([43, 64]);
    expect(shapes['model.layers.0.mlp.down_proj.weight']).toEqual([64, 43]);
    expect(shapes['model.layers.0.input_layernorm.weight']).toEqual([64]);
    expect(shapes['model.norm.weight']).toEqual([64]);
    expect(shapes['lm_head.weight']).toEqual([64, 64]);
  });

  it('an uneven vocabulary shards as torch.chunk: ⌈n/t⌉ rows, the last rank fewer; an uneven MLP is an error', () => {
    expect([0, 1, 2, 3].map((r) => chunkRows(250, 4, r))).toEqual([63, 63, 63, 61]);
    const shape = { ...SMALL, vocab: 250 };
    const counts = [0, 1, 2, 3].map((rank) => estimate(llamaFamily(shape, { tensorParallel: { size: 4, rank } }), { input: [1, 8] }).params.total);
    const whole = estimate(llamaFamily(shape), { input: [1, 8] }).params.total;
    expect(counts.reduce((a, b) => a + b, 0)).toBe(whole + 3 * (2 * 2 * 64 + 64));
    expect(counts[0]).toBeGreaterThan(counts[3]!);
    const shapes = paramShapes(llamaFamily(shape, { tensorParallel: { size: 4, rank: 3 } }));
    expect(shapes['model.embed_tokens.weight']).toEqual([61, 64]);
    expect(shapes['lm_head.weight']).toEqual([61, 64]);
    // RowwiseParallel's from_local(Shard(-1)) assumes even shards: DTensor rejects 170 / 4.
    const mlp = errorOf(() => llamaFamily({ ...SMALL, intermediate: 170 }, { tensorParallel: { size: 4 } }));
    expect(mlp.issues[0]!.path).toEqual(['options', 'tensorParallel', 'size']);
  });

  it('a tied config: parallelize_module breaks the tie (two local tables) unless re-tied (one)', () => {
    const broken = llamaFamily({ ...SMALL, tied: true }, { tensorParallel: { size: 2 } });
    const shapes = paramShapes(broken);
    expect(shapes['model.embed_tokens.weight']).toEqual([128, 64]);
    expect(shapes['lm_head.weight']).toEqual([128, 64]);
    expect(estimate(broken, { input: [1, 8] }).params.total).toBe(62_016);
    expect(broken.meta?.tensorParallel?.tied).toBe(false);
    const retied = llamaFamily({ ...SMALL, tied: true }, { tensorParallel: { size: 2, retie: true } });
    expect(paramShapes(retied)['lm_head.weight']).toBeUndefined();
    expect(estimate(retied, { input: [1, 8] }).params.total).toBe(62_016 - 128 * 64);
    expect(retied.meta?.tensorParallel?.tied).toBe(true);
    // The broken tie's embedding gradient is the whole table; the re-tied one's the local rows.
    const grads = (m: typeof broken) => num(estimate(m, { input: [1, 8], optimizer: 'sgd' }).bytes.gradients);
    // broken: the whole embedding table and the head's rows; re-tied: the shared rows once.
    expect(grads(broken) - grads(retied)).toBe(4 * (256 * 64 + 128 * 64 - 128 * 64));
  });

  it('heads that do not divide, GPT-2, and a mismatched parallel.tp are VramErrors with paths', () => {
    const heads = errorOf(() => llamaFamily({ ...SMALL, heads: 6, kvHeads: 6, headDim: 8, hidden: 48 }, { tensorParallel: { size: 4 } }));
    expect(heads.issues.map((i) => i.path.join('.'))).toContain('options.tensorParallel.size');
    const kv = errorOf(() =>
      fromHFConfig(
        { model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1, num_attention_heads: 8, num_key_value_heads: 2, vocab_size: 256 },
        { tensorParallel: { size: 4 } },
      ),
    );
    expect(kv.issues[0]!.message).toMatch(/key\/value heads/);
    const rank = errorOf(() => llamaFamily(SMALL, { tensorParallel: { size: 2, rank: 2 } }));
    expect(rank.issues[0]!.path).toEqual(['options', 'tensorParallel', 'rank']);
    const gpt2 = errorOf(() => fromHFConfig({ model_type: 'gpt2', n_embd: 64, n_layer: 1, n_head: 4, vocab_size: 256 }, { tensorParallel: { size: 2 } }));
    expect(gpt2.issues[0]!.code).toBe('not-modelled');
    expect(gpt2.issues[0]!.path).toEqual(['options', 'tensorParallel']);
    expect(
      errorOf(() =>
        gpt2Model(
          {
            hidden: 64,
            layers: 1,
            heads: 4,
            inner: 256,
            vocab: 256,
            positions: 32,
            attnDropout: 0,
            residDropout: 0,
            embdDropout: 0,
            tied: true,
            activation: 'gelu_new',
          },
          { tensorParallel: { size: 2 } },
        ),
      ).issues[0]!.code,
    ).toBe('not-modelled');
    const built2 = llamaFamily(SMALL, { tensorParallel: { size: 2 } });
    const mismatch = errorOf(() => estimate(built2, { input: [1, 8], parallel: { engine: 'fsdp2', dp: 2, tp: 4 } }));
    expect(mismatch.issues[0]!.path).toEqual(['parallel', 'tp']);
    const whole = errorOf(() => estimate(llamaFamily(SMALL), { input: [1, 8], parallel: { engine: 'fsdp2', dp: 2, tp: 2 } }));
    expect(whole.issues[0]!.path).toEqual(['parallel', 'tp']);
    expect(whole.issues[0]!.message).toMatch(/tensorParallel/);
    const unknown = errorOf(() => llamaFamily(SMALL, { tensorParallel: { size: 2, sequence: true } as unknown as TensorParallelOptions }));
    expect(unknown.issues[0]!.path).toEqual(['options', 'tensorParallel', 'sequence']);
    // Built with TP and estimated with or without parallel.tp: the same rank.
    const a = estimate(built2, { input: [2, 8] });
    const b = estimate(built2, { input: [2, 8], parallel: { engine: 'ddp', dp: 1, tp: 2 } });
    expect(b.params.total).toBe(a.params.total);
    expect(b.bytes.activations).toBe(a.bytes.activations);
  });

  it('records what it was built for as plain data', () => {
    const model = fromHFConfig(
      { model_type: 'qwen2', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 300 },
      { tensorParallel: { size: 2, sequenceParallel: true } },
    );
    expect(model.meta?.tensorParallel).toEqual({ size: 2, rank: 0, sequenceParallel: true, lossParallel: false, tied: false });
    expect(model.meta?.heads).toBe(4);
    expect(JSON.parse(JSON.stringify(model.meta))).toEqual(model.meta);
  });

  it('sequence parallelism needs the sequence to divide by t', () => {
    const model = llamaFamily(SMALL, { tensorParallel: { size: 4, sequenceParallel: true } });
    expect(errorOf(() => estimate(model, { input: [1, 10] })).issues[0]!.message).toMatch(/tensor-parallel size/);
    expect(num(estimate(model, { input: [1, 12] }).bytes.activations)).toBeGreaterThan(0);
  });

  it('symbolic batch and sequence (TP, loss parallel) evaluate to the concrete figures; SP needs a concrete sequence', () => {
    for (const tp of [{ size: 2 }, { size: 2, lossParallel: true }]) {
      const model = llamaFamily(SMALL, { tensorParallel: tp });
      const symbolic = estimate(model, { input: [sym('B'), sym('S')], precision: 'bf16', timeline: false });
      const concrete = estimate(model, { input: [3, 20], precision: 'bf16', timeline: false });
      expect(evaluate(symbolic.bytes.activations, { B: 3, S: 20 })).toBe(concrete.bytes.activations);
      expect(evaluate(symbolic.bytes.peak, { B: 3, S: 20 })).toBe(concrete.bytes.peak);
    }
    const sp = llamaFamily(SMALL, { tensorParallel: { size: 2, sequenceParallel: true } });
    expect(errorOf(() => estimate(sp, { input: [1, sym('S')] })).issues[0]!.code).toBe('not-modelled');
    const symbolicBatch = estimate(sp, { input: [sym('B'), 16], precision: 'bf16', timeline: false });
    expect(evaluate(symbolicBatch.bytes.peak, { B: 3 })).toBe(estimate(sp, { input: [3, 16], precision: 'bf16', timeline: false }).bytes.peak);
  });

  it('inference and the KV cache: a rank caches its own kv heads', () => {
    const whole = llamaFamily(SMALL);
    const rank = llamaFamily(SMALL, { tensorParallel: { size: 4 } });
    expect(kvCache(rank, { batch: 2, seq: 100 })).toBe(kvCache(whole, { batch: 2, seq: 100 }) / 4);
    expect(num(estimate(rank, { input: [2, 16], mode: 'inference' }).bytes.peak)).toBeLessThan(
      num(estimate(whole, { input: [2, 16], mode: 'inference' }).bytes.peak),
    );
  });

  it('the local sizes of a Qwen2.5-0.5B-like config at t = 2', () => {
    expect(localDecoderSizes({ heads: 14, kvHeads: 2, intermediate: 4864, vocab: 151936 }, { size: 2 })).toEqual({
      heads: 7,
      kvHeads: 1,
      intermediate: 2432,
      vocab: 75968,
    });
  });
});

/** Small decoder configs whose heads and kv heads divide by t. */
const config = fc.record({
  family: fc.constantFrom('llama', 'qwen2', 'mistral') as fc.Arbitrary<'llama' | 'qwen2' | 'mistral'>,
  t: fc.constantFrom(2, 4),
  kvPerRank: fc.integer({ min: 1, max: 2 }),
  groups: fc.integer({ min: 1, max: 3 }),
  headDim: fc.constantFrom(8, 16),
  intermediatePerRank: fc.integer({ min: 2, max: 50 }),
  vocab: fc.integer({ min: 16, max: 700 }),
  layers: fc.integer({ min: 1, max: 5 }),
  tied: fc.boolean(),
  attention: fc.constantFrom('eager', 'sdpa', 'flash') as fc.Arbitrary<'eager' | 'sdpa' | 'flash'>,
  batch: fc.integer({ min: 1, max: 3 }),
  seqPerRank: fc.integer({ min: 1, max: 24 }),
  precision: fc.constantFrom('bf16', 'fp32', 'amp-bf16') as fc.Arbitrary<'bf16' | 'fp32' | 'amp-bf16'>,
  lossParallel: fc.boolean(),
});
type Config = typeof config extends fc.Arbitrary<infer C> ? C : never;

function shapeOf(c: Config): LlamaShape {
  const kvHeads = c.kvPerRank * c.t;
  const heads = kvHeads * c.groups;
  return {
    family: c.family,
    hidden: heads * c.headDim,
    intermediate: c.intermediatePerRank * c.t,
    layers: c.layers,
    heads,
    kvHeads,
    headDim: c.headDim,
    vocab: c.vocab,
    tied: c.tied,
    qkvBias: c.family === 'qwen2',
    outBias: false,
    mlpBias: false,
    attentionDropout: 0,
  };
}

function run(c: Config, tp: TensorParallelOptions | undefined) {
  const model = llamaFamily(shapeOf(c), { attention: c.attention, ...(tp !== undefined ? { tensorParallel: tp } : {}) });
  return estimate(model, { input: [c.batch, c.seqPerRank * c.t], precision: c.precision, timeline: false });
}

describe('tensor-parallel laws (property-based)', () => {
  it("TP never raises a rank's saved activations or its peak", () => {
    fc.assert(
      fc.property(config, (c) => {
        const whole = run(c, undefined);
        const rank = run(c, { size: c.t, lossParallel: c.lossParallel });
        expect(num(rank.bytes.activations)).toBeLessThanOrEqual(num(whole.bytes.activations));
        expect(num(rank.bytes.peak)).toBeLessThanOrEqual(num(whole.bytes.peak));
      }),
      { numRuns: 25 },
    );
  });

  it('the ranks hold the whole model once plus t − 1 more copies of the replicated norms (and an untied head for a tie parallelize_module broke)', () => {
    fc.assert(
      fc.property(config, fc.boolean(), (c, retie) => {
        const shape = shapeOf(c);
        const whole = run(c, undefined).params.total;
        let sum = 0;
        for (let rank = 0; rank < c.t; rank += 1) {
          if (chunkRows(shape.vocab, c.t, rank) === 0) return;
          sum += estimate(llamaFamily(shape, { tensorParallel: { size: c.t, rank, retie } }), { input: [1, 4], optimizer: null, timeline: false }).params.total;
        }
        const norms = (2 * shape.layers + 1) * shape.hidden;
        const untied = shape.tied && !retie ? shape.vocab * shape.hidden : 0;
        expect(sum).toBe(whole + (c.t - 1) * norms + untied);
      }),
      { numRuns: 20 },
    );
  });

  it('sequence parallelism never raises the saved activations of TP alone', () => {
    fc.assert(
      fc.property(config, (c) => {
        const tp = run(c, { size: c.t, lossParallel: c.lossParallel });
        const sp = run(c, { size: c.t, lossParallel: c.lossParallel, sequenceParallel: true });
        expect(num(sp.bytes.activations)).toBeLessThanOrEqual(num(tp.bytes.activations));
      }),
      { numRuns: 25 },
    );
  });

  it('loss parallelism never raises the saved activations', () => {
    fc.assert(
      fc.property(config, (c) => {
        const gathered = run(c, { size: c.t });
        const sharded = run(c, { size: c.t, lossParallel: true });
        expect(num(sharded.bytes.activations)).toBeLessThanOrEqual(num(gathered.bytes.activations));
      }),
      { numRuns: 15 },
    );
  });
});

describe('per-layer activations beside Korthikanti et al. (eager, bf16, MHA, no dropout)', () => {
  // h = 256, a = 8 heads of 32, F = 2h (SwiGLU), b = 2, s = 64: 5as/h = 10.
  const [h, a, d, F, b, s] = [256, 8, 32, 512, 2, 64];
  const sbh = s * b * h;
  const shape = (layers: number): LlamaShape => ({
    family: 'llama',
    hidden: h,
    intermediate: F,
    layers,
    heads: a,
    kvHeads: a,
    headDim: d,
    vocab: 512,
    tied: false,
    qkvBias: false,
    outBias: false,
    mlpBias: false,
    attentionDropout: 0,
  });
  const perLayer = (t: number, sequenceParallel: boolean): number => {
    const at = (layers: number) =>
      num(
        estimate(llamaFamily(shape(layers), { attention: 'eager', useCache: false, ...(t > 1 ? { tensorParallel: { size: t, sequenceParallel } } : {}) }), {
          input: [b, s],
          precision: 'bf16',
          optimizer: null,
          timeline: false,
        }).bytes.activations,
      );
    return at(5) - at(4);
  };

  it('TP: R + P/t with R = 16sbh + 8sb + 8 (replicated) and P = 8sbh + 6as²b + 8sbF (sharded)', () => {
    // R: two RMSNorms keep their float32 input (4sbh) and bf16 normed output (2sbh) and a
    // float32 rsqrt (4sb); the attention and MLP inputs (2sbh each), saved by the column-parallel
    // projections; 8 bytes of scalars. Megatron's 10sbh: LayerNorm inputs 4sbh, the two inputs
    // 4sbh, two dropout masks 2sbh.
    const R = 16 * sbh + 8 * s * b + 8;
    // P: q and k (the matmul operands) 4sbh, v 2sbh, o_proj's input 2sbh; float32 softmax 4as²b
    // and its bf16 copy 2as²b (Korthikanti: 5as²b with the dropout mask); SwiGLU gate, SiLU, up
    // and product 2sbF each (Korthikanti's GELU MLP of 4h: 18sbh with its dropout mask).
    const P = 8 * sbh + 6 * a * s * s * b + 8 * s * b * F;
    for (const t of [1, 2, 4]) {
      expect(perLayer(t, false)).toBe(R + P / t);
      const megatron = num(korthikanti({ seq: s, batch: b, hidden: h, heads: a, ...(t > 1 ? { tensorParallel: t } : {}) }));
      // Korthikanti's layer here: sbh(10 + 24/t + 10/t); Hugging Face's SwiGLU with F = 2h and its float32 norms keep more.
      expect(megatron).toBe(sbh * (10 + 24 / t + (5 * a * s) / (h * t)));
      expect(perLayer(t, false)).toBeGreaterThan(megatron);
    }
  });

  it('SP: the norms shrink to s/t but the two gathered inputs stay whole: sbh(4 + 12/t) + 8sb/t + 8 + P/t', () => {
    // PyTorch DTensor SP feeds the all-gathered tensor to the column-parallel mm, which saves it
    // (Megatron's own SP linear saves the shard and re-gathers in backward: 34/t).
    const P = 8 * sbh + 6 * a * s * s * b + 8 * s * b * F;
    for (const t of [2, 4]) {
      expect(perLayer(t, true)).toBe(4 * sbh + (12 * sbh) / t + (8 * s * b) / t + 8 + P / t);
      const megatron = num(korthikanti({ seq: s, batch: b, hidden: h, heads: a, tensorParallel: t, sequenceParallel: true }));
      expect(megatron).toBe(sbh * (34 / t + (5 * a * s) / (h * t)));
    }
  });
});

describe('measured: transformers 4.40.2 Llama under DTensor TP/SP on PyTorch 2.13 CPU (test/fixtures/tp-cpu, tools/oracle/tp_cpu.py)', () => {
  const fixtures = loadTpFixtures();

  it('has the cases', () => {
    expect(fixtures.map((f) => f.id)).toEqual([
      'tp1',
      'tp2',
      'tp2_lp',
      'tp2_r1_uneven_vocab',
      'tp2_sp',
      'tp2_sp_lp',
      'tp2_tied_sp',
      'tp2_tied_sp_retied',
      'tp4_mha_b1',
      'tp4_mha_b1_adam',
      'tp4_mha_b1_sp',
    ]);
  });

  for (const fx of fixtures) {
    it(`${fx.id}: local parameters, gradients and optimizer state exact, saved bytes within 16 B, the step's peak within 0.1%`, () => {
      const c = fx.case;
      const measured = fx.train[c.optimizer]!;
      const r = estimateTpFixture(fx);
      expect(r.params.total).toBe(fx.params.local);
      expect(num(r.bytes.parameters)).toBe(measured.paramBytes);
      // The vocab-parallel embedding's gradient is Replicate, the whole [V, h] on every rank,
      // unless the LM head shares the table (re-tied): then its Shard(0) gradient comes first.
      const embed = fx.paramTable.find((p) => p.name === 'model.embed_tokens.weight')!;
      expect(embed.grad![0]).toBe(c.tp > 1 && c.retie === true ? embed.param[0] : c.config.vocab_size);
      expect(num(r.bytes.gradients)).toBe(measured.gradBytes);
      expect(num(r.bytes.optimizer)).toBe(measured.optimizerStateBytes);
      // 16 B: a difference the whole model (tp1) has too.
      expect(Math.abs(num(r.bytes.activations) - fx.savedBytes)).toBeLessThanOrEqual(16);
      expect(Math.abs(num(r.bytes.peak) - measured.livePeakBytes) / measured.livePeakBytes).toBeLessThan(0.001);
    });
  }
});
