import type { Check } from './validate.js';
import { anyOf, arrayOf, boolean, integer, number, object, oneOf, string } from './validate.js';
import { isDim } from './sym/args.js';
import { isExpr } from './sym/expr.js';
import { DTYPE_BITS } from './tensor/dtype.js';
import { LIMITS } from './limits.js';

/**
 * Run-time schemas of the options the catalog's builders take, with the pieces estimate-options.ts
 * builds on (a dimension, a dtype), so that plain-JavaScript and browser callers get an error
 * with a path for every misspelt key, wrong type or value out of range.
 */

const DTYPES = Object.keys(DTYPE_BITS);

/** A dimension: a safe integer >= 1, or a symbolic expression. */
export const dim: Check = (value, path, issues) => {
  // An expression shaped as one all the way down (a forged `{ kind: 'expr' }` is not one).
  if (isExpr(value) && isDim(value)) return;
  integer(1)(value, path, issues);
};

/** A dtype name. */
export const dtype: Check = oneOf(DTYPES, 'dtype');

/** DecoderOptions / HFConfigOptions (fromHFConfig, llm, llamaFamily, gpt2Model). */
export const decoderOptions = object({
  fields: {
    attention: oneOf(['eager', 'sdpa', 'flash'], 'attention'),
    dtype,
    transformers: string,
    useCache: boolean,
    tensorParallel: object({
      fields: { size: integer(1, 1_000_000), rank: integer(0, 1_000_000), sequenceParallel: boolean, lossParallel: boolean, retie: boolean },
      required: ['size'],
    }),
    contextParallel: object({ fields: { size: integer(2, 1_000_000), rank: integer(0, 1_000_000), loadBalance: boolean }, required: ['size'] }),
    expertParallel: object({ fields: { size: integer(2, 1_000_000), rank: integer(0, 1_000_000) }, required: ['size'] }),
    pipelineStage: object({ fields: { layers: arrayOf(integer(0, LIMITS.layers), { min: 2, max: 2 }) }, required: ['layers'] }),
    // What the *ForCausalLM forward computes after the decoder (catalog/lm-head.ts): a trainer's loss or logits.
    head: anyOf(
      [
        object({ fields: { kind: oneOf(['loss'], 'head'), autocast: boolean, useCache: boolean }, required: ['kind'] }),
        object({ fields: { kind: oneOf(['logits'], 'head'), keep: integer(1), autocast: boolean, useCache: boolean }, required: ['kind'] }),
        object({
          fields: {
            kind: oneOf(['token-logps'], 'head'),
            keep: integer(1),
            entropy: boolean,
            loss: oneOf(['grpo', 'none']),
            beta: boolean,
            autocast: boolean,
            useCache: boolean,
          },
          required: ['kind', 'keep'],
        }),
        object({ fields: { kind: oneOf(['chunked-nll'], 'head'), chunk: integer(1), autocast: boolean, useCache: boolean }, required: ['kind'] }),
        object({ fields: { kind: oneOf(['liger-flce'], 'head'), autocast: boolean, useCache: boolean }, required: ['kind'] }),
        object({ fields: { kind: oneOf(['loss-metrics'], 'head'), autocast: boolean, useCache: boolean }, required: ['kind'] }),
      ],
      "a head: { kind: 'loss' | 'logits' | 'token-logps' | 'chunked-nll' | 'liger-flce' | 'loss-metrics', … }",
    ),
    // Mixture-of-experts decoders (catalog/moe.ts): experts_implementation, measured routing, capacity.
    moe: object({
      fields: {
        experts: oneOf(['eager', 'grouped_mm'], 'experts implementation'),
        expertTokens: arrayOf(arrayOf(integer(0))),
        capacityFactor: number(Number.MIN_VALUE),
      },
    }),
  },
});
