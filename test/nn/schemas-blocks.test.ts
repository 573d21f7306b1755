/**
 * One schema per block builder: wrong types, truthy non-booleans, unknown enum strings, values out
 * of range, missing required options and unknown keys are each a VramError at the option's path,
 * all found at once; the sizes a block declares are checked against the traced input.
 */
import { describe, expect, it } from 'vitest';
import {
  attention,
  estimate,
  gatedMlp,
  linear,
  mlaAttention,
  mlp,
  module,
  moeBlock,
  multiheadAttention,
  relu,
  repeatedBlocks,
  rmsNorm,
  seq,
  squeezeExcitation,
  type Layer,
  type ModuleLayer,
} from '../../src/index.js';
import { errorOf } from '../helpers/errors.js';

/** Every issue of the VramError a call throws, as `path:code`. */
const issues = (f: () => unknown): string[] => errorOf(f).issues.map((i) => `${i.path.join('.')}:${i.code}`);
/** Builds with options the types refuse (what plain JavaScript callers can pass). */
const loose =
  <T>(builder: (options: T) => unknown, options: Record<string, unknown>) =>
  () =>
    builder(options as T);
const SEQ = { input: [1, 8, 16], loss: 'none' } as const;

describe("the issue's examples", () => {
  it('attention({ heads: true }) names heads (and the missing hidden), not a TypeError in trace/', () => {
    expect(issues(loose(attention, { heads: true }))).toEqual(['attention.heads:bad-option', 'attention.hidden:missing-option']);
  });
  it('gatedMlp({ intermediate: true }) names intermediate (and the missing hidden)', () => {
    expect(issues(loose(gatedMlp, { intermediate: true }))).toEqual(['gatedMlp.intermediate:bad-option', 'gatedMlp.hidden:missing-option']);
  });
  it("attention({ impl: 'bogus' }) is an unknown implementation, not eager", () => {
    const error = errorOf(loose(attention, { hidden: 16, heads: 4, impl: 'bogus' }));
    expect(error.issues).toEqual([
      expect.objectContaining({ path: ['attention', 'impl'], code: 'bad-option', expected: 'eager | sdpa | flash', received: '"bogus"' }),
    ]);
  });
});

describe('attention', () => {
  const base = { hidden: 16, heads: 4 };
  it.each([
    ['wrong type', { hidden: '16', heads: 4 }, ['attention.hidden:bad-option']],
    ['truthy non-boolean', { ...base, qkvBias: 1 }, ['attention.qkvBias:bad-option']],
    ['truthy non-boolean (string)', { ...base, fusedQkv: 'yes' }, ['attention.fusedQkv:bad-option']],
    ['unknown enum', { ...base, style: 't5' }, ['attention.style:bad-option']],
    ['unknown enum (cache)', { ...base, cache: true }, ['attention.cache:bad-option']],
    ['out of range', { ...base, dropout: 1.5 }, ['attention.dropout:bad-option']],
    ['out of range (kv heads)', { ...base, kvHeads: 0 }, ['attention.kvHeads:bad-option']],
    ['missing required', { hidden: 16 }, ['attention.heads:missing-option']],
    ['unknown key', { ...base, head: 4 }, ['attention.head:unknown-option']],
    ['not a layer', { ...base, rotary: { kind: 'op' } }, ['attention.rotary:bad-layer']],
    [
      'nested object',
      { ...base, impl: 'sdpa', contextParallel: { size: 1, rank: 0 } },
      ['attention.contextParallel.size:bad-option', 'attention.contextParallel.loadBalance:missing-option'],
    ],
    ['nested unknown key', { ...base, tensorParallel: { size: 2, sequence: false, rank: 0 } }, ['attention.tensorParallel.rank:unknown-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(loose(attention, options))).toEqual(expected);
  });

  it('reports every problem at once', () => {
    expect(issues(loose(attention, { hidden: -1, heads: 4.5, impl: 'fast', sdpaGqa: 'yes', head: 1 }))).toEqual([
      'attention.hidden:bad-option',
      'attention.heads:bad-option',
      'attention.impl:bad-option',
      'attention.sdpaGqa:bad-option',
      'attention.head:unknown-option',
    ]);
  });

  it('heads divide hidden unless headDim is given; kv heads divide heads (GQA)', () => {
    expect(issues(() => attention({ hidden: 16, heads: 3 }))).toEqual(['attention.heads:bad-option']);
    expect(() => attention({ hidden: 16, heads: 3, headDim: 8 })).not.toThrow();
    expect(issues(() => attention({ hidden: 16, heads: 4, kvHeads: 3 }))).toEqual(['attention.kvHeads:bad-option']);
    expect(issues(() => attention({ hidden: 16, heads: 4, rotaryDim: 3 }))).toEqual(['attention.rotaryDim:bad-option']);
    expect(issues(() => attention({ hidden: 16, heads: 4, rotaryDim: 6 }))).toEqual(['attention.rotaryDim:bad-option']);
  });

  it("each style's own options, and what is not modelled", () => {
    expect(issues(() => attention({ hidden: 16, heads: 4, style: 'gpt2', kvHeads: 2 }))).toEqual(['attention.kvHeads:bad-option']);
    expect(issues(() => attention({ hidden: 16, heads: 4, style: 'gpt2', headDim: 8 }))).toEqual(['attention.headDim:bad-option']);
    expect(issues(() => attention({ hidden: 16, heads: 4, style: 'gpt2', softcap: 30 }))).toEqual(['attention.softcap:bad-option']);
    expect(issues(() => attention({ hidden: 16, heads: 4, positions: 32 }))).toEqual(['attention.positions:bad-option']);
    expect(issues(() => attention({ hidden: 16, heads: 4, style: 'gpt2', tensorParallel: { size: 2, sequence: false } }))).toEqual([
      'attention.tensorParallel:not-modelled',
    ]);
    expect(issues(() => attention({ hidden: 16, heads: 4, contextParallel: { size: 2, rank: 0, loadBalance: true } }))).toEqual([
      'attention.contextParallel:not-modelled',
    ]);
    expect(issues(() => attention({ hidden: 16, heads: 4, impl: 'sdpa', contextParallel: { size: 2, rank: 2, loadBalance: true } }))).toEqual([
      'attention.contextParallel.rank:bad-option',
    ]);
  });

  it('declared size vs the input: hidden against its last dimension, at the module path', () => {
    const gpt = (name?: string) => attention({ hidden: 16, heads: 4, style: 'gpt2', positions: 32, ...(name !== undefined ? { name } : {}) });
    expect(estimate(gpt(), SEQ).params.total).toBe(1088);
    expect(errorOf(() => estimate(gpt(), { input: [1, 8, 12], loss: 'none' })).issues).toEqual([
      expect.objectContaining({ path: ['attention', 'hidden'], code: 'shape-mismatch', expected: '16', received: '12' }),
    ]);
    const nested = module('block', 'Block', graph1(gpt('attn')));
    expect(issues(() => estimate(seq(linear({ out: 12 }), nested), SEQ))).toEqual(['block.attn.hidden:shape-mismatch']);
    expect(issues(() => estimate(gpt(), { input: [8, 16], loss: 'none' }))).toEqual(['attention:bad-rank']);
  });
});

/** A module body that runs one layer. */
function graph1(layer: Layer): Layer {
  return seq(layer);
}

describe('multiheadAttention', () => {
  const base = { embedDim: 16, heads: 4 };
  it.each([
    ['wrong type', { embedDim: [16], heads: 4 }, ['multiheadAttention.embedDim:bad-option']],
    ['truthy non-boolean', { ...base, batchFirst: 'true' }, ['multiheadAttention.batchFirst:bad-option']],
    ['out of range', { ...base, dropout: -0.1 }, ['multiheadAttention.dropout:bad-option']],
    ['missing required', { heads: 4 }, ['multiheadAttention.embedDim:missing-option']],
    ['unknown key', { ...base, numHeads: 4 }, ['multiheadAttention.numHeads:unknown-option']],
    // torch: "embed_dim must be divisible by num_heads"
    ['heads not dividing embedDim', { embedDim: 16, heads: 3 }, ['multiheadAttention.heads:bad-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(loose(multiheadAttention, options))).toEqual(expected);
  });
  it('declared size vs the input: embedDim', () => {
    const attn = multiheadAttention({ ...base, batchFirst: true, name: 'self_attention' });
    expect(issues(() => estimate(seq(attn), { input: [1, 8, 12], loss: 'none' }))).toEqual(['self_attention.embedDim:shape-mismatch']);
    expect(issues(() => estimate(multiheadAttention(base), { input: [8, 16], loss: 'none' }))).toEqual(['multiheadAttention:bad-rank']);
  });
});

describe('mlaAttention', () => {
  const base = { hidden: 16, heads: 2, qLoraRank: 8, kvLoraRank: 8, qkNopeHeadDim: 8, qkRopeHeadDim: 4, vHeadDim: 8 };
  it.each([
    ['wrong type', { ...base, kvLoraRank: '8' }, ['mlaAttention.kvLoraRank:bad-option']],
    ['wrong type (qLoraRank: null or a size)', { ...base, qLoraRank: 'none' }, ['mlaAttention.qLoraRank:bad-option']],
    ['truthy non-boolean', { ...base, interleave: 1 }, ['mlaAttention.interleave:bad-option']],
    ['unknown enum', { ...base, impl: 'flash' }, ['mlaAttention.impl:bad-option']],
    ['unknown enum (cache)', { ...base, cache: 'kv' }, ['mlaAttention.cache:bad-option']],
    ['out of range', { ...base, vHeadDim: 0 }, ['mlaAttention.vHeadDim:bad-option']],
    ['missing required', { ...base, qLoraRank: undefined }, ['mlaAttention.qLoraRank:missing-option']],
    ['unknown key', { ...base, ropeTheta: 10000 }, ['mlaAttention.ropeTheta:unknown-option']],
    ['odd rotary head dim', { ...base, qkRopeHeadDim: 3 }, ['mlaAttention.qkRopeHeadDim:bad-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(loose(mlaAttention, options))).toEqual(expected);
  });
  it('takes q_lora_rank null (one q_proj)', () => {
    expect(mlaAttention({ ...base, qLoraRank: null }).childOrder?.[0]).toBe('q_proj');
  });
  it('declared size vs the input: hidden; the rotary tables as inputs', () => {
    expect(issues(() => estimate(mlaAttention(base), { input: [1, 8, 12], loss: 'none' }))).toEqual(['mlaAttention.hidden:shape-mismatch']);
    expect(issues(() => estimate(mlaAttention(base), SEQ))).toEqual(['mlaAttention.inputs:bad-layer']);
  });
});

describe('moeBlock', () => {
  const base = { name: 'mlp', hidden: 16, experts: 4, k: 2, intermediate: 8, impl: 'eager' };
  it.each([
    ['wrong type', { ...base, experts: 4n }, ['moeBlock.experts:bad-option']],
    ['truthy non-boolean', { ...base, renorm: 'false' }, ['moeBlock.renorm:bad-option']],
    ['unknown enum', { ...base, impl: 'triton' }, ['moeBlock.impl:bad-option']],
    ['unknown enum (score)', { ...base, score: 'sparsemax' }, ['moeBlock.score:bad-option']],
    ['unknown activation', { ...base, activation: 'laplace' }, ['moeBlock.activation:bad-option']],
    ['out of range', { ...base, capacityFactor: 0 }, ['moeBlock.capacityFactor:bad-option']],
    ['out of range (counts)', { ...base, counts: [4, 4, -1, 9] }, ['moeBlock.counts.2:bad-option']],
    ['missing required', { ...base, impl: undefined }, ['moeBlock.impl:missing-option']],
    ['unknown key', { ...base, topK: 2 }, ['moeBlock.topK:unknown-option']],
    ['nested', { ...base, shared: { intermediate: 8, name: 'shared_expert', className: 'MLP', gated: 'yes' } }, ['moeBlock.shared.gated:bad-option']],
    ['k above the experts', { ...base, k: 5 }, ['moeBlock.mlp.k:bad-attribute']],
    ['one count per expert', { ...base, counts: [8, 8] }, ['moeBlock.mlp.counts:bad-option']],
    ['sharedOn without shared', { ...base, sharedOn: 'input' }, ['moeBlock.mlp.sharedOn:bad-option']],
  ])('%s', (_, options, expected) => {
    expect(issues(loose(moeBlock, options))).toEqual(expected);
  });
  it('declared size vs the input: hidden', () => {
    const block = moeBlock({ name: 'mlp', hidden: 16, experts: 4, k: 2, intermediate: 8, impl: 'eager' });
    expect(issues(() => estimate(seq(block), { input: [1, 8, 12], loss: 'none' }))).toEqual(['mlp.hidden:shape-mismatch']);
    expect(estimate(block, SEQ).params.total).toBeGreaterThan(0);
  });
});

describe('mlp and gatedMlp', () => {
  it.each([
    ['wrong type', mlp, { hidden: 16, inner: '64' }, ['mlp.inner:bad-option']],
    ['truthy non-boolean', mlp, { hidden: 16, inner: 64, conv1d: 1 }, ['mlp.conv1d:bad-option']],
    ['unknown enum', mlp, { hidden: 16, inner: 64, activation: 'gelu_fast' }, ['mlp.activation:bad-option']],
    ['out of range', mlp, { hidden: 16, inner: 64, dropout: 2 }, ['mlp.dropout:bad-option']],
    ['missing required', mlp, { hidden: 16 }, ['mlp.inner:missing-option']],
    ['unknown key', mlp, { hidden: 16, inner: 64, intermediate: 64 }, ['mlp.intermediate:unknown-option']],
    ['wrong type', gatedMlp, { hidden: 16, intermediate: null }, ['gatedMlp.intermediate:bad-option']],
    ['truthy non-boolean', gatedMlp, { hidden: 16, intermediate: 32, bias: 'no' }, ['gatedMlp.bias:bad-option']],
    ['unknown enum', gatedMlp, { hidden: 16, intermediate: 32, activation: 'swiglu' }, ['gatedMlp.activation:bad-option']],
    ['out of range', gatedMlp, { hidden: 0, intermediate: 32 }, ['gatedMlp.hidden:bad-option']],
    ['missing required', gatedMlp, { intermediate: 32 }, ['gatedMlp.hidden:missing-option']],
    ['unknown key', gatedMlp, { hidden: 16, intermediate: 32, inner: 32 }, ['gatedMlp.inner:unknown-option']],
    ['nested', gatedMlp, { hidden: 16, intermediate: 32, tensorParallel: { size: 2 } }, ['gatedMlp.tensorParallel.sequence:missing-option']],
  ] as const)('%s (%o)', (_, builder, options, expected) => {
    expect(issues(loose(builder as (o: unknown) => unknown, options))).toEqual(expected);
  });
  it('a fused gate_up_proj under tensor parallelism is not modelled', () => {
    expect(issues(() => gatedMlp({ hidden: 16, intermediate: 32, fused: true, tensorParallel: { size: 2, sequence: false } }))).toEqual([
      'gatedMlp.tensorParallel:not-modelled',
    ]);
  });
  it('declared size vs the input: hidden', () => {
    expect(issues(() => estimate(mlp({ hidden: 16, inner: 64 }), { input: [1, 8, 12], loss: 'none' }))).toEqual(['mlp.hidden:shape-mismatch']);
    expect(issues(() => estimate(seq(gatedMlp({ hidden: 16, intermediate: 32, name: 'ffn' })), { input: [1, 8, 12], loss: 'none' }))).toEqual([
      'ffn.hidden:shape-mismatch',
    ]);
    expect(estimate(gatedMlp({ hidden: 16, intermediate: 32 }), SEQ).params.total).toBe(3 * 16 * 32);
  });
});

describe('squeezeExcitation', () => {
  it.each([
    ['wrong type', { squeeze: '4' }, ['squeezeExcitation.squeeze:bad-option']],
    ['unknown enum', { squeeze: 4, scaleActivation: 'relu' }, ['squeezeExcitation.scaleActivation:bad-option']],
    ['out of range', { squeeze: 0 }, ['squeezeExcitation.squeeze:bad-option']],
    ['missing required', {}, ['squeezeExcitation.squeeze:missing-option']],
    ['unknown key', { squeeze: 4, reduction: 4 }, ['squeezeExcitation.reduction:unknown-option']],
    ['not a layer', { squeeze: 4, activation: 'relu' }, ['squeezeExcitation.activation:bad-layer']],
  ])('%s', (_, options, expected) => {
    expect(issues(loose(squeezeExcitation, options))).toEqual(expected);
  });
  it('takes [N, C, H, W]', () => {
    expect(issues(() => estimate(squeezeExcitation({ squeeze: 2, name: 'se' }), { input: [8, 16, 16], loss: 'none' }))).toEqual(['squeezeExcitation:bad-rank']);
    expect(estimate(squeezeExcitation({ squeeze: 2 }), { input: [1, 8, 4, 4], loss: 'none' }).params.total).toBe(8 * 2 + 2 + 2 * 8 + 8);
  });
});

describe('repeatedBlocks', () => {
  const body = seq(relu());
  const make = (count: number): ModuleLayer => ({ kind: 'module', className: `Net${count}`, body: seq(relu()) });
  const call =
    (...args: unknown[]) =>
    () =>
      (repeatedBlocks as (...a: unknown[]) => unknown)(...args);
  it.each([
    ['count: wrong type', [true, 'h.', body, make], ['repeatedBlocks.count:bad-option']],
    ['count: out of range', [-1, 'h.', body, make], ['repeatedBlocks.count:bad-option']],
    ['count: past the layer limit', [10_001, 'h.', body, make], ['repeatedBlocks.count:bad-option']],
    ['prefix: wrong type', [2, 3, body, make], ['repeatedBlocks.prefix:bad-option']],
    ['body: not a layer', [2, 'h.', { kind: 'seq' }, make], ['repeatedBlocks.body:bad-layer']],
    ['build: not a function', [2, 'h.', body, 'make'], ['repeatedBlocks.build:bad-option']],
    ['stage: not a function', [2, 'h.', body, make, {}], ['repeatedBlocks.stage:bad-option']],
    [
      'all at once',
      [1.5, null, null, null],
      ['repeatedBlocks.count:bad-option', 'repeatedBlocks.prefix:bad-option', 'repeatedBlocks.body:bad-layer', 'repeatedBlocks.build:bad-option'],
    ],
  ])('%s', (_, args, expected) => {
    expect(issues(call(...args))).toEqual(expected);
  });
  it('checks what build and stage are given and return', () => {
    const blocks = repeatedBlocks(
      4,
      'h.',
      body,
      (n) => (n === 2 ? ({ kind: 'op' } as unknown as ModuleLayer) : make(n)),
      (start) => make(start),
    );
    expect(blocks.withCount(3).className).toBe('Net3');
    expect(issues(() => blocks.withCount(2))).toEqual(['repeatedBlocks.build:bad-layer']);
    expect(issues(() => blocks.withCount(-1))).toEqual(['repeatedBlocks.withCount:bad-option']);
    expect(issues(() => blocks.stage!(2, 2))).toEqual(['repeatedBlocks.stage.end:bad-option']);
    expect(issues(() => blocks.stage!(0, 5))).toEqual(['repeatedBlocks.stage.end:bad-option']);
    expect(blocks.stage!(1, 3).className).toBe('Net1');
  });
});

describe('qkNorm layers', () => {
  it('are layers with a placement', () => {
    const norm = rmsNorm({ size: 4 });
    expect(issues(() => attention({ hidden: 16, heads: 4, qkNorm: { q: norm, k: norm, at: 'after' as 'projection' } }))).toEqual([
      'attention.qkNorm.at:bad-option',
    ]);
    expect(issues(loose(attention, { hidden: 16, heads: 4, qkNorm: { q: norm } }))).toEqual([
      'attention.qkNorm.k:missing-option',
      'attention.qkNorm.at:missing-option',
    ]);
  });
});
