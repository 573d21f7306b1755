/**
 * Hostile arguments of the LLM scenarios (issue 23): a model that is no decoder, decoder facts
 * that are not as builders record them, expressions that sym() did not make — each a VramError
 * with its path, never a TypeError.
 */
import { describe, expect, it } from 'vitest';
import { decoderMeta, fromHFConfig, generation, korthikanti, kvCache, linear, sym, type Layer, type ModuleLayer } from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

const issues = (f: () => unknown) => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);

const llama = fromHFConfig({
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 96,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  num_hidden_layers: 2,
  vocab_size: 64,
  max_position_embeddings: 2048,
}) as ModuleLayer;

/** The model with one of its decoder facts replaced. */
const withMeta = (fields: Record<string, unknown>): Layer => ({ ...llama, meta: { ...llama.meta!, ...fields } }) as Layer;

describe('decoderMeta', () => {
  it('a value that is no model is bad-model, a model that is no decoder not-a-decoder, both at model', () => {
    for (const bad of [undefined, null, 3, 'llama', {}, { kind: 'nope' }])
      expect(
        issues(() => decoderMeta(bad as never)),
        String(bad),
      ).toEqual(['model:bad-model']);
    expect(issues(() => decoderMeta(linear({ out: 4 })))).toEqual(['model:not-a-decoder']);
    expect(issues(() => decoderMeta({ ...llama, meta: null } as never))).toEqual(['model:not-a-decoder']);
  });

  it('decoder facts the KV cache reads must be as builders record them', () => {
    expect(issues(() => decoderMeta(withMeta({ layers: 'two' })))).toEqual(['model.meta.layers:bad-model']);
    expect(issues(() => decoderMeta(withMeta({ kvHeads: Number.NaN })))).toEqual(['model.meta.kvHeads:bad-model']);
    expect(issues(() => decoderMeta(withMeta({ headDim: 0 })))).toEqual(['model.meta.headDim:bad-model']);
    expect(issues(() => decoderMeta(withMeta({ slidingWindow: -1 })))).toEqual(['model.meta.slidingWindow:bad-model']);
    expect(issues(() => decoderMeta(withMeta({ layerWindows: 'all' })))).toEqual(['model.meta.layerWindows:bad-model']);
    // biome-ignore lint/suspicious/noSparseArray: the hole is the point.
    expect(issues(() => decoderMeta(withMeta({ layerWindows: [4, , null] })))).toEqual(['model.meta.layerWindows:bad-model']);
    expect(issues(() => decoderMeta(withMeta({ tensorParallel: { size: 0 } })))).toEqual(['model.meta.tensorParallel:bad-model']);
    expect(issues(() => decoderMeta(withMeta({ mla: {} })))).toEqual(['model.meta.mla:bad-model']);
    expect(decoderMeta(withMeta({ layerWindows: [4, null] })).layerWindows).toEqual([4, null]);
  });
});

describe('kvCache, generation and korthikanti', () => {
  it('kvCache and generation check the model as decoderMeta does', () => {
    expect(issues(() => kvCache(null as never, { batch: 1, seq: 8 }))).toEqual(['model:bad-model']);
    expect(issues(() => kvCache(withMeta({ layerWindows: [null, {}] }), { batch: 1, seq: 8 }))).toEqual(['model.meta.layerWindows:bad-model']);
    expect(issues(() => generation(undefined as never, { batch: 1, prompt: 8, generate: 4 }))).toEqual(['model:bad-model']);
  });

  it('a size that looks like an expression but is no expression of sym() is a VramError at its key', () => {
    expect(issues(() => kvCache(llama, { batch: { ...sym('B'), terms: [] }, seq: 8 }))).toEqual(['batch:bad-option']);
    expect(issues(() => kvCache(llama, { batch: 1, seq: { kind: 'expr', terms: [], key: {} } as never }))).toEqual(['seq:bad-option']);
    expect(issues(() => korthikanti({ seq: { ...sym('S'), terms: [null] } as never, batch: 1, hidden: 64, heads: 4 }))).toEqual(['seq:bad-option']);
    expect(kvCache(llama, { batch: sym('B'), seq: 8 })).not.toBe(0);
  });

  it('generation of one prompt token and none generated needs no grown cache (it was a VramError at seq)', () => {
    const g = generation(llama, { batch: 1, prompt: 1, generate: 0 });
    expect(g.decode.kvCache).toBe(kvCache(llama, { batch: 1, seq: 1, dtype: 'float32' }));
  });
});
