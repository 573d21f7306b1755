import { estimateResult } from '../estimate.js';
import type { Estimate } from '../estimate-types.js';
import { validate } from '../validate.js';
import { isExpr } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';

/**
 * An estimate as plain JSON-ready data: numbers stay numbers, expressions become their
 * text, the IR and the replayable programs are left out; a concrete CUDA estimate's
 * `bytes.reserved`, `peak.reserved` and `peak.fragmentation` are written (they replay the
 * step). Anything but a result of estimate()
 * (a copy too) is a VramError.
 *
 * @example
 * ```ts
 * import { estimate, estimateToJSON, mobilenetV3Small } from 'vram-ts';
 * const json = estimateToJSON(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(JSON.parse(JSON.stringify(json)).params.total); // 1520931
 * ```
 */
export function estimateToJSON(result: Estimate): Record<string, unknown> {
  validate(result, estimateResult, ['estimateToJSON', 'result']);
  const plain = (value: unknown): unknown => {
    if (isExpr(value)) return formatDim(value);
    if (Array.isArray(value)) return value.map(plain);
    if (typeof value === 'object' && value !== null) {
      return Object.fromEntries(
        Object.entries(value)
          .filter(([k]) => k !== 'program' && k !== 'candidates')
          .map(([k, v]) => [k, plain(v)]),
      );
    }
    return value;
  };
  const { ir, ...rest } = result;
  const json = plain(rest) as Record<string, Record<string, unknown>>;
  // The caching allocator's figures (concrete CUDA estimates), read here: not enumerable.
  if (result.bytes.reserved !== undefined) {
    json.bytes = { ...json.bytes, reserved: result.bytes.reserved };
    json.peak = { ...json.peak, reserved: result.peak.reserved, fragmentation: result.peak.fragmentation };
  }
  return { ...json, settings: plain(ir.settings) };
}
