/** The mixture-of-experts options and what every MoE decoder builder shares (Mixtral/Qwen-MoE in moe.ts, DeepSeek in deepseek.ts): the experts implementation, each layer's routing, ModelMeta.moe. */
import { fail } from '../errors.js';
import type { ModelMeta } from '../nn/types.js';
import type { ExpertsImpl } from '../ops/moe/index.js';
import { decoderOptions } from '../options.js';
import { type Path, show, validate } from '../validate.js';
import type { HFConfig } from './config-reader.js';

/** Why a config value is not JSON data (what config.json parses to), or undefined when it is. */
function notJson(value: unknown, depth: number): string | undefined {
  if (value === null || value === undefined || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return undefined;
  if (depth > 32) return 'nested too deep for a config';
  if (typeof value !== 'object') return `a ${typeof value} is not JSON data`;
  const proto = Object.getPrototypeOf(value);
  if (!Array.isArray(value) && proto !== Object.prototype && proto !== null) return 'only lists and plain objects are JSON data';
  for (const item of Object.values(value)) {
    const problem = notJson(item, depth + 1);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

/**
 * What the mixture-of-experts builders check first: the config, a plain object of JSON data
 * (each field's problem at its name, the config itself at `config`), and the options by the
 * decoder builders' schema (at `options`).
 */
export function checkMoeArguments(config: unknown, options: unknown): HFConfig {
  const proto = typeof config === 'object' && config !== null && !Array.isArray(config) ? Object.getPrototypeOf(config) : undefined;
  if (proto !== Object.prototype && proto !== null)
    fail('bad-config', 'a config must be an object (config.json parsed)', { path: ['config'], expected: 'a plain object', received: show(config) });
  for (const [field, value] of Object.entries(config as HFConfig)) {
    const problem = notJson(value, 0);
    if (problem !== undefined)
      fail('bad-config', `${field} must be JSON data: ${problem}`, { path: [field] as Path, expected: 'JSON data', received: show(value) });
  }
  validate(options, decoderOptions, ['options']);
  return config as HFConfig;
}

/** Options of the mixture-of-experts decoders (`DecoderOptions.moe`). */
export interface MoeOptions {
  /**
   * transformers 5.x's `experts_implementation`: `grouped_mm` (the default there) or `eager`
   * (a loop over the experts hit). transformers 4.x always loops over every expert.
   */
  readonly experts?: 'eager' | 'grouped_mm';
  /**
   * Measured routing: for each MoE layer in order, the (token, k) pairs each expert gets in the
   * forward estimated (they add up to tokens × `num_experts_per_tok`). Default: balanced.
   */
  readonly expertTokens?: readonly (readonly number[])[];
  /** A capacity factor: each expert holds at most ⌈factor · T·k / E⌉ pairs (see {@link MoeRouting}). */
  readonly capacityFactor?: number;
}

/** Which experts implementation a release runs. */
export function expertsImpl(release: string, options: MoeOptions | undefined): ExpertsImpl {
  const major = Number(release.split('.')[0]);
  if (major < 5) {
    if (options?.experts !== undefined)
      fail('bad-option', 'experts_implementation exists from transformers 5', {
        path: ['options', 'moe', 'experts'],
        expected: 'absent for transformers 4.x',
        received: options.experts,
      });
    return 'loop';
  }
  return options?.experts ?? 'grouped_mm';
}

/** The routing of the n-th MoE layer from the options, checked. */
export function layerRouting(
  options: MoeOptions | undefined,
  moeIndex: number,
  experts: number,
  moeLayers: number,
): { counts?: readonly number[]; capacityFactor?: number } {
  const tokens = options?.expertTokens;
  if (tokens !== undefined && tokens.length !== moeLayers)
    fail('bad-option', 'one list of expert token counts per MoE layer', {
      path: ['options', 'moe', 'expertTokens'],
      expected: `${moeLayers} lists`,
      received: String(tokens.length),
    });
  const counts = tokens?.[moeIndex];
  if (counts !== undefined && counts.length !== experts)
    fail('bad-option', 'one token count per expert', {
      path: ['options', 'moe', 'expertTokens', moeIndex],
      expected: `${experts} counts`,
      received: String(counts.length),
    });
  return { ...(counts !== undefined ? { counts } : {}), ...(options?.capacityFactor !== undefined ? { capacityFactor: options.capacityFactor } : {}) };
}

/** A routed expert's parameters: three [I, H] matrices (gate, up, down). */
const expertSize = (hidden: number, inner: number): number => 3 * hidden * inner;

/** ModelMeta.moe from the layer plan. */
export function moeMeta(hidden: number, experts: number, k: number, inner: number, moeLayers: number, sharedExperts: number): NonNullable<ModelMeta['moe']> {
  const expertParams = expertSize(hidden, inner);
  return { experts, k, moeLayers, expertParams, sharedExperts, inactiveParams: moeLayers * (experts - k) * expertParams };
}
