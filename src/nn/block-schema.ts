import { fail, type VramIssue } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import { boolean, integer, number, object, oneOf, type Check, type Path } from '../validate.js';
import { HF_ACTIVATIONS } from './hfActivation.js';
import type { Fields } from './op.js';
import type { GraphBuilder, TensorRef } from './types.js';

// The blocks' schemas share these pieces (attention, MLA, MoE and the catalog's decoders too).

/** The same check for each of several options (a schema's sizes, flags, probabilities). */
export function fieldsOf(keys: readonly string[], check: Check): Fields {
  return Object.fromEntries(keys.map((key) => [key, check]));
}

/** A dropout probability: torch.nn.Dropout's "dropout probability has to be between 0 and 1". */
export const probability: Check = number(0, 1);

/** A Hugging Face `ACT2FN` name vram-ts models ({@link HF_ACTIVATIONS}). */
export const activationName: Check = oneOf(HF_ACTIVATIONS, 'activation');

/** `false` (the option off), or one of its settings. */
export function falseOr(values: readonly string[], noun: string): Check {
  const named = oneOf(values, noun);
  return (value, path, issues) => {
    if (value === false) return;
    const found: VramIssue[] = [];
    named(value, path, found);
    for (const issue of found) issues.push({ ...issue, expected: `false | ${issue.expected}` });
  };
}

/** One rank of tensor parallelism of a block: its size and whether the sequence is sharded too. */
export const blockTensorParallel: Check = object({ fields: { size: integer(1, 1_000_000), sequence: boolean }, required: ['size', 'sequence'] });

/** The path of the module being traced, or `[builder]` for the model itself (named by its builder, as the options' errors are). */
export function tracedPath(g: GraphBuilder, builder: string): Path {
  return g.path.length > 0 ? g.path : [builder];
}

/**
 * The traced input against the sizes a block was built with: a VramError at the module's path
 * (`[…, 'self_attn', 'hidden']`; the builder's name for the model itself) when the input's rank is
 * outside `[min, max]` or its last dimension is a number other than the option's (a symbolic one is
 * left to the ops).
 */
export function checkInput(
  g: GraphBuilder,
  x: TensorRef,
  [min, max]: readonly [number, number],
  [builder, option, declared]: readonly [string, string, number],
): void {
  const shape = x.shape;
  if (shape.length < min || shape.length > max) {
    const ranks = min === max ? `${min}` : max === Number.MAX_SAFE_INTEGER ? `at least ${min}` : `${min} to ${max}`;
    fail('bad-rank', `the input must have ${ranks} dimensions`, {
      path: tracedPath(g, builder),
      expected: `rank ${ranks}`,
      received: `[${shape.map(formatDim).join(', ')}]`,
    });
  }
  const last: Dim = shape[shape.length - 1]!;
  if (typeof last === 'number' && last !== declared)
    fail('shape-mismatch', `the input's last dimension differs from ${option}`, {
      path: [...tracedPath(g, builder), option],
      expected: String(declared),
      received: String(last),
    });
}
