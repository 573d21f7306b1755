/**
 * Offloading to host memory (`parallel.offload`): DeepSpeed ZeRO-Offload (`offload_optimizer`
 * at stages 1-3, `offload_param` at stage 3) and FSDP2's `CPUOffloadPolicy`. The rules are read
 * from the engines' sources (DeepSpeed edaa7221, PyTorch 2.13's _fully_shard; notes in
 * /work/notes/offload.md), not measured: these tests work the figures out by hand, hold them to
 * DeepSpeed's own estimators where those apply, and check the laws: offloading never raises a
 * rank's GPU model states, GPU plus host keep at least the parameters and optimizer state the
 * rank held without offloading, and the GPU peak rises only by the buffer stages 1/2 add.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  deepspeedZero2,
  deepspeedZero3,
  estimate,
  fromHFConfig,
  linear,
  relu,
  seq,
  type Estimate,
  type HostBytes,
  type Layer,
  type ParallelPlan,
} from '../../src/index.js';
import { seqFromSpecs } from '../helpers/layer-spec.js';
import { randomModel } from '../helpers/random-models.js';
import { smallLlama, whole } from '../helpers/repeated.js';

type Options = Parameters<typeof estimate>[1];
const run = (model: Layer, input: readonly number[], parallel: ParallelPlan, extra: Partial<Options> = {}) =>
  estimate(model, { input, timeline: false, ...extra, parallel } as Options) as Estimate<number>;
const gpu = (r: Estimate<number>) => [r.bytes.parameters, r.bytes.gradients, r.bytes.optimizer];
const host = (r: Estimate<number>) => r.host as HostBytes<number>;
const states = (r: Estimate<number>) => r.bytes.parameters + r.bytes.gradients + r.bytes.optimizer;
const issue = (model: Layer, options: object) => {
  try {
    estimate(model, { input: [2, 8], ...options } as Options);
  } catch (error) {
    return (error as { issues: readonly { path: readonly (string | number)[]; code: string }[] }).issues[0];
  }
  return undefined;
};

// Linear(8→6), ReLU, Linear(6→4), fp32: fc1 48 + 6, fc2 24 + 4 = 82 elements, the largest 48.
const mlp = seq(linear({ out: 6 }), relu(), linear({ out: 4 }));
const input = [2, 8];
const both = { optimizer: true, parameters: true } as const;

describe('DeepSpeed ZeRO-Offload, by hand', () => {
  it('stages 1/2 offload_optimizer: the bit16 flat buffer stays, master, Adam state and the fp32 gradient partition go to the host', () => {
    for (const zero of [1, 2] as const) {
      const [r0, r1] = [0, 1].map((rank) => run(mlp, input, { engine: 'deepspeed', dp: 2, rank, zero, offload: { optimizer: true } }));
      // GPU: the 84-element aligned flat buffer (336 B); no grads_in_partition, no master, no state.
      expect(gpu(r0!)).toEqual([336, 0, 0]);
      expect(gpu(r1!)).toEqual([336, 0, 0]);
      // Host, P = 42: fp32 gradient partition 4P = 168; master 4P + DeepSpeedCPUAdam's exp_avg and
      // exp_avg_sq 8P = 504; staging: the bit16 copy-back buffer 4P = 168 plus the gradient
      // transfer buffer of the largest parameter, 48 × 4 = 192.
      for (const r of [r0!, r1!]) expect(host(r)).toEqual({ parameters: 0, gradients: 168, optimizer: 504, staging: 360 });
    }
  });

  it('stages 1/2 with accumulation: a host buffer per in-partition parameter, whole', () => {
    const [r0, r1] = [0, 1].map((rank) => run(mlp, input, { engine: 'deepspeed', dp: 2, rank, zero: 2, offload: { optimizer: true } }, { microBatches: 2 }));
    // accumulated_grads_in_cpu: rank 0 touches fc1.weight (48), rank 1 all four (82), model dtype.
    expect([host(r0!).gradients, host(r1!).gradients]).toEqual([168 + 4 * 48, 168 + 4 * 82]);
  });

  it('stages 1/2 in bf16: the master and the gradient partition in fp32 on the host, the staging buffers in bf16', () => {
    const r = run(mlp, input, { engine: 'deepspeed', dp: 2, zero: 2, offload: { optimizer: true } }, { dtype: 'bfloat16' });
    expect(gpu(r)).toEqual([168, 0, 0]);
    expect(host(r)).toEqual({ parameters: 0, gradients: 168, optimizer: 504, staging: 2 * 42 + 2 * 48 });
  });

  it('stage 3: offload_optimizer moves the master, state and gradient partitions; offload_param the parameter partitions', () => {
    const ds = (offload: NonNullable<ParallelPlan['offload']>) =>
      run(mlp, input, { engine: 'deepspeed', dp: 2, zero: 3, deepspeed: { paramPersistenceThreshold: 0 }, offload });
    // q = ⌈48/2⌉ + ⌈6/2⌉ + ⌈24/2⌉ + ⌈4/2⌉ = 41 elements. Without offloading: [164, 164, 328] (deepspeed.test.ts).
    const optimizer = ds({ optimizer: true });
    expect(gpu(optimizer)).toEqual([164, 0, 0]);
    // Host: grad_partitions_flat_buffer 4q + the fp32 gradient 4q; the fp32 master clone 4q (even
    // for an fp32 model) + exp_avg and exp_avg_sq 8q.
    expect(host(optimizer)).toEqual({ parameters: 0, gradients: 328, optimizer: 492, staging: 0 });
    const params = ds({ parameters: true });
    // The partitions on the host; the fp32 master is a GPU clone now (the partition is not on its device).
    expect(gpu(params)).toEqual([0, 164, 164 + 328]);
    expect(host(params)).toEqual({ parameters: 164, gradients: 0, optimizer: 0, staging: 0 });
    const all = ds(both);
    expect(gpu(all)).toEqual([0, 0, 0]);
    expect(host(all)).toEqual({ parameters: 164, gradients: 328, optimizer: 492, staging: 0 });
    // Persistent parameters (≤ 1e5 elements: all four here) stay gathered on the GPU, padded to q·N.
    expect(gpu(run(mlp, input, { engine: 'deepspeed', dp: 2, zero: 3, offload: both }))).toEqual([328, 0, 0]);
  });

  it('stage 3 at world 1 with offload_param: every gather is a host-to-device copy of the whole parameter', () => {
    const none = run(mlp, input, { engine: 'deepspeed', dp: 1, zero: 3, deepspeed: { paramPersistenceThreshold: 0 } });
    const off = run(mlp, input, { engine: 'deepspeed', dp: 1, zero: 3, deepspeed: { paramPersistenceThreshold: 0 }, offload: { parameters: true } });
    // Without offloading the partition is the parameter (no gather): 328 B resident; with it, 0 resident.
    expect([none.bytes.parameters, off.bytes.parameters]).toEqual([328, 0]);
    // The gathered copies exist on the GPU while a module runs: the forward peak holds a layer's.
    expect(off.peak.byCategory.parameters as number).toBeGreaterThan(0);
  });
});

describe("FSDP2's CPUOffloadPolicy, by hand", () => {
  it('shards, sharded gradients and the optimizer state on the host; nothing of them on the GPU', () => {
    const r = run(mlp, input, { engine: 'fsdp2', dp: 2, offload: both });
    expect(gpu(r)).toEqual([0, 0, 0]);
    // Shards of 24 + 3 + 12 + 2 = 41 fp32 elements; Adam: exp_avg, exp_avg_sq (8 × 41) and a
    // 4-byte CPU step tensor per parameter (4 × 4).
    expect(host(r)).toEqual({ parameters: 164, gradients: 164, optimizer: 328 + 16, staging: 0 });
  });

  it('uneven shards: the parameters padded, the gradients and the state on the unpadded local chunk', () => {
    const r = run(mlp, input, { engine: 'fsdp2', dp: 4, rank: 3, offload: both });
    // dp 4: fc1.weight 2 rows of 8 (16), fc1.bias 2, fc2.weight 1 row of 6, fc2.bias 1 → 25 padded elements.
    // Rank 3 holds no row of fc1 (rows 6-7 of 6), row 3 of fc2.weight and element 3 of fc2.bias: 7 elements.
    expect(host(r)).toEqual({ parameters: 100, gradients: 28, optimizer: 56 + 16, staging: 0 });
  });

  it('the GPU peak holds the all-gather with the host copies, not the resident shards', () => {
    const none = run(mlp, input, { engine: 'fsdp2', dp: 2 });
    const off = run(mlp, input, { engine: 'fsdp2', dp: 2, offload: both });
    expect(off.bytes.peak).toBeLessThan(none.bytes.peak);
    expect(off.peak.byCategory.optimizer).toBe(0);
  });
});

describe("DeepSpeed's estimators with offloading", () => {
  const decoder = fromHFConfig({
    model_type: 'llama',
    hidden_size: 64,
    intermediate_size: 160,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    vocab_size: 300,
    torch_dtype: 'bfloat16',
  });
  const dp = 4;

  it('ZeRO-2 + cpu offload: the estimator says 2Ψ on the GPU; ours holds the bf16 flat buffer, 2Ψ up to 2N alignment', () => {
    const r = run(decoder, [2, 33], { engine: 'deepspeed', dp, zero: 2, offload: { optimizer: true } });
    const psi = r.params.trainable;
    const closed = deepspeedZero2({ totalParams: psi, gpusPerNode: dp, cpuOffload: true });
    expect(states(r)).toBe(2 * Math.ceil(psi / (2 * dp)) * 2 * dp);
    expect(states(r) - closed.gpu).toBeGreaterThanOrEqual(0);
    expect(states(r) - closed.gpu).toBeLessThan(2 * 2 * dp);
  });

  it('ZeRO-3 + cpu offload: the estimator’s 2Ψ/N is our bf16 partitions Σ⌈n/N⌉ (its largest-layer term is gathered, a peak, not a state)', () => {
    const r = run(decoder, [2, 33], { engine: 'deepspeed', dp, zero: 3, deepspeed: { paramPersistenceThreshold: 0 }, offload: { optimizer: true } });
    const psi = r.params.trainable;
    const numels = r.ir.tensors.filter((t) => t.role === 'param').map((t) => (t.spec.shape as number[]).reduce((a, b) => a * b, 1));
    const q = numels.reduce((s, n) => s + Math.ceil(n / dp), 0);
    const closed = deepspeedZero3({ totalParams: psi, largestLayerParams: 0, gpusPerNode: dp, cpuOffload: true, cpuOffloadParams: false });
    expect(states(r)).toBe(2 * q);
    expect(2 * q - closed.gpu).toBeGreaterThanOrEqual(0);
    expect(2 * q - closed.gpu).toBeLessThan(2 * numels.length);
    // Parameters offloaded too: the estimator keeps only 4·(largest layer); our states are 0 and the gathered layer is in the peak.
    const all = run(decoder, [2, 33], { engine: 'deepspeed', dp, zero: 3, deepspeed: { paramPersistenceThreshold: 0 }, offload: both });
    expect(states(all)).toBe(0);
    expect(deepspeedZero3({ totalParams: psi, largestLayerParams: 0, gpusPerNode: dp, cpuOffload: true, cpuOffloadParams: true }).gpu).toBe(0);
    expect(all.bytes.peak).toBeLessThan(r.bytes.peak);
  });
});

describe('what offloading cannot do is an error with its path', () => {
  it('rejects each unsupported combination', () => {
    expect(issue(mlp, { parallel: { engine: 'ddp', dp: 2, offload: { optimizer: true } } })).toMatchObject({
      path: ['parallel', 'offload'],
      code: 'not-modelled',
    });
    expect(issue(mlp, { parallel: { engine: 'zero-redundancy', dp: 2, offload: { optimizer: true } } })).toMatchObject({
      path: ['parallel', 'offload'],
      code: 'not-modelled',
    });
    expect(issue(mlp, { parallel: { engine: 'fsdp2', dp: 2, offload: { optimizer: true } } })).toMatchObject({
      path: ['parallel', 'offload', 'parameters'],
      code: 'bad-option',
    });
    expect(issue(mlp, { parallel: { engine: 'fsdp2', dp: 2, offload: { parameters: true, optimizer: false } } })).toMatchObject({
      path: ['parallel', 'offload', 'optimizer'],
      code: 'bad-option',
    });
    for (const zero of [1, 2])
      expect(issue(mlp, { parallel: { engine: 'deepspeed', dp: 2, zero, offload: { parameters: true } } })).toMatchObject({
        path: ['parallel', 'offload', 'parameters'],
        code: 'bad-option',
      });
    // DeepSpeedCPUAdam / DeepSpeedCPULion only.
    expect(issue(mlp, { optimizer: 'sgd_momentum', parallel: { engine: 'deepspeed', dp: 2, zero: 2, offload: { optimizer: true } } })).toMatchObject({
      path: ['optimizer'],
      code: 'not-modelled',
    });
    // Offloading from the CPU to the CPU means nothing.
    expect(issue(mlp, { device: 'cpu', parallel: { engine: 'fsdp2', dp: 2, offload: both } })).toMatchObject({
      path: ['parallel', 'offload'],
      code: 'bad-option',
    });
    expect(issue(mlp, { parallel: { engine: 'deepspeed', dp: 2, zero: 3, offload: { optimiser: true } } })).toMatchObject({
      path: ['parallel', 'offload', 'optimiser'],
    });
  });

  it('accepts no offload spelled out, and Lion / AdamW under ZeRO-Offload', () => {
    expect(run(mlp, input, { engine: 'ddp', dp: 2, offload: { optimizer: false, parameters: false } }).host).toBeUndefined();
    expect(host(run(mlp, input, { engine: 'deepspeed', dp: 2, zero: 1, offload: { optimizer: true } }, { optimizer: 'lion' })).optimizer).toBe(504);
    expect(host(run(mlp, input, { engine: 'deepspeed', dp: 2, zero: 3, offload: { optimizer: true } }, { optimizer: 'adamw' })).optimizer).toBe(492);
  });
});

/** The offload flags each engine accepts. */
const plans = fc.oneof(
  fc.record({ engine: fc.constant('deepspeed' as const), zero: fc.constantFrom(1, 2, 3), parameters: fc.boolean() }).map(({ zero, parameters }) => ({
    engine: 'deepspeed' as const,
    zero: zero as 1 | 2 | 3,
    offload: { optimizer: true, parameters: zero === 3 && parameters },
  })),
  fc
    .record({ engine: fc.constant('deepspeed' as const), parameters: fc.constant(true) })
    .map(() => ({ engine: 'deepspeed' as const, zero: 3 as const, offload: { optimizer: false, parameters: true } })),
  fc.constant({ engine: 'fsdp2' as const, offload: both }),
);

describe('offloading laws', () => {
  it('FSDP2: a decoder traced with three layers gives the whole trace’s GPU and host figures', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 4, max: 6 }),
        fc.integer({ min: 2, max: 8 }),
        fc.integer({ min: 1, max: 2 }),
        fc.constantFrom('every', 'last' as const),
        (layers, dp, microBatches, gradientSync) => {
          const model = smallLlama(layers);
          const units = Array.from({ length: layers }, (_, i) => `model.layers.${i}`);
          const parallel = { engine: 'fsdp2', dp, rank: dp - 1, gradientSync, units, offload: both } as const;
          const fast = run(model, [2, 33], parallel, { microBatches });
          const full = run(whole(model), [2, 33], parallel, { microBatches });
          expect([fast.bytes, fast.host]).toEqual([full.bytes, full.host]);
          expect([fast.peak.label, fast.peak.phase]).toEqual([full.peak.label, full.peak.phase]);
        },
      ),
      { numRuns: 10 },
    );
  });

  it("never raise a rank's GPU model states; GPU + host keep at least its parameters and optimizer state; the GPU peak rises at most by what offloading adds", () => {
    fc.assert(
      fc.property(
        randomModel,
        plans,
        fc.integer({ min: 1, max: 6 }),
        fc.nat(),
        fc.constantFrom(1, 2),
        fc.constantFrom('float32', 'bfloat16' as const),
        (m, plan, dp, rankSeed, microBatches, dtype) => {
          const model = seqFromSpecs(m.layers);
          const { offload, ...rest } = plan;
          const base = {
            ...rest,
            dp,
            rank: rankSeed % dp,
            ...(rest.engine === 'deepspeed' ? { deepspeed: { paramPersistenceThreshold: 0 } } : {}),
          } as ParallelPlan;
          let without: Estimate<number>;
          try {
            without = run(model, m.input, base, { microBatches, dtype });
          } catch {
            return fc.pre(false); // DeepSpeed needs trainable parameters
          }
          const withOffload = run(model, m.input, { ...base, offload }, { microBatches, dtype });
          const h = host(withOffload);
          expect(states(withOffload)).toBeLessThanOrEqual(states(without));
          expect(withOffload.bytes.parameters + h.parameters).toBeGreaterThanOrEqual(without.bytes.parameters);
          expect(withOffload.bytes.optimizer + h.optimizer).toBeGreaterThanOrEqual(without.bytes.optimizer);
          // ZeRO-3 keeps every gradient partition somewhere. FSDP2 copies out each parameter's
          // unpadded chunk, so over all ranks the host holds every gradient element once.
          // Stages 1/2 keep the fp32 partition (4P on the host) where the GPU held whole in-partition
          // gradients: no such law there.
          if (plan.engine === 'deepspeed' && plan.zero === 3) expect(withOffload.bytes.gradients + h.gradients).toBeGreaterThanOrEqual(without.bytes.gradients);
          if (plan.engine === 'fsdp2') {
            const ranks = Array.from({ length: dp }, (_, rank) => host(run(model, m.input, { ...base, rank, offload }, { microBatches, dtype })).gradients);
            expect(ranks.reduce((a, b) => a + b, 0)).toBe((dtype === 'float32' ? 4 : 2) * withOffload.params.trainable);
          }
          // What offloading adds to the GPU (rounded to CUDA's 512-byte blocks): stages 1/2 keep
          // temp_grad_buffer_for_gpu_offload (the largest parameter, model dtype) for the whole run,
          // which on a rank whose partition that parameter does not touch can exceed what offloading
          // frees; ZeRO-3 offload_param at world 1 makes a GPU copy of each gathered parameter (one
          // block each) where the partition was the parameter. (The fp32 master is a clone with or
          // without offloading: measured, test/fixtures/deepspeed-cpu.)
          const numels = withOffload.ir.tensors.filter((t) => t.role === 'param').map((t) => (t.spec.shape as number[]).reduce((a, b) => a * b, 1));
          const round = (bytes: number) => Math.ceil(bytes / 512) * 512;
          const added =
            plan.engine !== 'deepspeed'
              ? 0
              : plan.zero !== 3
                ? offload.optimizer
                  ? round(4 * Math.max(0, ...numels))
                  : 0
                : offload.parameters && dp === 1
                  ? 512 * numels.length
                  : 0;
          expect(withOffload.bytes.peak).toBeLessThanOrEqual(without.bytes.peak + added);
        },
      ),
      { numRuns: 60 },
    );
  });
});
