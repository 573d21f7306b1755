/** advise(): every lever's figures are its own options' real estimate, ranked by cost; the issue's Qwen job is made to fit. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { VramError, advise, estimate, fits, fromHFConfig, llm, mobilenetV3Small, sym, type AdviseResult, type FitOptions, type Layer } from '../src/index.js';

const KINDS = ['none', 'throughput', 'compute', 'hardware', 'quality'];

/** The estimate's options of a fit's (the budget keys left out). */
function estimateOf(options: FitOptions) {
  const { gpu: _gpu, runtime: _runtime, env: _env, verdict: _verdict, ...rest } = options;
  return rest;
}

/** What every result holds: each lever's figures are its own options', the order is the ranking's, best is the first fitting. */
function checkResult(result: AdviseResult): void {
  for (const lever of result.levers) {
    const f = fits(lever.model, lever.options);
    expect(lever.peak, lever.lever).toBe(estimate(lever.model, estimateOf(lever.options)).bytes.peak);
    expect([lever.fits, lever.reserved, lever.needed, lever.headroom], lever.lever).toEqual([f.fits, f.reserved, f.needed, f.headroom]);
    expect(lever.levers.join('+')).toBe(lever.lever);
  }
  const fitting = result.levers.filter((l) => l.fits);
  expect(result.levers.slice(0, fitting.length)).toEqual(fitting);
  for (let i = 1; i < fitting.length; i += 1) {
    const [a, b] = [fitting[i - 1]!, fitting[i]!];
    const key = (l: typeof a) => [KINDS.indexOf(l.cost.kind), l.levers.length, l.needed];
    const [ka, kb] = [key(a), key(b)];
    const order = ka[0]! - kb[0]! || ka[1]! - kb[1]! || ka[2]! - kb[2]!;
    expect(order, `${a.lever} before ${b.lever}`).toBeLessThanOrEqual(0);
  }
  const rest = result.levers.slice(fitting.length);
  for (let i = 1; i < rest.length; i += 1) expect(rest[i - 1]!.needed).toBeLessThanOrEqual(rest[i]!.needed);
  expect(result.best).toBe(fitting[0]);
}

const tinyLlama = (layers: number) =>
  fromHFConfig({
    model_type: 'llama',
    hidden_size: 64,
    intermediate_size: 96,
    num_hidden_layers: layers,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    vocab_size: 256,
  });

/** A budget of this share of the job's own need, no runtime lines: the baseline does not fit, levers must. */
function budgetFor(model: Layer, options: Omit<FitOptions, 'gpu'>, share: number): FitOptions {
  const runtime = { context: false, cublas: false };
  const needed = fits(model, { ...options, gpu: 2 ** 50, runtime }).needed;
  return { ...options, runtime, gpu: Math.max(1, Math.floor(needed * share)) };
}

describe('advise', () => {
  it("makes issue 25's job fit: Qwen2.5-0.5B, batch 8 × 8192 tokens, bf16, AdamW on an A800-80GB", () => {
    const model = llm('qwen2.5-0.5b');
    const result = advise(model, { input: [8, 8192], precision: 'bf16', optimizer: 'adamw', gpu: 'A800-80GB' });
    expect(result.baseline.fits).toBe(false);
    expect(result.best).toBeDefined();
    const fitting = result.levers.filter((l) => l.fits).map((l) => l.lever);
    expect(fitting).toContain('micro-batches');
    expect(fitting).toContain('shorter-context');
    expect(fitting).toContain('checkpoint-every-block+liger-flce');
    const micro = result.levers.find((l) => l.lever === 'micro-batches')!;
    expect(micro.options.input).toEqual([2, 8192]);
    expect(micro.options.microBatches).toBe(4);
    const context = result.levers.find((l) => l.lever === 'shorter-context')!;
    const seq = (context.options.input as number[])[1]!;
    expect(seq).toBeLessThan(8192);
    // The longest: one token more does not fit.
    expect(fits(model, { ...context.options, input: [8, seq + 1] }).fits).toBe(false);
    // bf16 already: no precision lever; sdpa keeps no score matrix; one GPU: no sharding.
    expect(result.skipped.map((s) => s.lever)).toEqual(
      expect.arrayContaining(['half-precision', 'fp8', 'checkpoint-selective', 'shard-fsdp2', 'shard-zero2', 'shard-zero3']),
    );
    checkResult(result);
  });

  it("every lever's peak is estimate(model, lever.options).bytes.peak, and the ranking holds (MobileNetV3, a tiny decoder)", () => {
    const mobilenet = mobilenetV3Small({ numClasses: 10 });
    const llama = tinyLlama(4);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.record({ kind: fc.constant('cnn' as const), batch: fc.constantFrom(1, 2, 4, 6, 8), side: fc.constantFrom(32, 64) }),
          fc.record({ kind: fc.constant('llm' as const), batch: fc.constantFrom(1, 2, 4, 6), side: fc.constantFrom(16, 64, 128) }),
        ),
        fc.constantFrom(0.3, 0.6, 0.9),
        fc.constantFrom(1, 2),
        fc.constantFrom<NonNullable<FitOptions['precision']>>('fp32', 'amp-bf16'),
        ({ kind, batch, side }, share, gpus, precision) => {
          const model = kind === 'cnn' ? mobilenet : llama;
          const input = kind === 'cnn' ? [batch, 3, side, side] : [batch, side];
          const result = advise(model, { ...budgetFor(model, { input, precision }, share), gpus });
          expect(result.baseline.fits).toBe(false);
          checkResult(result);
        },
      ),
      { numRuns: 12, seed: 25 },
    );
  });

  it('shards over gpus on the highest rank, and the rank is in the options it reports', () => {
    const model = tinyLlama(4);
    const result = advise(model, { ...budgetFor(model, { input: [4, 64], optimizer: 'adamw' }, 0.5), gpus: 2, maxCombination: 1 });
    for (const id of ['shard-fsdp2', 'shard-zero2', 'shard-zero3']) {
      const lever = result.levers.find((l) => l.lever === id)!;
      expect(lever.options.parallel?.dp).toBe(2);
      expect(lever.options.parallel?.rank).toBeTypeOf('number');
    }
    expect(result.levers.every((l) => l.levers.length === 1)).toBe(true);
    checkResult(result);
  });

  it('says why a lever does not apply', () => {
    const result = advise(mobilenetV3Small(), { input: [64, 3, 224, 224], gpu: '4GB', optimizer: 'sgd' });
    const reason = (id: string) => result.skipped.find((s) => s.lever === id)?.reason;
    expect(reason('lora')).toMatch(/no Linear layer matches/);
    expect(reason('liger-flce')).toMatch(/causal LM/);
    expect(reason('shorter-context')).toMatch(/causal LM/);
    expect(reason('adam8bit')).toMatch(/the optimizer is sgd/);
    expect(reason('shard-fsdp2')).toMatch(/more than one GPU/);
    expect(result.levers.find((l) => l.lever === 'checkpoint-every-block')?.description).toMatch(/every block of features: 13/);
    const inference = advise(tinyLlama(2), { input: [2, 32], gpu: '1GB', mode: 'inference' });
    expect(inference.levers.map((l) => l.lever)).not.toContain('checkpoint-every-block');
    expect(inference.skipped.find((s) => s.lever === 'micro-batches')?.reason).toMatch(/training/);
  });

  it('checks its options as fits does: unknown keys, gpus, maxCombination, a symbolic input', () => {
    const model = tinyLlama(1);
    const issue = (options: unknown) => {
      try {
        advise(model, options as FitOptions);
      } catch (error) {
        expect(error).toBeInstanceOf(VramError);
        return (error as VramError).issues.map((i) => [i.path.join('.'), i.code]);
      }
      throw new Error('no error');
    };
    expect(issue({ input: [1, 8], gpu: '8GB', gpuz: 2 })).toEqual([['gpuz', 'unknown-option']]);
    expect(issue({ input: [1, 8], gpu: '8GB', gpus: 0, maxCombination: 1.5 })).toEqual([
      ['gpus', 'bad-option'],
      ['maxCombination', 'bad-option'],
    ]);
    expect(issue({ input: [1, 8] })).toEqual([['gpu', 'missing-option']]);
    expect(issue({ input: [1, sym('S')], gpu: '8GB' })).toEqual([['input', 'symbolic-input']]);
  });
});
