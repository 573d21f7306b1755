import { fail } from '../errors.js';
import { bounds } from '../sym/bounds.js';
import type { Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import type { TensorSpec } from '../tensor/spec.js';
import type { OpContext } from './types.js';

/** Fails unless the input has one of the given ranks. */
export function expectRank(spec: TensorSpec, ranks: readonly number[], ctx: OpContext, what: string): void {
  if (!ranks.includes(spec.shape.length)) {
    fail('bad-rank', `${what} expects a ${ranks.join(' or ')}-D input`, {
      path: ctx.path,
      expected: `${ranks.join(' or ')} dimensions`,
      received: `[${spec.shape.map(formatDim).join(', ')}]`,
    });
  }
}

/** A positive integer attribute, or a VramError naming it. */
export function positiveInt(value: unknown, name: string, ctx: OpContext, min = 1): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    fail('bad-attribute', `${name} must be an integer >= ${min}`, { path: ctx.path, expected: `integer >= ${min}`, received: String(value) });
  }
  return value;
}

/** A number or [h, w] pair attribute as a pair of integers >= min. */
export function intPair(value: number | readonly [number, number], name: string, ctx: OpContext, min: number): readonly [number, number] {
  const pair = typeof value === 'number' ? ([value, value] as const) : value;
  if (!Array.isArray(pair) || pair.length !== 2)
    fail('bad-attribute', `${name} must be a number or a [h, w] pair`, { path: ctx.path, received: JSON.stringify(value) });
  return [positiveInt(pair[0], name, ctx, min), positiveInt(pair[1], name, ctx, min)];
}

/** Fails when a dimension is surely below `min` (always for numbers; by bounds for expressions). */
export function expectAtLeast(dim: Dim, min: number, ctx: OpContext, message: string): void {
  const upper = bounds(dim).max;
  if (upper < min) fail('bad-shape', message, { path: ctx.path, expected: `>= ${min}`, received: formatDim(dim) });
}

/** A concrete dimension (channel counts must be known to build parameters). */
export function concreteDim(dim: Dim, what: string, ctx: OpContext): number {
  if (typeof dim !== 'number') fail('symbolic-channels', `${what} must be a concrete number`, { path: ctx.path, received: formatDim(dim) });
  return dim;
}

/** A dimension index as PyTorch takes it (negative counts from the end), checked against the rank. */
export function dimIndex(dim: number, rank: number, ctx: OpContext, what = 'dim'): number {
  const index = dim < 0 ? dim + rank : dim;
  if (!Number.isSafeInteger(index) || index < 0 || index >= rank) {
    fail('bad-attribute', `${what} out of range`, { path: ctx.path, expected: `${-rank} <= ${what} < ${rank}`, received: String(dim) });
  }
  return index;
}
