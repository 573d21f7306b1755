/**
 * Hostile arguments to the rollout engines (issue "Hostile inputs everywhere"): a model that is
 * not a catalog decoder, a meta with a field missing or of the wrong kind, options that are not
 * an object, sizes whose products leave the exact integers — each a VramError with a path.
 */
import { describe, expect, it } from 'vitest';
import { fromHFConfig, linear, sglangEngine, vllmEngine, vllmPageBytes } from '../../src/index.js';
import { errorOf, issueOf } from '../helpers/errors.js';

const model = fromHFConfig({
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 64,
});
const meta = model.meta!;
const vllm = { totalBytes: 2 ** 34, maxModelLen: 64 };
const sglang = { totalBytes: 2 ** 34, memFractionStatic: 0.5 };
const page = { blockSize: 16, tensorParallelSize: 1, dtypeBytes: 2 };

describe('vllmEngine and sglangEngine refuse a model that is not a catalog decoder', () => {
  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a model whose meta is a number', { ...model, meta: 5 }],
    ['a model whose meta is empty', { ...model, meta: {} }],
  ])('%s', (_, junk) => {
    expect(issueOf(() => vllmEngine(junk as never, vllm))).toMatch(/^model[.:]/);
    expect(issueOf(() => sglangEngine(junk as never, sglang))).toMatch(/^model[.:]/);
  });

  it('says which model is needed', () => {
    expect(errorOf(() => vllmEngine(null as never, vllm)).message).toMatch(/vllmEngine needs a decoder model .*fromHFConfig/);
    expect(errorOf(() => sglangEngine(linear({ out: 4 }) as never, sglang)).message).toMatch(/sglangEngine needs a decoder model .*fromHFConfig/);
  });

  it('names a meta field gone or of the wrong kind (no NaN figures)', () => {
    const { headDim: _, ...noHeadDim } = meta;
    expect(issueOf(() => vllmEngine({ ...model, meta: noHeadDim } as never, vllm))).toBe('model.meta.headDim:bad-meta');
    expect(issueOf(() => sglangEngine({ ...model, meta: { ...meta, layers: [undefined, undefined] } } as never, sglang))).toBe('model.meta.layers:bad-option');
    expect(issueOf(() => vllmEngine({ ...model, dtype: 'bogus' } as never, vllm))).toBe('model.dtype:bad-option');
    expect(issueOf(() => vllmEngine({ ...model, repeated: { ...model.repeated, count: 2 ** 40 } } as never, vllm))).toBe('model.repeated.count:bad-option');
  });

  it('refuses options that are not an object, and a release that is no version', () => {
    expect(issueOf(() => vllmEngine(model, null as never))).toBe('options:bad-option');
    expect(issueOf(() => sglangEngine(model, 7 as never))).toBe('options:bad-option');
    expect(issueOf(() => vllmEngine(model, { ...vllm, release: 'latest' }))).toBe('release:unsupported-release');
    expect(issueOf(() => vllmEngine(model, { ...vllm, release: '1' }))).toBe('release:unsupported-release');
  });
});

describe('vllmPageBytes checks its meta and its options', () => {
  it('a meta that is none', () => {
    expect(issueOf(() => vllmPageBytes(undefined as never, page))).toBe('meta:bad-meta');
    expect(issueOf(() => vllmPageBytes(new Uint8Array(0) as never, page))).toMatch(/^meta\./);
    expect(issueOf(() => vllmPageBytes({ ...meta, tied: [-1] } as never, page))).toBe('meta.tied:bad-option');
  });

  it('options missing, of the wrong type or misspelt', () => {
    expect(issueOf(() => vllmPageBytes(meta, undefined as never))).toBe('options:bad-option');
    expect(issueOf(() => vllmPageBytes(meta, {} as never))).toBe('options.blockSize:missing-option');
    expect(issueOf(() => vllmPageBytes(meta, { ...page, tensorParallelSize: { __proto__: null } } as never))).toBe('options.tensorParallelSize:bad-option');
    expect(issueOf(() => vllmPageBytes(meta, { ...page, dtypeBytes: 1n } as never))).toBe('options.dtypeBytes:bad-option');
    expect(issueOf(() => vllmPageBytes(meta, { ...page, tensorrParallelSize: 2 } as never))).toBe('options.tensorrParallelSize:unknown-option');
  });

  it('sizes whose page is past the exact integers', () => {
    expect(issueOf(() => vllmPageBytes({ ...meta, headDim: 2 ** 31, kvHeads: 2 ** 31 }, { ...page, blockSize: 1_000_000 }))).toBe(
      'options.blockSize:too-large',
    );
    expect(vllmPageBytes(meta, page)).toBe(2 * 16 * 2 * 16 * 2);
  });
});
