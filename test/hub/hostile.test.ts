/**
 * fromHub against hostile servers (node:http on 127.0.0.1 only, every test time-boxed): a server
 * that never answers, one that drips a byte at a time, an endless or gzip-bomb config.json, a
 * malformed X-Repo-Commit, a body cut short, an index naming too many shards. Each ends in a
 * VramError with a path, within the timeout, having read no more than the caps allow.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VramError, fromHub } from '../../src/index.js';
import { JSON_CAP } from '../../src/hub/fetch.js';
import { countingFetch } from '../helpers/counting-fetch.js';
import { cliAsync } from '../helpers/cli.js';

const COMMIT = 'b'.repeat(40);
const CONFIG = JSON.stringify({ model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 256 });
let server: Server;
let endpoint = '';
const open = new Set<ServerResponse>();

/** Each repo name is one hostile behaviour. */
function handle(req: IncomingMessage, res: ServerResponse): void {
  open.add(res);
  res.on('close', () => open.delete(res));
  const [, repo, file] = /^\/acme\/([^/]+)\/resolve\/[^/]+\/(.+)$/.exec(req.url ?? '') ?? [];
  const json = (body: string, headers: Record<string, string> = {}) => {
    res.writeHead(200, { 'Content-Type': 'application/json', 'X-Repo-Commit': COMMIT, ...headers });
    res.end(body);
  };
  if (file !== 'config.json') {
    if (repo === 'many-shards' && file === 'model.safetensors.index.json') {
      const weightMap: Record<string, string> = {};
      for (let i = 0; i < 10_001; i++) weightMap[`w${i}`] = `model-${i}.safetensors`;
      return json(JSON.stringify({ weight_map: weightMap }));
    }
    res.writeHead(404, { 'X-Error-Code': 'EntryNotFound', 'X-Repo-Commit': COMMIT });
    return void res.end();
  }
  switch (repo) {
    case 'silent':
      return; // never answers
    case 'drip': {
      res.writeHead(200, { 'Content-Type': 'application/json', 'X-Repo-Commit': COMMIT });
      const timer = setInterval(() => res.write(' '), 100);
      res.on('close', () => clearInterval(timer));
      return;
    }
    case 'endless': {
      res.writeHead(200, { 'Content-Type': 'application/json', 'X-Repo-Commit': COMMIT });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', pump);
      };
      return pump();
    }
    case 'gzip-bomb':
      // 64 MiB of spaces compressed to some 64 KB.
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip', 'X-Repo-Commit': COMMIT });
      return void res.end(gzipSync(Buffer.alloc(64 * 1024 * 1024, 0x20)));
    case 'bad-commit':
      return json(CONFIG, { 'X-Repo-Commit': '../../etc' });
    case 'cut-short':
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': '10000', 'X-Repo-Commit': COMMIT });
      res.write(CONFIG.slice(0, 20));
      return void setTimeout(() => res.socket?.destroy(), 20);
    default:
      return json(CONFIG);
  }
}

beforeAll(async () => {
  server = createServer(handle);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const res of open) res.destroy();
  server.closeAllConnections();
  await new Promise<void>((done) => server.close(() => done()));
});

async function failure(promise: Promise<unknown>): Promise<{ error: VramError; ms: number }> {
  const start = performance.now();
  try {
    await promise;
  } catch (error) {
    if (error instanceof VramError) return { error, ms: performance.now() - start };
    throw error;
  }
  throw new Error('expected a VramError');
}

describe('fromHub against hostile servers', () => {
  it('a server that never answers: hub-timeout at the timeout, naming the file', async () => {
    const { error, ms } = await failure(fromHub('acme/silent', { endpoint, timeout: 300 }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-timeout', path: ['config.json'] });
    expect(ms).toBeGreaterThanOrEqual(250);
    expect(ms).toBeLessThan(2000);
  });

  it('a server dripping a byte every 100 ms: the timeout covers the body too', async () => {
    const { error, ms } = await failure(fromHub('acme/drip', { endpoint, timeout: 500 }));
    expect(error.issues[0]?.code).toBe('hub-timeout');
    expect(ms).toBeLessThan(2000);
  });

  it("the caller's AbortSignal stops the call: hub-aborted", async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const { error, ms } = await failure(fromHub('acme/silent', { endpoint, signal: controller.signal }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-aborted', path: ['config.json'] });
    expect(ms).toBeLessThan(2000);
    const already = new AbortController();
    already.abort();
    expect((await failure(fromHub('acme/plain', { endpoint, signal: already.signal }))).error.issues[0]?.code).toBe('hub-aborted');
  });

  it('an endless config.json: hub-too-large, having read no more than the cap and one chunk', async () => {
    const counting = countingFetch();
    const { error, ms } = await failure(fromHub('acme/endless', { endpoint, fetch: counting.fetch, timeout: 10_000 }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-too-large', path: ['config.json'] });
    expect(counting.read()).toBeGreaterThan(JSON_CAP);
    expect(counting.read()).toBeLessThanOrEqual(JSON_CAP + 1024 * 1024);
    expect(ms).toBeLessThan(10_000);
  });

  it('a gzip bomb: inflated only as far as the cap', async () => {
    const counting = countingFetch();
    const { error } = await failure(fromHub('acme/gzip-bomb', { endpoint, fetch: counting.fetch, timeout: 10_000 }));
    expect(error.issues[0]?.code).toBe('hub-too-large');
    expect(counting.read()).toBeLessThanOrEqual(JSON_CAP + 1024 * 1024);
  });

  it('a malformed X-Repo-Commit is an error, never a cache key', async () => {
    const { error } = await failure(fromHub('acme/bad-commit', { endpoint, timeout: 5000 }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-bad-commit', path: ['config.json'] });
  });

  it('a body cut short: hub-http naming the file, not an internal error', async () => {
    const { error } = await failure(fromHub('acme/cut-short', { endpoint, timeout: 5000 }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-http', path: ['config.json'] });
  });

  it('an index naming more than 10,000 shards is refused before any shard is read', async () => {
    const { error } = await failure(fromHub('acme/many-shards', { endpoint, timeout: 5000 }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-too-large', path: ['model.safetensors.index.json', 'weight_map'] });
  });

  it('a well-behaved server under a timeout still reads (the timer is cleared after)', async () => {
    const hub = await fromHub('acme/plain', { endpoint, timeout: 5000 });
    expect(hub.parameters).toBeGreaterThan(0);
  });

  it('bad timeout and signal options are errors with their paths', async () => {
    for (const timeout of [0, -1, 1.5, Number.POSITIVE_INFINITY, '100'])
      expect((await failure(fromHub('acme/plain', { endpoint, timeout: timeout as number }))).error.issues[0]?.path).toEqual(['timeout']);
    expect((await failure(fromHub('acme/plain', { endpoint, signal: 'stop' as unknown as AbortSignal }))).error.issues[0]?.path).toEqual(['signal']);
  });
});

describe('vram-ts <org>/<name> --timeout', () => {
  const cli = (args: string[]) =>
    cliAsync(args, { HF_ENDPOINT: endpoint, HF_HUB_OFFLINE: '0', XDG_CACHE_HOME: '/nonexistent-vram-ts-cache', HOME: '/nonexistent-vram-ts-home' });
  it('a silent Hub: one line naming the timeout, exit 2, within the seconds given', async () => {
    const r = await cli(['acme/silent', '--timeout', '1']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^vram-ts: acme\/silent: config\.json: no complete answer from http:\/\/127\.0\.0\.1:\d+ for config\.json within 1000 ms/);
    expect(r.ms).toBeLessThan(3000);
  });
  it('--timeout is refused with a catalog model and outside 1 .. 3600', async () => {
    expect((await cli(['gpt2', '--timeout', '5'])).err).toBe('vram-ts: --timeout: applies to a Hugging Face Hub model (<org>/<name>) (got "gpt2")\n');
    expect((await cli(['acme/plain', '--timeout', '0'])).code).toBe(2);
  });
});
