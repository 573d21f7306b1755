/**
 * Module paths in estimate's options must name something: a freeze prefix, a checkpointed module or
 * a checkpoint container that names nothing was ignored (the same number as without it).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { VramError, estimate, llm } from '../src/index.js';

const gpt2 = llm('gpt2');
const paths = (run: () => unknown): string[] => {
  try {
    run();
  } catch (error) {
    if (error instanceof VramError) return error.issues.map((i) => i.path.join('.'));
    throw error;
  }
  return [];
};

describe('module names in the options', () => {
  it('a freeze prefix, checkpoint.modules or checkpoint.within naming nothing is an error with its path', () => {
    expect(paths(() => estimate(gpt2, { input: [1, 16], freeze: ['transformer.wte', 'transformer.nope'] }))).toEqual(['freeze.1']);
    expect(paths(() => estimate(gpt2, { input: [1, 16], checkpoint: { modules: ['transformer.h.0', 'transformer.h.99'] } }))).toEqual(['checkpoint.modules.1']);
    expect(paths(() => estimate(gpt2, { input: [1, 16], checkpoint: { within: 'transformer.layers' } }))).toEqual(['checkpoint.within']);
  });

  it('names that exist are honoured: modules, parameters, the whole model', () => {
    const base = estimate(gpt2, { input: [1, 16] }).bytes.gradients as number;
    expect(estimate(gpt2, { input: [1, 16], freeze: ['transformer.wpe.weight'] }).bytes.gradients).toBeLessThan(base);
    expect(estimate(gpt2, { input: [1, 16], freeze: [''] }).bytes.gradients).toBe(0);
    expect(paths(() => estimate(gpt2, { input: [1, 16], checkpoint: { within: 'transformer', every: 2 } }))).toEqual([]);
  });

  it('any random name that is no module is refused, never ignored', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[a-z]{1,8}(\.[a-z0-9]{1,6}){0,2}$/), (name) => {
        fc.pre(!['transformer', 'lm_head'].includes(name.split('.')[0]!));
        expect(paths(() => estimate(gpt2, { input: [1, 8], mode: 'train', freeze: [name] }))).toEqual(['freeze.0']);
      }),
      { numRuns: 30 },
    );
  });
});
