import { fail } from '../../errors.js';
import { deepFreeze } from '../../freeze.js';
import { decoderOptions } from '../../options.js';
import { show, validate } from '../../validate.js';
import type { ModuleLayer } from '../../nn/types.js';
import type { DecoderOptions } from '../llama.js';
import { fromHFConfig } from '../hf.js';
import type { LlmEntry } from './entry.js';
import { GEMMA } from './gemma.js';
import { LLAMA } from './llama-mistral.js';
import { MOE } from './mixtures.js';
import { PHI_GPT2 } from './phi-gpt2.js';
import { QWEN2_5, QWEN3 } from './qwen.js';

export type { LlmEntry } from './entry.js';

/**
 * Catalog LLMs with their configs as data (the memory-relevant fields of each repository's
 * config.json, `torch_dtype` included) and their published parameter totals, one file of
 * ./ per family, in this order.
 */
export const LLMS: readonly LlmEntry[] = families();

/** The families joined (a call bundlers may drop when LLMS is unread: spreads in a constant they keep). */
/* @__NO_SIDE_EFFECTS__ */
function families(): readonly LlmEntry[] {
  return deepFreeze([...QWEN2_5, ...LLAMA, ...QWEN3, ...GEMMA, ...PHI_GPT2, ...MOE]);
}

function normalise(name: string): string {
  return name.trim().toLowerCase().replace(/_/g, '-');
}

/**
 * A catalog LLM by id (`qwen2.5-0.5b`, `llama-3-8b`, `gpt2`, …) or repository name.
 *
 * @example
 * ```ts
 * import { estimate, llm } from 'vram-ts';
 * console.log(estimate(llm('qwen2.5-0.5b'), { input: [1, 8], mode: 'inference' }).params.total); // 494032768
 * ```
 */
export function llm(name: string, options: DecoderOptions = {}): ModuleLayer {
  // The options' schema (the decoders' own) before the name is looked up: a bad option is found whatever the name.
  validate(options, decoderOptions, ['options']);
  if (typeof name !== 'string')
    fail('unknown-model', 'a catalog LLM is named by a string', { path: ['model'], expected: LLMS.map((e) => e.id).join(' | '), received: show(name) });
  const key = normalise(name);
  const entry = LLMS.find((e) => e.id === key || normalise(e.repo) === key);
  if (entry === undefined) fail('unknown-model', 'unknown catalog LLM', { path: ['model'], expected: LLMS.map((e) => e.id).join(' | '), received: name });
  return fromHFConfig(entry.config, options);
}
