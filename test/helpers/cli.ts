/** Running the command in-process, and a scratch folder for the files a CLI test writes. */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect } from 'vitest';
import { run, runAsync } from '../../src/cli/main.js';

/** `vram-ts …args`: its exit code and what it wrote to stdout and stderr. */
export function cli(...args: string[]): { code: number; out: string; err: string } {
  let out = '';
  let err = '';
  const code = run(
    args,
    (t) => (out += t),
    (t) => (err += t),
  );
  return { code, out, err };
}

/** `vram-ts …args --format json`, which must succeed silently: its output parsed. */
export function cliJson<T>(...args: string[]): T {
  const r = cli(...args, '--format', 'json');
  expect(r.err).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.out) as T;
}

/** `vram-ts …args` as the bin runs it (a Hub model read first) with `env`: exit code, output, and the milliseconds it took. */
export async function cliAsync(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
): Promise<{ code: number; out: string; err: string; ms: number }> {
  let out = '';
  let err = '';
  const start = performance.now();
  const code = await runAsync(
    [...args],
    (t) => void (out += t),
    (t) => void (err += t),
    env,
  );
  return { code, out, err, ms: performance.now() - start };
}

/**
 * The folder `.tmp/<name>` of the repository, made now and removed after the calling test file's
 * tests, with `file(name, bytes)` writing a file in it and returning its path.
 */
export function scratch(name: string): { readonly dir: string; file(name: string, bytes: Uint8Array | string): string } {
  const dir = join(fileURLToPath(new URL('../..', import.meta.url)), '.tmp', name);
  mkdirSync(dir, { recursive: true });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return {
    dir,
    file(file, bytes) {
      const path = join(dir, file);
      writeFileSync(path, bytes);
      return path;
    },
  };
}
