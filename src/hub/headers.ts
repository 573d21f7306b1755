/** The checkpoint side: safetensors headers over Range requests, summed per file and over the shards. */
import { VramError } from '../errors.js';
import { safetensorsHeaderLength, safetensorsSummary } from '../report/safetensors.js';
import { bodyOf, cached, capped, hubError, parseJson, request, type Target } from './fetch.js';
import type { HubCheckpoint, HubCheckpointFile } from './types.js';

/** The most shards an index may name (the largest checkpoints have a few hundred). */
const MAX_SHARDS = 10_000;

/** The first request's range: most headers fit, so one request reads the length and the header. */
const FIRST_RANGE = 100_000;

/** The header's JSON text from the first bytes and, when the header is longer, a second Range request. */
function headerReader(t: Target, revision: string, file: string) {
  return async (response: Response): Promise<string> => {
    const body = bodyOf(response, t, file);
    try {
      let first = await body.take(FIRST_RANGE);
      if (first.length < 8) throw hubError('bad-safetensors', `${file} is too short for a safetensors file`, [file], { received: `${first.length} bytes` });
      let length: number;
      try {
        length = safetensorsHeaderLength(first.subarray(0, 8));
      } catch (error) {
        if (error instanceof VramError) throw hubError('bad-safetensors', error.issues[0]!.message, [file], { received: error.issues[0]!.received });
        throw error;
      }
      // A whole file (200: the server ignored Range) goes on from the same stream; a range asks again.
      if (first.length < 8 + length && response.status === 200) first = await body.take(8 + length);
      let bytes: Uint8Array;
      if (first.length >= 8 + length) bytes = first.subarray(8, 8 + length);
      else if (response.status === 200)
        throw hubError('bad-safetensors', `${file} ended inside its header`, [file], { expected: `${length} bytes`, received: `${first.length - 8} bytes` });
      else {
        const rest = await request(t, revision, file, { Range: `bytes=${first.length}-${8 + length - 1}` });
        const restBody = bodyOf(rest, t, file);
        const tail = await restBody.take(8 + length - first.length);
        await restBody.close();
        if (first.length + tail.length < 8 + length)
          throw hubError('bad-safetensors', `${file} ended inside its header`, [file], {
            expected: `${length} bytes`,
            received: `${first.length + tail.length - 8} bytes`,
          });
        bytes = new Uint8Array(length);
        bytes.set(first.subarray(8), 0);
        bytes.set(tail, first.length - 8);
      }
      try {
        // ignoreBOM keeps a byte-order mark, which JSON.parse then refuses (as the safetensors library does).
        return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
      } catch {
        throw hubError('bad-safetensors', `${file}'s header is not UTF-8 text`, [file]);
      }
    } finally {
      await body.close();
    }
  };
}

/** One file's header summed up: elements and bytes per dtype; undefined when an optional file is absent. */
export type FileSummary = HubCheckpointFile & { readonly byDtype: Readonly<Record<string, number>>; readonly bytesByDtype: Readonly<Record<string, number>> };

async function readHeader(t: Target, revision: string, file: string, optional: boolean): Promise<FileSummary | undefined> {
  const got = await cached(t, revision, file, headerReader(t, revision, file), { Range: `bytes=0-${FIRST_RANGE - 1}` }, optional);
  if (!got.found) return undefined;
  let header: unknown;
  try {
    header = JSON.parse(got.text);
  } catch (error) {
    throw hubError('bad-safetensors', `${file}'s header is not JSON`, [file], { received: error instanceof Error ? error.message : undefined });
  }
  try {
    const s = safetensorsSummary(header);
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
    for (const shard of shards) files.push((await readHeader(t, at, shard, false))!);
  }
  return files;
}
