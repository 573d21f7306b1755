import { fail } from '../errors.js';
import { integer, object, showJson, string, validate } from '../validate.js';

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
  /**
   * The header's JSON text, when known: a tensor (or a field of one) named twice in it is an
   * error, where `JSON.parse` would keep the last silently and the safetensors library refuses it.
   */
  readonly text?: string;
}

/**
 * Counts parameters and dtypes from a safetensors header (the JSON after the file's 8-byte
 * length), without the weights: each entry's shape gives its elements, its dtype their bytes,
 * which its data_offsets must span exactly. As the safetensors library validates a header: the
 * entries sorted by offset must tile the data from 0 with no gap or overlap, a tensor's bits must
 * be whole bytes, `__metadata__` is an object of strings, with `dataBytes` the data ends at
 * the file's end, and with `text` no object of the header names a key twice. Unknown dtypes, bad offsets and totals past 2^53 are a VramError with the
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
  validate(check, object({ fields: { dataBytes: integer(0), text: string } }), ['check']);
  if (check.text !== undefined) checkDuplicates(check.text);
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
        received: showJson(e.dtype),
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
        received: showJson(e.data_offsets),
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
        expected: `${size} bytes for ${String(e.dtype)} ${showJson(shape)}`,
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
      received: showJson([last![0], last![1]]),
    });
  if (check.dataBytes !== undefined && end < check.dataBytes)
    fail('bad-safetensors', 'the file has data past its last tensor (safetensors: MetadataIncompleteBuffer)', {
      path: ['header'],
      expected: `${end} bytes of data after the header`,
      received: `${check.dataBytes} bytes`,
    });
  return { tensors, params, bytes, byDtype };
}

/** A key named twice in one object of the header's text: an error naming it (a tensor at the top level). */
function checkDuplicates(text: string): void {
  const path = duplicateKeyPath(text);
  if (path === undefined) return;
  const key = JSON.stringify(path[path.length - 1]);
  fail(
    'bad-safetensors',
    path.length === 1
      ? `the header names the tensor ${key} twice (JSON.parse keeps the last; the safetensors library refuses it)`
      : `the header gives the key ${key} twice in one object (JSON.parse keeps the last)`,
    { path: ['header', ...path], expected: 'each name once', received: `${key} twice` },
  );
}

/** An object or array of a JSON text still open while scanning it. */
interface Open {
  /** The keys read so far (an object), undefined for an array. */
  readonly keys: Set<string> | undefined;
  /** An object: the next string is a key. */
  awaitingKey: boolean;
  /** The key of the value being read (an object), or its index (an array). */
  at: string | number;
}

/**
 * The path (keys and indices) of the first key that an object of a JSON text names twice, or
 * undefined. `JSON.parse` keeps the last value silently; this finds what it hid. `text` must be
 * valid JSON (JSON.parse has read it). One pass, linear in the text; the open objects and arrays
 * are an explicit stack, so nesting depth costs memory only, never the call stack. Keys compare
 * after unescaping (`"a"` and `"\u0061"` are the same key).
 */
export function duplicateKeyPath(text: string): (string | number)[] | undefined {
  const stack: Open[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const top = stack[stack.length - 1];
    if (c === 0x22) {
      const end = stringEnd(text, i);
      if (top?.keys !== undefined && top.awaitingKey) {
        const raw = text.slice(i + 1, end);
        const key = raw.includes('\\') ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        if (top.keys.has(key)) return [...stack.slice(0, -1).map((o) => o.at), key];
        top.keys.add(key);
        top.at = key;
        top.awaitingKey = false;
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) stack.push({ keys: c === 0x7b ? new Set() : undefined, awaitingKey: c === 0x7b, at: 0 });
    else if (c === 0x7d || c === 0x5d) stack.pop();
    else if (c === 0x2c && top !== undefined) {
      if (top.keys !== undefined) top.awaitingKey = true;
      else top.at = (top.at as number) + 1;
    }
  }
  return undefined;
}

/** The index of the quote closing the JSON string that opens at `start` (escapes skipped). */
function stringEnd(text: string, start: number): number {
  let j = start + 1;
  while (j < text.length && text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c ? 2 : 1;
  return j;
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
