import { fail } from '../errors.js';

/** What a safetensors header says about a checkpoint. */
export interface SafetensorsSummary {
  readonly tensors: number;
  readonly params: number;
  readonly bytes: number;
  /** Element counts by safetensors dtype name (F32, BF16, F16, I64, U8, …). */
  readonly byDtype: Readonly<Record<string, number>>;
}

/**
 * Counts parameters and dtypes from a safetensors header (the JSON after the file's 8-byte
 * length), without the weights: each entry's shape gives its elements, its data_offsets its bytes.
 *
 * @example
 * ```ts
 * import { safetensorsSummary } from 'vram-ts';
 * const header = { 'w': { dtype: 'BF16', shape: [4, 8], data_offsets: [0, 64] }, __metadata__: {} };
 * console.log(safetensorsSummary(header).params); // 32
 * ```
 */
export function safetensorsSummary(header: unknown): SafetensorsSummary {
  if (typeof header !== 'object' || header === null) fail('bad-safetensors', 'the safetensors header must be a JSON object', { path: ['header'] });
  let tensors = 0;
  let params = 0;
  let bytes = 0;
  const byDtype: Record<string, number> = {};
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') continue;
    const e = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof e !== 'object' || e === null || typeof e.dtype !== 'string' || !Array.isArray(e.shape) || !Array.isArray(e.data_offsets) || e.data_offsets.length !== 2) {
      fail('bad-safetensors', 'a tensor entry needs dtype, shape and data_offsets', { path: ['header', name] });
    }
    const shape = e.shape as unknown[];
    if (!shape.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0)) fail('bad-safetensors', 'shape must be non-negative integers', { path: ['header', name, 'shape'] });
    const [start, end] = e.data_offsets as [number, number];
    const elements = (shape as number[]).reduce((a, b) => a * b, 1);
    tensors += 1;
    params += elements;
    bytes += end - start;
    byDtype[e.dtype] = (byDtype[e.dtype] ?? 0) + elements;
  }
  return { tensors, params, bytes, byDtype };
}

/**
 * Reads the header length of a safetensors file from its first 8 bytes (little-endian u64).
 *
 * @example
 * ```ts
 * import { safetensorsHeaderLength } from 'vram-ts';
 * console.log(safetensorsHeaderLength(new Uint8Array([16, 0, 0, 0, 0, 0, 0, 0]))); // 16
 * ```
 */
export function safetensorsHeaderLength(first8: Uint8Array): number {
  if (first8.length < 8) fail('bad-safetensors', 'a safetensors file starts with an 8-byte header length', { path: ['file'] });
  const view = new DataView(first8.buffer, first8.byteOffset, 8);
  const length = Number(view.getBigUint64(0, true));
  if (length <= 0 || length > 100_000_000) fail('bad-safetensors', 'implausible safetensors header length', { path: ['file'], received: String(length) });
  return length;
}
