/** `vram-ts --safetensors FILE`: reads only the header, and refuses anything that is not one. */
import { closeSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { VramError, formatBytes, safetensorsSummary } from '../index.js';
import { CliError, fromVramError, fsReason, usage } from './errors.js';

/** The largest header the command reads (the library's limit too). */
export const MAX_HEADER_BYTES = 100_000_000;

function readFully(fd: number, length: number, position: number): Uint8Array {
  const buffer = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, buffer, done, length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done === length ? buffer : buffer.subarray(0, done);
}

/** One line: tensors, parameters by dtype and bytes of weights. */
export function readSafetensors(file: string): string {
  let stat: Stats;
  try {
    stat = statSync(file);
  } catch (error) {
    usage(file, `cannot read (${fsReason(error)})`);
  }
  if (stat.isDirectory()) usage(file, 'is a directory, not a safetensors file');
  if (!stat.isFile()) usage(file, 'is not a regular file');
  const size = stat.size;
  if (size < 8) usage(file, 'too short for a safetensors file', { expected: 'an 8-byte header length, then the header', received: `${size} bytes` });
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (error) {
    usage(file, `cannot read (${fsReason(error)})`);
  }
  try {
    let first: Uint8Array;
    let headerBytes: Uint8Array;
    let length: number;
    try {
      first = readFully(fd, 8, 0);
      if (first.length < 8) usage(file, 'too short for a safetensors file', { expected: 'an 8-byte header length', received: `${first.length} bytes` });
      const raw = new DataView(first.buffer, first.byteOffset, 8).getBigUint64(0, true);
      if (raw === 0n || raw > BigInt(MAX_HEADER_BYTES))
        usage(file, 'implausible header length', { expected: `1 – ${MAX_HEADER_BYTES.toLocaleString('en-US')} bytes`, received: `${raw} bytes` });
      length = Number(raw);
      if (8 + length > size) usage(file, 'header length runs past the end of the file', { expected: `at most ${size - 8} bytes`, received: `${length} bytes` });
      headerBytes = readFully(fd, length, 8);
      if (headerBytes.length < length) usage(file, 'file ended inside the header', { expected: `${length} bytes`, received: `${headerBytes.length} bytes` });
    } catch (error) {
      if (error instanceof CliError) throw error;
      usage(file, `cannot read (${fsReason(error)})`);
    }
    let text: string;
    try {
      // ignoreBOM keeps a byte-order mark, which JSON.parse then refuses (as the safetensors library does).
      text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(headerBytes);
    } catch {
      usage(file, 'header is not UTF-8 text');
    }
    let header: unknown;
    try {
      header = JSON.parse(text);
    } catch (error) {
      usage(file, 'header is not JSON', { received: error instanceof Error ? error.message : undefined });
    }
    if (typeof header !== 'object' || header === null || Array.isArray(header)) {
      usage(file, 'header is not a JSON object', { received: Array.isArray(header) ? 'an array' : header === null ? 'null' : `a ${typeof header}` });
    }
    let s: ReturnType<typeof safetensorsSummary>;
    try {
      s = safetensorsSummary(header, { dataBytes: size - 8 - length, text });
    } catch (error) {
      if (error instanceof VramError) throw fromVramError(error, file);
      throw error;
    }
    if (!Number.isSafeInteger(s.params)) usage(file, 'tensor shapes multiply past 2^53 elements', { received: String(s.params) });
    // Offsets index the data after the header: whole numbers, in order, inside the file.
    const data = size - 8 - length;
    for (const [name, entry] of Object.entries(header as Record<string, { data_offsets: unknown[] }>)) {
      if (name === '__metadata__') continue;
      const [start, end] = entry.data_offsets;
      const whole = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
      if (!whole(start) || !whole(end) || start > end || end > data) {
        usage(`${file}: header.${name}.data_offsets`, 'must be [start, end] with 0 ≤ start ≤ end within the data', {
          expected: `end ≤ ${data}`,
          received: JSON.stringify(entry.data_offsets),
        });
      }
    }
    const dtypes = Object.entries(s.byDtype)
      .map(([d, n]) => `${d} ${n.toLocaleString('en-US')}`)
      .join(', ');
    return `${file}: ${s.tensors} tensors, ${s.params.toLocaleString('en-US')} parameters (${dtypes}), ${formatBytes(s.bytes)} of weights\n`;
  } finally {
    closeSync(fd);
  }
}
