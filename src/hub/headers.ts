/** The checkpoint side: safetensors headers over Range requests, summed per file and over the shards. */
import { VramError } from '../errors.js';
import { safetensorsHeaderLength, safetensorsSummary } from '../report/safetensors.js';
import { bodyOf, cached, capped, hubError, parseJson, request, type Target } from './fetch.js';
import type { HubCheckpoint, HubCheckpointFile } from './types.js';

/** The most shards an index may name (the largest checkpoints have a few hundred). */
const MAX_SHARDS = 10_000;

/** The first request's range: most headers fit, so one request reads the length and the header. */
const FIRST_RANGE = 100_000;

/**
 * Shard headers read at once. huggingface_hub's snapshot_download uses 8 workers by default:
 * enough to overlap the round trips of a checkpoint of hundreds of shards, few enough that no
 * server sees (or rate-limits) a burst of hundreds of requests and no client opens hundreds of
 * sockets, whatever the index lists.
 */
export const MAX_IN_FLIGHT = 8;

/** `bytes <first>-<last>/<file length>`: at most 16 digits each (past 2^53 is no file length). */
const CONTENT_RANGE = /^bytes (\d{1,16})-(\d{1,16})\/(\d{1,16})$/i;

/**
 * The file's length: a 206's Content-Range (its first byte at `start`) or a 200's Content-Length.
 * Missing, unparsable, a range that does not start where asked, or a length of compressed bytes:
 * an error, never a guess.
 */
function totalOf(response: Response, t: Target, file: string, start: number): number {
  if (response.status === 206) {
    const header = response.headers.get('content-range');
    const m = CONTENT_RANGE.exec(header?.trim() ?? '');
    const [first, last, total] = m === null ? [Number.NaN, Number.NaN, Number.NaN] : [Number(m[1]), Number(m[2]), Number(m[3])];
    if (!(first === start && last >= first && last < total && Number.isSafeInteger(total)))
      throw hubError(
        'hub-bad-range',
        `the Content-Range answering a Range request for ${file} of ${t.repo} does not give where its bytes sit in the file`,
        [file],
        {
          expected: `bytes ${start}-<last byte>/<file length>`,
          received: header === null ? 'no Content-Range' : JSON.stringify(header.slice(0, 80)),
        },
      );
    return total;
  }
  const header = response.headers.get('content-length');
  const encoding = response.headers.get('content-encoding')?.trim().toLowerCase() ?? 'identity';
  const length = header !== null && /^\d{1,16}$/.test(header.trim()) ? Number(header.trim()) : Number.NaN;
  if (!Number.isSafeInteger(length) || encoding !== 'identity')
    throw hubError(
      'hub-bad-length',
      `${file} of ${t.repo} came whole (the server ignored Range) without its length in bytes: the header cannot be checked against the file`,
      [file],
      {
        expected: 'a Content-Length, uncompressed',
        received:
          header === null
            ? 'no Content-Length'
            : `Content-Length ${JSON.stringify(header.slice(0, 40))}${encoding !== 'identity' ? `, Content-Encoding ${encoding}` : ''}`,
      },
    );
  return length;
}

/** The header length from the first 8 bytes, refused when the header would run past the file's end. */
function headerLengthOf(first: Uint8Array, total: number, file: string): number {
  if (first.length < 8 || total < 8)
    throw hubError('bad-safetensors', `${file} is too short for a safetensors file`, [file], { received: `${Math.min(first.length, total)} bytes` });
  let length: number;
  try {
    length = safetensorsHeaderLength(first.subarray(0, 8));
  } catch (error) {
    if (error instanceof VramError) throw hubError('bad-safetensors', error.issues[0]!.message, [file], { received: error.issues[0]!.received });
    throw error;
  }
  if (8 + length > total)
    throw hubError('bad-safetensors', `${file}'s header length runs past the end of the file`, [file], {
      expected: `at most ${total - 8} bytes (the file has ${total})`,
      received: `${length} bytes`,
    });
  return length;
}

/** The header's bytes past the first `from`, by a second Range request that must land there, in the same file. */
async function restOf(t: Target, revision: string, file: string, from: number, end: number, total: number): Promise<Uint8Array> {
  const response = await request(t, revision, file, { Range: `bytes=${from}-${end - 1}` });
  const body = bodyOf(response, t, file);
  try {
    if (response.status !== 206)
      throw hubError('hub-bad-range', `the server answered the second Range request for ${file} with HTTP ${response.status}, not the bytes asked`, [file], {
        expected: 'HTTP 206',
        received: `HTTP ${response.status}`,
      });
    const again = totalOf(response, t, file, from);
    if (again !== total)
      throw hubError('hub-bad-range', `${file} changed length between two requests`, [file], { expected: `${total} bytes`, received: `${again} bytes` });
    return await body.take(end - from);
  } finally {
    await body.close();
  }
}

/** A header's JSON text, and the bytes of data after it (the file's length told by the server, less 8 and the header). */
interface HeaderRead {
  readonly text: string;
  readonly dataBytes: number;
}

/**
 * The header from the first bytes and, when it is longer, a second Range request (the first
 * response let go first: one request of a shard's in flight at a time). The file's length must
 * hold the header; the data after it is checked against the offsets by the caller.
 */
async function headerRead(t: Target, revision: string, file: string, response: Response): Promise<HeaderRead> {
  const body = bodyOf(response, t, file);
  let first: Uint8Array;
  let length: number;
  let total: number;
  try {
    total = totalOf(response, t, file, 0);
    first = await body.take(FIRST_RANGE);
    length = headerLengthOf(first, total, file);
    // A whole file (200: the server ignored Range) goes on from the same stream; a range asks again.
    if (first.length < 8 + length && response.status === 200) first = await body.take(8 + length);
  } finally {
    await body.close();
  }
  let bytes = first.subarray(8, 8 + length);
  if (bytes.length < length && response.status === 206) {
    const tail = await restOf(t, revision, file, first.length, 8 + length, total);
    bytes = new Uint8Array(first.length - 8 + tail.length);
    bytes.set(first.subarray(8), 0);
    bytes.set(tail, first.length - 8);
  }
  if (bytes.length < length)
    throw hubError('bad-safetensors', `${file} ended inside its header`, [file], { expected: `${length} bytes`, received: `${bytes.length} bytes` });
  try {
    // ignoreBOM keeps a byte-order mark, which JSON.parse then refuses (as the safetensors library does).
    return { text: new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes), dataBytes: total - 8 - length };
  } catch {
    throw hubError('bad-safetensors', `${file}'s header is not UTF-8 text`, [file]);
  }
}

/** One file's header summed up: elements and bytes per dtype; undefined when an optional file is absent. */
export type FileSummary = HubCheckpointFile & { readonly byDtype: Readonly<Record<string, number>>; readonly bytesByDtype: Readonly<Record<string, number>> };

/** A header text checked as the safetensors library checks it (no key named twice; with `dataBytes`, the data ending at the file's end) and summed up. */
function summaryOf(file: string, text: string, dataBytes?: number): FileSummary {
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (error) {
    throw hubError('bad-safetensors', `${file}'s header is not JSON`, [file], { received: error instanceof Error ? error.message : undefined });
  }
  try {
    const s = safetensorsSummary(header, { text, ...(dataBytes !== undefined ? { dataBytes } : {}) });
    return {
      name: file,
      tensors: s.tensors,
      parameters: s.params,
      bytes: s.bytes,
      byDtype: s.byDtype,
      bytesByDtype: bytesByDtype(header as Record<string, { dtype: string; data_offsets: [number, number] }>),
    };
  } catch (error) {
    if (error instanceof VramError) throw new VramError(error.issues.map((i) => ({ ...i, path: [file, ...i.path] })));
    throw error;
  }
}

/**
 * One file's header: checked against the file's length when read (before it is cached, so a
 * cached header was checked), and again, without the length, when it comes from the cache.
 */
async function readHeader(t: Target, revision: string, file: string, optional: boolean): Promise<FileSummary | undefined> {
  const fresh: { summary?: FileSummary } = {};
  const read = async (response: Response): Promise<string> => {
    const { text, dataBytes } = await headerRead(t, revision, file, response);
    fresh.summary = summaryOf(file, text, dataBytes);
    return text;
  };
  const got = await cached(t, revision, file, read, { Range: `bytes=0-${FIRST_RANGE - 1}` }, optional);
  if (!got.found) return undefined;
  return fresh.summary ?? summaryOf(file, got.text);
}

/** The files' totals, per dtype too. */
export function checkpointOf(files: readonly FileSummary[]): HubCheckpoint {
  const byDtype: Record<string, { parameters: number; bytes: number }> = {};
  let tensors = 0;
  let parameters = 0;
  let bytes = 0;
  for (const f of files) {
    tensors += f.tensors;
    parameters += f.parameters;
    bytes += f.bytes;
    for (const [dtype, n] of Object.entries(f.byDtype)) {
      const was = byDtype[dtype] ?? { parameters: 0, bytes: 0 };
      byDtype[dtype] = { parameters: was.parameters + n, bytes: was.bytes + (f.bytesByDtype[dtype] ?? 0) };
    }
  }
  const dtype = Object.entries(byDtype).sort((a, b) => b[1].parameters - a[1].parameters)[0]?.[0] ?? 'none';
  if (!Number.isSafeInteger(parameters) || !Number.isSafeInteger(bytes))
    throw hubError('overflow', 'the checkpoint totals are not exact integers (past 2^53)', ['checkpoint']);
  return {
    files: files.map(({ name, tensors: t, parameters: p, bytes: b }) => ({ name, tensors: t, parameters: p, bytes: b })),
    tensors,
    parameters,
    bytes,
    byDtype,
    dtype,
  };
}

/** Bytes per dtype of one checked header (the spans of its data_offsets, which safetensorsSummary held to the shapes). */
function bytesByDtype(header: Record<string, { dtype: string; data_offsets: [number, number] }>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    out[entry.dtype] = (out[entry.dtype] ?? 0) + entry.data_offsets[1] - entry.data_offsets[0];
  }
  return out;
}

/** A shard name from an index: a plain relative path inside the repo. */
function shardName(name: unknown, index: string): string {
  if (typeof name !== 'string' || !/^[\w.\-/]+\.safetensors$/.test(name) || name.startsWith('/') || name.split('/').includes('..')) {
    throw hubError('bad-config', 'weight_map names a file that is not a .safetensors path in the repo', [index, 'weight_map'], {
      received: JSON.stringify(name),
    });
  }
  return name;
}

/** The safetensors headers at `at`: one model.safetensors, or every shard the index names, or none. */
export async function checkpointFiles(t: Target, at: string): Promise<FileSummary[]> {
  const single = await readHeader(t, at, 'model.safetensors', true);
  if (single !== undefined) return [single];
  const files: FileSummary[] = [];
  const index = await cached(t, at, 'model.safetensors.index.json', capped(t, 'model.safetensors.index.json'), {}, true);
  if (index.found) {
    const parsed = parseJson(index.text, 'model.safetensors.index.json', 'an index with weight_map');
    const map = parsed.weight_map;
    if (typeof map !== 'object' || map === null || Array.isArray(map))
      throw hubError('bad-config', 'the index has no weight_map object', ['model.safetensors.index.json', 'weight_map']);
    const shards = [...new Set(Object.values(map as Record<string, unknown>).map((n) => shardName(n, 'model.safetensors.index.json')))];
    if (shards.length > MAX_SHARDS)
      throw hubError(
        'hub-too-large',
        `the index names ${shards.length} shards: more than ${MAX_SHARDS} is no checkpoint`,
        ['model.safetensors.index.json', 'weight_map'],
        {
          expected: `at most ${MAX_SHARDS} files`,
          received: String(shards.length),
        },
      );
    files.push(...(await pooled(shards, MAX_IN_FLIGHT, async (shard) => (await readHeader(t, at, shard, false))!)));
  }
  return files;
}

/**
 * `work` over `items` with at most `limit` running at once, results in the items' order. After a
 * failure no new item starts; the call settles once those running have, with the failure of the
 * earliest item (the one a one-at-a-time loop would have met first), so no request outlives it.
 */
async function pooled<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const failures: { at: number; error: unknown }[] = [];
  const worker = async (): Promise<void> => {
    while (failures.length === 0 && next < items.length) {
      const at = next++;
      try {
        results[at] = await work(items[at]!);
      } catch (error) {
        failures.push({ at, error });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failures.length > 0) throw failures.reduce((a, b) => (b.at < a.at ? b : a)).error;
  return results;
}
