/**
 * A config file's text, read only from a regular file and only up to a cap: a FIFO, a device
 * (`/dev/zero`) or a directory is refused before it is opened, and a file longer than the cap is an
 * error after at most cap + 1 bytes (a file still growing included).
 */
import { closeSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { usage, fsReason } from './errors.js';

/** The most a config file may hold (the largest config.json on the Hub are a few hundred KB). */
export const CONFIG_FILE_CAP = 16 * 1024 * 1024;

/** The UTF-8 text of a regular file of at most `cap` bytes; every failure a usage error naming the file. */
export function readTextFile(file: string, what: string, cap = CONFIG_FILE_CAP): string {
  let stat: Stats;
  try {
    stat = statSync(file);
  } catch (error) {
    return usage(file, `cannot read (${fsReason(error)})`);
  }
  if (stat.isDirectory()) usage(file, `is a directory, not ${what}`);
  if (!stat.isFile()) usage(file, `is not a regular file (${what} is read only from one)`);
  if (stat.size > cap) usage(file, `is larger than ${cap.toLocaleString('en-US')} bytes: not ${what}`, { received: `${stat.size} bytes` });
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (error) {
    return usage(file, `cannot read (${fsReason(error)})`);
  }
  try {
    const buffer = new Uint8Array(cap + 1);
    let length = 0;
    for (;;) {
      let n: number;
      try {
        n = readSync(fd, buffer, length, buffer.length - length, null);
      } catch (error) {
        return usage(file, `cannot read (${fsReason(error)})`);
      }
      if (n === 0) break;
      length += n;
      if (length > cap) usage(file, `is larger than ${cap.toLocaleString('en-US')} bytes: not ${what}`, { received: `more than ${cap} bytes` });
    }
    return new TextDecoder().decode(buffer.subarray(0, length));
  } finally {
    closeSync(fd);
  }
}
