/**
 * Hostile arguments to the mixture-of-experts builders and counts (issue "Hostile inputs
 * everywhere"): configs and options that are not objects or not JSON data, a model_type read as
 * an inherited key, models and totals activeParams / wholeParams cannot count from, and
 * transformersRules' path — each a VramError with a path, never a TypeError or a wrong count.
 */
import { describe, expect, it } from 'vitest';
import { activeParams, deepseekFromHFConfig, estimate, fromHFConfig, linear, moeFromHFConfig, transformersRules, wholeParams } from '../../src/index.js';
import { TINY_MIXTRAL, TINY_QWEN3_MOE } from '../helpers/tiny-configs.js';
import { errorOf, issueOf } from '../helpers/errors.js';

const MIXTRAL = TINY_MIXTRAL;
const QWEN3_MOE = TINY_QWEN3_MOE;

describe('moeFromHFConfig and deepseekFromHFConfig refuse junk configs and options', () => {
  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a list', [MIXTRAL]],
    ['a Map', new Map()],
  ])('a config that is %s', (_, junk) => {
    expect(issueOf(() => moeFromHFConfig(junk as never))).toBe('config:bad-config');
    expect(issueOf(() => deepseekFromHFConfig(junk as never))).toBe('config:bad-config');
  });

  it('a model_type that is an inherited key or no string', () => {
    expect(issueOf(() => moeFromHFConfig({ ...MIXTRAL, model_type: 'toString' }))).toBe('model_type:unsupported-model');
    expect(issueOf(() => moeFromHFConfig({ ...MIXTRAL, model_type: { toString: 1, valueOf: 'x' } }))).toBe('model_type:unsupported-model');
    expect(issueOf(() => deepseekFromHFConfig({ model_type: ['deepseek_v3'] }))).toBe('model_type:unsupported-model');
  });

  it('config values that are not JSON data', () => {
    expect(issueOf(() => moeFromHFConfig({ ...QWEN3_MOE, num_key_value_heads: 1n }))).toBe('num_key_value_heads:bad-config');
    expect(issueOf(() => moeFromHFConfig({ ...QWEN3_MOE, mlp_only_layers: [Symbol('x')] }))).toBe('mlp_only_layers:bad-config');
    expect(issueOf(() => deepseekFromHFConfig({ model_type: 'deepseek_v3', rope_scaling: new Date(0) }))).toBe('rope_scaling:bad-config');
  });

  it('options that are not an object of the decoder options', () => {
    expect(issueOf(() => moeFromHFConfig(MIXTRAL, null as never))).toBe('options:bad-option');
    expect(issueOf(() => moeFromHFConfig(MIXTRAL, { transformers: 1n } as never))).toBe('options.transformers:bad-option');
    expect(issueOf(() => deepseekFromHFConfig({ model_type: 'deepseek_v3' }, { atention: 'eager' } as never))).toBe('options.atention:unknown-option');
  });

  it('builds models whose meta is frozen', () => {
    const m = moeFromHFConfig(MIXTRAL, { transformers: '4.40.2' });
    expect(Object.isFrozen(m.meta)).toBe(true);
    expect(Object.isFrozen(m.meta?.moe)).toBe(true);
  });
});

describe('activeParams and wholeParams refuse what they cannot count', () => {
  const moe = fromHFConfig(QWEN3_MOE);
  const total = estimate(moe, { input: [1, 8], mode: 'inference' }).params.total as number;

  it('a model that is no layer, a total that is no count', () => {
    expect(issueOf(() => activeParams(undefined as never, 10))).toBe('activeParams.model:bad-layer');
    expect(issueOf(() => wholeParams(null as never, 10))).toBe('wholeParams.model:bad-layer');
    expect(issueOf(() => wholeParams(linear({ out: 4 }) as never, Number.NaN))).toBe('wholeParams.total:bad-option');
    expect(issueOf(() => activeParams(moe, -3e134))).toBe('activeParams.total:bad-option');
    expect(issueOf(() => activeParams(moe, new Set() as never))).toBe('activeParams.total:bad-option');
  });

  it('a total below what the routed experts hold, a tampered meta', () => {
    expect(issueOf(() => activeParams(moe, 1000))).toBe('activeParams.total:bad-option');
    expect(issueOf(() => activeParams({ ...moe, meta: { ...moe.meta!, moe: { ...moe.meta!.moe!, k: 9 } } }, total))).toBe(
      'activeParams.model.meta.moe:bad-meta',
    );
    expect(issueOf(() => wholeParams({ ...moe, meta: { ...moe.meta!, moe: { ...moe.meta!.moe!, experts: 'x' } } } as never, total))).toBe(
      'wholeParams.model.meta.moe.experts:bad-option',
    );
  });

  it('counts as before for the models the catalog builds', () => {
    expect(wholeParams(linear({ out: 4 }) as never, 20)).toBe(20);
    expect(activeParams(moe, total)).toBe(total - moe.meta!.moe!.inactiveParams);
  });
});

describe('transformersRules refuses a path that is no list of names', () => {
  it.each([
    ['a number', 55],
    ['an object', {}],
    ['null', null],
    ['a list with an object', [{}]],
  ])('%s', (_, path) => {
    expect(issueOf(() => transformersRules('1.5', path as never))).toMatch(/^transformersRules\.path(\.0)?:bad-option$/);
  });

  it('shows a version it cannot print as JSON', () => {
    expect(errorOf(() => transformersRules(1n as never)).issues[0]).toMatchObject({ path: ['transformers'], code: 'unsupported-release', received: '1n' });
  });
});
