/**
 * DeepSpeed ZeRO (src/parallel/engines/deepspeed/): model states worked by hand from DeepSpeed's
 * rules (deepspeedai/DeepSpeed edaa7221: stage_1_and_2.py's 2N-aligned flat buffer and fp32
 * master clone, grads_in_partition; stage3.py's ⌈n/N⌉ partitions, persistent parameters), and the
 * laws: stages 1/2 hold at most one GPU's states (fp32, where both keep the same numerics), the
 * optimizer elements over all ranks are the flat buffer's (once each, up to DeepSpeed's padding),
 * ZeRO-3 shards parameters and gradients to Σ⌈n/N⌉, and a decoder traced with reduced blocks
 * gives the whole trace's figures.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { estimate, fromHFConfig, llm, linear, relu, seq, type Estimate, type Layer } from '../../src/index.js';
import { flatLayout } from '../../src/parallel/engines/deepspeed/zero12.js';
import { seqFromSpecs } from '../helpers/layer-spec.js';
import { randomModel } from '../helpers/random-models.js';
import { smallLlama, whole } from '../helpers/repeated.js';

type Stage = 1 | 2 | 3;
const ds = (model: Layer, input: readonly number[], zero: Stage, dp: number, rank = 0, extra: object = {}, optimizer: 'adam' | 'sgd_momentum' = 'adam') =>
  estimate(model, { input, optimizer, timeline: false, parallel: { engine: 'deepspeed', dp, rank, zero, ...extra } }) as Estimate<number>;
const states = (r: Estimate<number>) => r.bytes.parameters + r.bytes.gradients + r.bytes.optimizer;
const sizes = (r: Estimate<number>) => r.ir.tensors.filter((t) => t.role === 'param').map((t) => (t.spec.shape as number[]).reduce((a, b) => a * b, 1));

describe('flatLayout (stages 1/2: the param group flattened, aligned to 2N, cut in N partitions)', () => {
  it('82 elements over 2 ranks: aligned to 84, partitions of 42, a parameter straddling a start counts whole', () => {
    expect(flatLayout([48, 6, 24, 4], 2, 0)).toMatchObject({
      aligned: 84,
      partition: 42,
      offsets: [0, 48, 54, 78],
      inPartition: [true, false, false, false],
      gradPartition: 48,
      slices: [42],
      pad: 0,
    });
    expect(flatLayout([48, 6, 24, 4], 2, 1)).toMatchObject({ inPartition: [true, true, true, true], gradPartition: 82, slices: [6, 6, 24, 4], pad: 2 });
  });
});

describe('DeepSpeed ZeRO model states, by hand', () => {
  // Linear(8→6) then Linear(6→4), fp32: 48 + 6 + 24 + 4 = 82 elements.
  const mlp = seq(linear({ out: 6 }), relu(), linear({ out: 4 }));
  const input = [2, 8];

  it('stages 1 and 2: the whole 2N-aligned flat buffer, an fp32 master clone of the partition, Adam on it, the gradients touching it', () => {
    for (const zero of [1, 2] as const) {
      const [r0, r1] = [0, 1].map((rank) => ds(mlp, input, zero, 2, rank));
      // 84 aligned elements × 4 B; master 42 × 4 plus exp_avg and exp_avg_sq 2 × 42 × 4.
      expect([r0!.bytes.parameters, r0!.bytes.optimizer]).toEqual([336, 504]);
      expect([r1!.bytes.parameters, r1!.bytes.optimizer]).toEqual([336, 504]);
      // Rank 0's partition [0, 42) holds fc1.weight (48); rank 1's [42, 84) all four (82).
      expect([r0!.bytes.gradients, r1!.bytes.gradients]).toEqual([192, 328]);
    }
  });

  it('stage 3: each parameter cut to ⌈n/N⌉; small parameters stay gathered (persistence threshold 1e5 by default)', () => {
    // q = 24 + 3 + 12 + 2 = 41 elements; an fp32 clone as the master even for an fp32 model
    // (stage3.py:1112-1113 compares a torch.device with a string: measured, test/fixtures/deepspeed-cpu).
    const sharded = ds(mlp, input, 3, 2, 0, { deepspeed: { paramPersistenceThreshold: 0 } });
    expect([sharded.bytes.parameters, sharded.bytes.gradients, sharded.bytes.optimizer]).toEqual([164, 164, 164 + 328]);
    // Every parameter ≤ 1e5 elements: each also kept gathered, padded to q·N (48 + 6 + 24 + 4).
    const persistent = ds(mlp, input, 3, 2, 1);
    expect(persistent.bytes.parameters).toBe(164 + 328);
  });

  it('a bf16 Qwen2.5-0.5B on 8 ranks (494,032,768 parameters)', () => {
    const model = llm('qwen2.5-0.5b');
    const z2 = ds(model, [1, 128], 2, 8, 0);
    const z2last = ds(model, [1, 128], 2, 8, 7);
    const z3 = ds(model, [1, 128], 3, 8, 0);
    // Stage 2: A = 494,032,768 (already a multiple of 16), P = 61,754,096: parameters 2A, master
    // and Adam 12P; rank 0's partition starts with the 136,134,656-element embedding, rank 7's
    // gradients are the 64,010,368 elements of the parameters touching its last eighth.
    expect([z2.bytes.parameters, z2.bytes.optimizer, z2.bytes.gradients, z2last.bytes.gradients]).toEqual([988_065_536, 741_049_152, 272_269_312, 128_020_736]);
    // Stage 3: Q = Σ⌈n/8⌉ = 61,754,096 in bf16, plus the biases and norms (≤ 1e5) gathered whole.
    expect([z3.bytes.parameters, z3.bytes.gradients, z3.bytes.optimizer]).toEqual([123_651_296, 123_508_192, 741_049_152]);
  });

  it('rejects what it cannot honour, each with its path', () => {
    const issue = (parallel: object) => {
      try {
        estimate(mlp, { input, parallel } as never);
      } catch (error) {
        return (error as { issues: readonly { path: readonly (string | number)[]; code: string }[] }).issues[0];
      }
      return undefined;
    };
    expect(issue({ engine: 'deepspeed', dp: 2 })).toMatchObject({ path: ['parallel', 'zero'], code: 'bad-option' });
    expect(issue({ engine: 'deepspeed', dp: 2, zero: 0 })).toMatchObject({ path: ['parallel', 'zero'], code: 'not-modelled' });
    expect(issue({ engine: 'fsdp2', dp: 2, zero: 3 })).toMatchObject({ path: ['parallel', 'zero'], code: 'bad-option' });
    expect(issue({ engine: 'ddp', dp: 2, deepspeed: { reduceBucketSize: 100 } })).toMatchObject({ path: ['parallel', 'deepspeed'] });
    expect(issue({ engine: 'deepspeed', dp: 2, zero: 2, deepspeed: { reduceBucketSize: -1 } })).toMatchObject({
      path: ['parallel', 'deepspeed', 'reduceBucketSize'],
    });
    expect(issue({ engine: 'deepspeed', dp: 2, zero: 2, deepspeed: { reduceBucketsize: 1 } })).toMatchObject({
      path: ['parallel', 'deepspeed', 'reduceBucketsize'],
    });
    expect(() => estimate(mlp, { input, optimizer: null, parallel: { engine: 'deepspeed', dp: 2, zero: 2 } })).toThrowError(
      expect.objectContaining({ issues: [expect.objectContaining({ path: ['optimizer'] })] }),
    );
  });
});

describe('DeepSpeed ZeRO laws', () => {
  it("stages 1/2 hold at most one GPU's model states (up to the 2N alignment), ZeRO-3 (12 + k)·Σ⌈n/N⌉, and ZeRO-3's parameters never exceed ZeRO-2's (fp32)", () => {
    fc.assert(
      fc.property(randomModel, fc.integer({ min: 2, max: 8 }), fc.constantFrom('adam', 'sgd_momentum' as const), (m, dp, optimizer) => {
        const model = seqFromSpecs(m.layers);
        const one = estimate(model, { input: m.input, optimizer, timeline: false }) as Estimate<number>;
        const psi = sizes(one).reduce((a, b) => a + b, 0);
        fc.pre(psi > 0); // DeepSpeed needs a parameter to partition
        // Stages 1/2 hold the flat buffer aligned to 2N (A elements) and an fp32 master clone of the
        // partition: 4A + 4G + (4 + k)A/N with G ≤ Ψ, within one GPU's (8 + k)Ψ scaled by A/Ψ.
        const aligned = Math.ceil(psi / (2 * dp)) * 2 * dp;
        const ranks = [1, 2, 3].map((zero) =>
          ds(model, m.input, zero as Stage, dp, dp - 1, zero === 3 ? { deepspeed: { paramPersistenceThreshold: 0 } } : {}, optimizer),
        );
        expect(states(ranks[0]!)).toBeLessThanOrEqual((states(one) * aligned) / psi);
        expect(states(ranks[1]!)).toBeLessThanOrEqual((states(one) * aligned) / psi);
        // Stage 3: 4Q + 4Q + (4 + k)Q with Q = Σ⌈n/N⌉ (k: one GPU's optimizer bytes per element):
        // each element's parameter, gradient, fp32 master and state once over the ranks, up to padding.
        const q = sizes(one).reduce((s, n) => s + Math.ceil(n / dp), 0);
        expect(states(ranks[2]!)).toBe((12 + one.bytes.optimizer / psi) * q);
        expect(ranks[2]!.bytes.parameters).toBeLessThanOrEqual(ranks[1]!.bytes.parameters);
      }),
      { numRuns: 30 },
    );
  });

  it('over all ranks the optimizer holds the flat buffer once: (4 + k)·A for stages 1/2, (4 + k)·Σ⌈n/N⌉·N for ZeRO-3 (fp32 master and state)', () => {
    fc.assert(
      fc.property(randomModel, fc.integer({ min: 2, max: 6 }), fc.constantFrom<Stage>(1, 2, 3), (m, dp, zero) => {
        const model = seqFromSpecs(m.layers);
        const one = estimate(model, { input: m.input, timeline: false }) as Estimate<number>;
        const numels = sizes(one);
        const psi = numels.reduce((a, b) => a + b, 0);
        fc.pre(psi > 0);
        const perElement = one.bytes.optimizer / psi; // Adam: 8 B
        const ranks = Array.from({ length: dp }, (_, rank) => ds(model, m.input, zero, dp, rank, { deepspeed: { paramPersistenceThreshold: 0 } }));
        const total = ranks.reduce((s, r) => s + r.bytes.optimizer, 0);
        const padded = zero === 3 ? numels.reduce((s, n) => s + Math.ceil(n / dp) * dp, 0) : Math.ceil(psi / (2 * dp)) * 2 * dp;
        expect(total).toBe((4 + perElement) * padded);
        if (zero === 3) {
          // Parameters and gradients sharded to Σ⌈n/N⌉ on every rank: each element once, up to N − 1 padding per tensor.
          const q = numels.reduce((s, n) => s + Math.ceil(n / dp), 0);
          for (const r of ranks) expect([r.bytes.parameters, r.bytes.gradients]).toEqual([4 * q, 4 * q]);
          expect(q * dp - psi).toBeLessThan(numels.length * dp);
        }
      }),
      { numRuns: 30 },
    );
  });

  it('a decoder traced with three layers gives the whole trace’s figures (DeepSpeed reads the whole model)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 4, max: 6 }),
        fc.constantFrom<Stage>(1, 2, 3),
        fc.integer({ min: 2, max: 8 }),
        fc.integer({ min: 1, max: 2 }),
        (layers, zero, dp, microBatches) => {
          const model = smallLlama(layers);
          const options = { input: [2, 33], microBatches, timeline: false, parallel: { engine: 'deepspeed', dp, zero, rank: dp - 1 } } as const;
          const fast = estimate(model, options);
          const full = estimate(whole(model), options);
          expect(fast.bytes).toEqual(full.bytes);
          expect([fast.peak.label, fast.peak.phase]).toEqual([full.peak.label, full.peak.phase]);
        },
      ),
      { numRuns: 12 },
    );
  });

  it('ZeRO-3 keeps a reduce bucket of reduce_bucket_size elements for the whole run: a smaller bucket lowers the peak by that much at most', () => {
    const model = fromHFConfig({
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 160,
      num_hidden_layers: 4,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 300,
      torch_dtype: 'bfloat16',
    });
    const big = ds(model, [2, 33], 3, 4, 0, { deepspeed: { reduceBucketSize: 1_000_000 } });
    const small = ds(model, [2, 33], 3, 4, 0, { deepspeed: { reduceBucketSize: 10_000 } });
    expect(big.bytes.peak).toBeGreaterThan(small.bytes.peak);
    expect(big.bytes.peak - small.bytes.peak).toBeLessThanOrEqual(2 * (1_000_000 - 10_000));
  });
});
