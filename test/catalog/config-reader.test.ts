/** A config field of any JavaScript value is an issue with its path, never a TypeError while the message is written. */
import { describe, expect, it } from 'vitest';
import { fromHFConfig } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const llama = { model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 256 };

describe('config fields that JSON cannot hold', () => {
  it('BigInts, symbols, null-prototype objects and cycles are refused by path', () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    for (const value of [1n, Symbol('s'), Object.create(null), cycle, [{ __proto__: 0n }]]) {
      const issue = errorOf(() => fromHFConfig({ ...llama, hidden_size: value })).issues.find((i) => i.path[0] === 'hidden_size');
      expect(issue).toMatchObject({ path: ['hidden_size'], code: 'bad-config' });
    }
  });
});
