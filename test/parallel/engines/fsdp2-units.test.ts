/**
 * FSDP2's units (src/parallel/engines/fsdp2-units.ts): a group of modules wrapped by one
 * `fully_shard` call, and each unit's own `reshard_after_forward`. Laws: a group of one module is
 * that module's key; flags given per unit equal the same flag given for the plan; the sharded
 * states do not depend on how modules are grouped; errors name their path.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { issuesOf } from '../../helpers/errors.js';
import { estimate, fromHFConfig, type Fsdp2UnitSpec } from '../../../src/index.js';

const LAYERS = 4;
const model = fromHFConfig(
  {
    model_type: 'llama',
    vocab_size: 256,
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: LAYERS,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    tie_word_embeddings: false,
  },
  { transformers: '5.18.0', attention: 'eager', useCache: false },
);
const input = [2, 16];
const layers = Array.from({ length: LAYERS }, (_, i) => `model.layers.${i}`);
const run = (units: readonly Fsdp2UnitSpec[], reshardAfterForward?: boolean) =>
  estimate(model, {
    input,
    device: 'cpu',
    timeline: false,
    parallel: { engine: 'fsdp2', dp: 2, units, ...(reshardAfterForward !== undefined ? { reshardAfterForward } : {}) },
  });
const figures = (r: ReturnType<typeof run>) => [r.bytes.peak, r.bytes.parameters, r.bytes.gradients, r.bytes.optimizer];

describe('FSDP2 units of several modules and their own reshard_after_forward', () => {
  it('a group of one module is that module', () => {
    expect(figures(run([...layers.map((k) => ({ modules: [k] })), 'model.embed_tokens']))).toEqual(figures(run([...layers, 'model.embed_tokens'])));
  });

  it('a flag given by every unit is the plan-wide flag', () => {
    const off = run(layers.map((k) => ({ modules: [k], reshardAfterForward: false })));
    expect(figures(off)).toEqual(figures(run(layers, false)));
    // …and not the plan's default: keeping every layer gathered after forward costs memory.
    expect(off.bytes.peak).toBeGreaterThan(run(layers).bytes.peak as number);
  });

  it('law: sharded parameters, gradients and optimizer state do not depend on the grouping or the flags', () => {
    const base = run(layers);
    fc.assert(
      fc.property(
        fc.array(fc.boolean(), { minLength: LAYERS - 1, maxLength: LAYERS - 1 }),
        fc.array(fc.boolean(), { minLength: LAYERS, maxLength: LAYERS }),
        (cuts, flags) => {
          // Consecutive layers joined where no cut is drawn, each group with a drawn flag.
          const groups: string[][] = [[layers[0]!]];
          cuts.forEach((cut, i) => (cut ? groups.push([layers[i + 1]!]) : groups[groups.length - 1]!.push(layers[i + 1]!)));
          const r = run(groups.map((modules, i) => ({ modules, reshardAfterForward: flags[i]! })));
          expect([r.bytes.parameters, r.bytes.gradients, r.bytes.optimizer]).toEqual([base.bytes.parameters, base.bytes.gradients, base.bytes.optimizer]);
          expect(r.bytes.peak as number).toBeGreaterThanOrEqual((r.bytes.parameters as number) + (r.bytes.optimizer as number));
        },
      ),
      { numRuns: 12 },
    );
  });

  it('the tail accelerate makes, [model.norm, lm_head] never resharded, shows as one unit in the timeline', () => {
    const r = estimate(model, {
      input,
      device: 'cpu',
      parallel: { engine: 'fsdp2', dp: 2, units: [...layers, 'model.embed_tokens', { modules: ['model.norm', 'lm_head'], reshardAfterForward: false }] },
    });
    const labels = r.timeline!.map((e) => e.label);
    expect(labels.filter((l) => l.includes('model.norm+lm_head (FSDP all-gather)')).length).toBe(1);
  });

  it('errors with their paths: unknown key in a group, a module in two units, an empty or misspelt group', () => {
    expect(issuesOf(() => run([{ modules: ['model.norm', 'lm_hed'] }]))).toEqual([{ path: ['parallel', 'units', 0, 'modules', 1], code: 'bad-option' }]);
    expect(issuesOf(() => run(['lm_head', { modules: ['model.norm', 'lm_head'] }]))).toEqual([
      { path: ['parallel', 'units', 1, 'modules', 1], code: 'bad-option' },
    ]);
    expect(issuesOf(() => run([{ modules: [] }]))).toEqual([{ path: ['parallel', 'units', 0], code: 'bad-option' }]);
    expect(issuesOf(() => run([{ module: 'lm_head' } as never]))).toEqual([{ path: ['parallel', 'units', 0], code: 'bad-option' }]);
  });
});
