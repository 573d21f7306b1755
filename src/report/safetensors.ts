import { fail } from '../errors.js';

/** What a safetensors header says about a checkpoint. */
export interface SafetensorsSummary {
  readonly tensors: number;
  readonly params: number;
  readonly bytes: number;
  /** Element counts by safetensors dtype name (F32, BF16, F16, I64, U8, …). */
  readonly byDtype: Readonly<Record<string, number>>;
}

/** What else a safetensors header is checked against. */
export interface SafetensorsCheck {
  /**
   * The bytes after the header (file length − 8 − header length), when known: the offsets must
   * end exactly there, as the safetensors library requires (`MetadataIncompleteBuffer`).
   */
  readonly dataBytes?: number;
}

/**
 * Counts parameters and dtypes from a safetensors header (the JSON after the file's 8-byte
 * length), without the weights: each entry's shape gives its elements, its dtype their bytes,
 * which its data_offsets must span exactly. As the safetensors library validates a header: the
 * entries sorted by offset must tile the data from 0 with no gap or overlap, a tensor's bits must
 * be whole bytes, `__metadata__` is an object of strings, and with `dataBytes` the data ends at
 * the file's end. Unknown dtypes, bad offsets and totals past 2^53 are a VramError with the
 * entry's path.
 *
 * @example
 * ```ts
 * import { safetensorsSummary } from 'vram-ts';
 * const header = { 'w': { dtype: 'BF16', shape: [4, 8], data_offsets: [0, 64] }, __metadata__: {} };
 * console.log(safetensorsSummary(header).params); // 32
 * ```
 */
export function safetensorsSummary(header: unknown, check: SafetensorsCheck = {}): SafetensorsSummary {
  if (typeof header !== 'object' || header === null || Array.isArray(header))
    fail('bad-safetensors', 'the safetensors header must be a JSON object', { path: ['header'] });
  let tensors = 0;
  let params = 0;
  let bytes = 0;
  const byDtype: Record<string, number> = {};
  const exact = (value: number, what: string, path: readonly (string | number)[]) => {
    if (!Number.isSafeInteger(value)) fail('overflow', `${what} is not an exact integer (past 2^53)`, { path });
    return value;
  };
  const spans: [number, number, string][] = [];
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      checkMetadata(entry);
      continue;
    }
    const at = ['header', name];
    const e = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (
      typeof e !== 'object' ||
      e === null ||
      typeof e.dtype !== 'string' ||
      !Array.isArray(e.shape) ||
      !Array.isArray(e.data_offsets) ||
      e.data_offsets.length !== 2
    ) {
      fail('bad-safetensors', 'a tensor entry needs dtype, shape and data_offsets', { path: at });
    }
    const bits = Object.hasOwn(SAFETENSORS_BITS, e.dtype) ? SAFETENSORS_BITS[e.dtype] : undefined;
    if (bits === undefined)
      fail('bad-safetensors', 'unknown safetensors dtype', {
        path: [...at, 'dtype'],
        expected: Object.keys(SAFETENSORS_BITS).join(' | '),
        received: JSON.stringify(e.dtype),
      });
    const shape = e.shape as unknown[];
    if (!shape.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0))
      fail('bad-safetensors', 'shape must be non-negative integers', { path: [...at, 'shape'] });
    const [begin, finish] = e.data_offsets as unknown[];
    if (
      typeof begin !== 'number' ||
      typeof finish !== 'number' ||
      !Number.isSafeInteger(begin) ||
      !Number.isSafeInteger(finish) ||
      begin < 0 ||
      finish < begin
    ) {
      fail('bad-safetensors', 'data_offsets must be two integers, 0 <= begin <= end', {
        path: [...at, 'data_offsets'],
        received: JSON.stringify(e.data_offsets),
      });
    }
    const elements = exact(
      (shape as number[]).reduce((a, b) => a * b, 1),
      'the element count',
      [...at, 'shape'],
    );
    const bitCount = exact(elements * bits, 'the bit count', [...at, 'shape']);
    if (bitCount % 8 !== 0)
      fail('bad-safetensors', 'the tensor is not a whole number of bytes (safetensors: MisalignedSlice)', {
        path: [...at, 'shape'],
        received: `${bitCount} bits`,
      });
    const size = bitCount / 8;
    if (finish - begin !== size)
      fail('bad-safetensors', 'data_offsets do not span the tensor', {
        path: [...at, 'data_offsets'],
        expected: `${size} bytes for ${e.dtype} ${JSON.stringify(shape)}`,
        received: `${finish - begin} bytes`,
      });
    spans.push([begin as number, finish as number, name]);
    tensors += 1;
    params = exact(params + elements, 'the parameter total', at);
    bytes = exact(bytes + size, 'the byte total', at);
    byDtype[e.dtype] = exact((byDtype[e.dtype] ?? 0) + elements, 'a dtype total', at);
  }
  const end = checkTiling(spans);
  const last = spans[spans.length - 1];
  if (check.dataBytes !== undefined && end > check.dataBytes)
    fail('bad-safetensors', 'data_offsets run past the end of the file', {
      path: ['header', last![2], 'data_offsets'],
      expected: `end ≤ ${check.dataBytes}`,
      received: JSON.stringify([last![0], last![1]]),
    });
  if (check.dataBytes !== undefined && end < check.dataBytes)
    fail('bad-safetensors', 'the file has data past its last tensor (safetensors: MetadataIncompleteBuffer)', {
      path: ['header'],
      expected: `${end} bytes of data after the header`,
      received: `${check.dataBytes} bytes`,
    });
  return { tensors, params, bytes, byDtype };
}

/** `__metadata__`: an object of string values (the library reads it as a map of strings). */
function checkMetadata(entry: unknown): void {
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
    fail('bad-safetensors', '__metadata__ must be an object of strings', {
      path: ['header', '__metadata__'],
      received: Array.isArray(entry) ? 'an array' : String(entry),
    });
  for (const [key, value] of Object.entries(entry as Record<string, unknown>))
    if (typeof value !== 'string')
      fail('bad-safetensors', '__metadata__ values must be strings', { path: ['header', '__metadata__', key], received: typeof value });
}

/** Sorted by offset, the spans must tile the data from 0 (the library's InvalidOffset otherwise); their end. */
function checkTiling(spans: [number, number, string][]): number {
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let at = 0;
  for (const [begin, finish, name] of spans) {
    if (begin !== at)
      fail('bad-safetensors', begin < at ? 'data_offsets overlap another tensor' : 'data_offsets leave a gap before this tensor', {
        path: ['header', name, 'data_offsets'],
        expected: `begin ${at}`,
        received: String(begin),
      });
    at = finish;
  }
  return at;
}

/** Bits per element of the dtypes a safetensors header may name (the format's spec; FP4/FP6 packed). */
const SAFETENSORS_BITS: Readonly<Record<string, number>> = Object.freeze({
  BOOL: 8,
  U8: 8,
  I8: 8,
  F8_E5M2: 8,
  F8_E4M3: 8,
  F8_E8M0: 8,
  I16: 16,
  U16: 16,
  F16: 16,
  BF16: 16,
  I32: 32,
  U32: 32,
  F32: 32,
  F64: 64,
  C64: 64,
  I64: 64,
  U64: 64,
  F4: 4,
  F6_E2M3: 6,
  F6_E3M2: 6,
});

/**
 * Reads the header length of a safetensors file from its first 8 bytes (little-endian u64).
 *
 * @example
 * ```ts
 * import { safetensorsHeaderLength } from 'vram-ts/internals';
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
