/**
 * Config files are read only from regular files and only up to the cap: /dev/zero, a FIFO, a
 * directory and an oversized file are one-line errors, at once (the CLI read /dev/zero forever).
 */
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, writeFileSync, ftruncateSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_FILE_CAP, readTextFile } from '../../src/cli/text-file.js';
import { cliAsync, scratch } from '../helpers/cli.js';

const cli = (args: string[]) => cliAsync(args, {});

const { dir } = scratch('text-file');

describe('config files: regular and capped', () => {
  it.skipIf(!existsSync('/dev/zero'))('/dev/zero as a config.json is refused at once', async () => {
    const r = await cli(['/dev/zero']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/\/dev\/zero: is not a regular file/);
    expect(r.ms).toBeLessThan(2000);
  });

  it.skipIf(process.platform === 'win32')('a FIFO is refused without opening it (opening would block)', async () => {
    const fifo = join(dir, 'config.json');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const r = await cli([fifo, '--infer']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/is not a regular file/);
    const config = await cli(['sft', 'qwen2.5-0.5b', '--config', fifo]);
    expect(config.code).toBe(2);
    expect(config.err).toMatch(/config\.json: is not a regular file/);
  });

  it('a file over the cap is refused from its size, a directory by what it is', () => {
    const big = join(dir, 'big.json');
    const fd = openSync(big, 'w');
    ftruncateSync(fd, CONFIG_FILE_CAP + 1);
    closeSync(fd);
    expect(() => readTextFile(big, 'a config.json')).toThrow(/is larger than 16,777,216 bytes/);
    expect(() => readTextFile(dir, 'a config.json')).toThrow(/is a directory/);
  });

  it('a file at the cap is read whole; a small one as written', () => {
    const small = join(dir, 'small.json');
    writeFileSync(small, '{"model_type": "llama"}');
    expect(readTextFile(small, 'a config.json')).toBe('{"model_type": "llama"}');
    expect(readTextFile(small, 'a config.json', 23)).toBe('{"model_type": "llama"}');
    expect(() => readTextFile(small, 'a config.json', 22)).toThrow(/is larger than 22 bytes/);
  });
});
