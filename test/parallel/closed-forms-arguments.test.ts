/**
 * Hostile arguments to the published closed forms (issue "Hostile inputs everywhere"): inputs
 * whose figures would overflow to Infinity, positional arguments of the wrong type, and the
 * shapes Megatron itself refuses — each a VramError with a path, never Infinity, NaN or a fraction
 * of a byte where Megatron would have stopped.
 */
import { describe, expect, it } from 'vitest';
import { deepspeedZero2, deepspeedZero3, megatronPaddedVocab, megatronTheoretical, zeroPaper } from '../../src/index.js';
import { issueOf } from '../helpers/errors.js';

const gpt = {
  numLayers: 24,
  hiddenSize: 2048,
  numAttentionHeads: 16,
  paddedVocabSize: 50432,
  tensorModelParallelSize: 2,
  dataParallelSize: 4,
  seqLength: 2048,
  microBatchSize: 4,
};

describe('the closed forms refuse inputs past their finite figures', () => {
  it('ZeRO and DeepSpeed', () => {
    expect(issueOf(() => zeroPaper({ params: 1e308, gpus: 64 }))).toBe('zeroPaper.params:bad-option');
    expect(issueOf(() => zeroPaper({ params: 1e9, gpus: 64, k: 1e300 }))).toBe('zeroPaper.k:bad-option');
    expect(issueOf(() => deepspeedZero2({ totalParams: 1e308, gpusPerNode: 8, nodes: 8, cpuOffload: false }))).toBe('deepspeedZero2.totalParams:bad-option');
    expect(issueOf(() => deepspeedZero3({ totalParams: 9.9e306, largestLayerParams: 32e6 }))).toBe('deepspeedZero3.totalParams:bad-option');
    expect(issueOf(() => deepspeedZero3({ totalParams: 1e6, largestLayerParams: 1e3, additionalBufferFactor: 1e308 }))).toBe(
      'deepspeedZero3.additionalBufferFactor:bad-option',
    );
  });
});

describe('megatronPaddedVocab checks its positional arguments', () => {
  it.each([
    ['vocab', [new Uint8Array(2), 2]],
    ['vocab', [[{}], 2]],
    ['vocab', [1n, 1, 64]],
    ['tp', [50257, Number.NEGATIVE_INFINITY]],
    ['divisibleBy', [50257, 2, Symbol('x')]],
    ['divisibleBy', [50257, 2, 0]],
  ])('%s', (name, args) => {
    expect(issueOf(() => (megatronPaddedVocab as (...a: unknown[]) => number)(...args))).toBe(`megatronPaddedVocab.${name}:bad-option`);
  });

  it('pads as before', () => {
    expect(megatronPaddedVocab(50257, 2)).toBe(50432);
    expect(megatronPaddedVocab(32000, 1, 64)).toBe(32000);
  });
});

describe('megatronTheoretical refuses what Megatron refuses', () => {
  it('heads, query groups and layers that do not split evenly', () => {
    expect(issueOf(() => megatronTheoretical({ ...gpt, tensorModelParallelSize: 10 }, 4))).toBe('megatronTheoretical.numAttentionHeads:bad-option');
    expect(issueOf(() => megatronTheoretical({ ...gpt, numQueryGroups: 3 }))).toBe('megatronTheoretical.numQueryGroups:bad-option');
    expect(issueOf(() => megatronTheoretical({ ...gpt, tensorModelParallelSize: 1, numQueryGroups: 3 }))).toBe('megatronTheoretical.numQueryGroups:bad-option');
    expect(issueOf(() => megatronTheoretical({ ...gpt, hiddenSize: 2050 }))).toBe('megatronTheoretical.hiddenSize:bad-option');
    expect(issueOf(() => megatronTheoretical({ ...gpt, pipelineModelParallelSize: 5 }))).toBe('megatronTheoretical.numLayers:bad-option');
  });

  it('a number of microbatches that is no count, sizes past 2^24', () => {
    expect(issueOf(() => megatronTheoretical(gpt, Number.NaN))).toBe('megatronTheoretical.numMicrobatches:bad-option');
    expect(issueOf(() => megatronTheoretical(gpt, '4' as never))).toBe('megatronTheoretical.numMicrobatches:bad-option');
    expect(issueOf(() => megatronTheoretical({ ...gpt, seqLength: 2 ** 40 }))).toBe('megatronTheoretical.seqLength:bad-option');
  });

  it('reports as before', () => {
    expect(megatronTheoretical(gpt, 4).weightAndOptimizer).toBe(11804811264);
  });
});
