/**
 * One schema per catalog builder: a wrong type, a truthy non-boolean, an unknown enum string, a
 * value out of range, a missing required field and an unknown key are each a VramError at the
 * field's path, every problem at once.
 */
import { describe, expect, it } from 'vitest';
import { estimate, gpt2Model, llamaFamily, llm, mobilenetV3Large, mobilenetV3Small, unet, vision, type LlamaShape } from '../../src/index.js';
import { LLAMA_SHAPE } from '../helpers/tiny-configs.js';
import { errorOf } from '../helpers/errors.js';

/** Every issue of the VramError a call throws, as `path:code`. */
const issues = (f: () => unknown): string[] => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);

describe('mobilenetV3Small / mobilenetV3Large', () => {
  it.each([
    ['wrong type', { numClasses: '10' }, ['numClasses:bad-option']],
    ['truthy non-boolean', { reducedTail: 1 }, ['reducedTail:bad-option']],
    ['truthy non-boolean (dilated)', { dilated: 'true' }, ['dilated:bad-option']],
    ['out of range', { widthMult: 0 }, ['widthMult:bad-option']],
    ['out of range (dropout)', { dropout: 1.1 }, ['dropout:bad-option']],
    ['unknown key', { num_classes: 10 }, ['num_classes:unknown-option']],
    ['a module name is no option here', { name: 'net' }, ['name:unknown-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(() => mobilenetV3Small(options as never))).toEqual(expected.map((e) => `mobilenetV3Small.${e}`));
    expect(issues(() => mobilenetV3Large(options as never))).toEqual(expected.map((e) => `mobilenetV3Large.${e}`));
  });
  it('every problem at once', () => {
    expect(issues(() => mobilenetV3Small({ numClasses: 0, widthMult: -1, dropout: Number.NaN } as never))).toEqual([
      'mobilenetV3Small.numClasses:bad-option',
      'mobilenetV3Small.widthMult:bad-option',
      'mobilenetV3Small.dropout:bad-option',
    ]);
  });
});

describe('vision', () => {
  it.each([
    ['wrong type', { numClasses: 10.5 }, ['vision.numClasses:bad-option']],
    ['out of range', { stochasticDepthProb: -0.1 }, ['vision.stochasticDepthProb:bad-option']],
    ['out of range (dropout)', { dropout: 2 }, ['vision.dropout:bad-option']],
    ['out of range (imageSize)', { imageSize: 0 }, ['vision.imageSize:bad-option']],
    ['unknown key', { classes: 10 }, ['vision.classes:unknown-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(() => vision('efficientnet_b0', options as never))).toEqual(expected);
  });
  it('an unknown or non-string name', () => {
    expect(issues(() => vision('resnet19'))).toEqual(['vision.name:unknown-model']);
    expect(issues(() => vision(18 as never))).toEqual(['vision.name:unknown-model']);
  });
  it("a family's own options", () => {
    expect(issues(() => vision('resnet18', { dropout: 0.1 }))).toEqual(['vision.dropout:bad-option']);
    expect(issues(() => vision('vit_b_16', { imageSize: 100 }))).toEqual(['vision.imageSize:bad-option']);
  });
});

describe('unet', () => {
  it.each([
    ['wrong type', { base: '64' }, ['unet.base:bad-option']],
    ['out of range', { inChannels: 0 }, ['unet.inChannels:bad-option']],
    ['out of range (base)', { base: 2 ** 50 }, ['unet.base:bad-option']],
    ['unknown key', { classes: 2 }, ['unet.classes:unknown-option']],
    ['every problem at once', { inChannels: -3, numClasses: true }, ['unet.inChannels:bad-option', 'unet.numClasses:bad-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(() => unet(options as never))).toEqual(expected);
  });
});

const GPT2 = { hidden: 64, layers: 1, heads: 4, inner: 256, vocab: 256, positions: 64, attnDropout: 0, residDropout: 0, embdDropout: 0 };

describe('gpt2Model', () => {
  it.each([
    ['wrong type', { ...GPT2, vocab: '256' }, ['gpt2Model.vocab:bad-option']],
    ['truthy non-boolean', { ...GPT2, tied: 0 }, ['gpt2Model.tied:bad-option']],
    ['unknown enum', { ...GPT2, activation: 'gelu_fast' }, ['gpt2Model.activation:bad-option']],
    ['out of range', { ...GPT2, embdDropout: 1.5 }, ['gpt2Model.embdDropout:bad-option']],
    ['out of range (layers)', { ...GPT2, layers: 0 }, ['gpt2Model.layers:bad-option']],
    ['missing required', { ...GPT2, positions: undefined }, ['gpt2Model.positions:missing-option']],
    ['unknown key', { ...GPT2, n_embd: 64 }, ['gpt2Model.n_embd:unknown-option']],
    // GPT2Attention: "`embed_dim` must be divisible by num_heads"
    ['heads not dividing hidden', { ...GPT2, heads: 5 }, ['gpt2Model.heads:bad-option']],
  ])('%s', (_, shape, expected) => {
    expect(issues(() => gpt2Model(shape as never))).toEqual(expected);
  });
  it('the options are the decoders’ schema', () => {
    expect(issues(() => gpt2Model(GPT2, { attention: 'fast' as never }))).toEqual(['options.attention:bad-option']);
    expect(issues(() => gpt2Model(GPT2, { useCache: 'no' as never }))).toEqual(['options.useCache:bad-option']);
  });
  it('reads only token ids of at most n_positions', () => {
    expect(estimate(gpt2Model(GPT2), { input: [1, 16] }).params.total).toBe(70592);
    expect(issues(() => estimate(gpt2Model(GPT2), { input: [1, 65] }))).toEqual(['transformer:bad-input']);
  });
});

const LLAMA: LlamaShape = LLAMA_SHAPE;

describe('llamaFamily', () => {
  it.each([
    ['wrong type', { ...LLAMA, hidden: 64n }, ['llamaFamily.hidden:bad-option']],
    ['truthy non-boolean', { ...LLAMA, tied: 'false' }, ['llamaFamily.tied:bad-option']],
    ['truthy non-boolean (variation flag)', { ...LLAMA, sandwichNorms: 1 }, ['llamaFamily.sandwichNorms:bad-option']],
    ['unknown enum', { ...LLAMA, family: 'falcon' }, ['llamaFamily.family:bad-option']],
    ['unknown enum (qkNorm)', { ...LLAMA, qkNorm: 'both' }, ['llamaFamily.qkNorm:bad-option']],
    ['unknown activation', { ...LLAMA, activation: 'swiglu' }, ['llamaFamily.activation:bad-option']],
    ['out of range', { ...LLAMA, attentionDropout: -1 }, ['llamaFamily.attentionDropout:bad-option']],
    ['out of range (layers)', { ...LLAMA, layers: 10_001 }, ['llamaFamily.layers:bad-option']],
    ['out of range (soft-cap)', { ...LLAMA, finalSoftcap: 0 }, ['llamaFamily.finalSoftcap:bad-option']],
    ['out of range (a window)', { ...LLAMA, layerWindows: [0] }, ['llamaFamily.layerWindows.0:bad-option']],
    ['missing required', { ...LLAMA, kvHeads: undefined }, ['llamaFamily.kvHeads:missing-option']],
    ['unknown key', { ...LLAMA, ropeTheta: 10000 }, ['llamaFamily.ropeTheta:unknown-option']],
    ['not a function', { ...LLAMA, layerMlp: 'moe' }, ['llamaFamily.layerMlp:bad-option']],
    // transformers: num_key_value_groups = num_heads // num_key_value_heads
    ['kv heads not dividing heads', { ...LLAMA, kvHeads: 3 }, ['llamaFamily.kvHeads:bad-option']],
    ['odd rotary dim', { ...LLAMA, rotaryDim: 5 }, ['llamaFamily.rotaryDim:bad-option']],
    ['a window per layer', { ...LLAMA, layerWindows: [null, 8] }, ['llamaFamily.layerWindows:bad-config']],
  ])('%s', (_, shape, expected) => {
    expect(issues(() => llamaFamily(shape as never))).toEqual(expected);
  });
  it('every problem at once', () => {
    expect(issues(() => llamaFamily({ ...LLAMA, hidden: 0, vocab: 'x', slidingWindow: 1.5 } as never))).toEqual([
      'llamaFamily.hidden:bad-option',
      'llamaFamily.vocab:bad-option',
      'llamaFamily.slidingWindow:bad-option',
    ]);
  });
  it('still builds the catalog figures', () => {
    expect(estimate(llamaFamily(LLAMA), { input: [1, 16] }).params.total).toBe(82368);
  });
});

describe('llm', () => {
  it('checks its options before the name', () => {
    expect(issues(() => llm('no-such-model', { attention: 'bogus' as never }))).toEqual(['options.attention:bad-option']);
    expect(issues(() => llm('gpt2', { dtype: 'float8' as never }))).toEqual(['options.dtype:bad-option']);
    expect(issues(() => llm('gpt2', { useCache: 1 as never }))).toEqual(['options.useCache:bad-option']);
    expect(issues(() => llm('gpt2', { cache: true } as never))).toEqual(['options.cache:unknown-option']);
  });
  it('an unknown or non-string name', () => {
    expect(issues(() => llm('gpt-5'))).toEqual(['model:unknown-model']);
    expect(issues(() => llm(2 as never))).toEqual(['model:unknown-model']);
  });
});
