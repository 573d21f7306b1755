/**
 * fromHub and `vram-ts <org>/<name>` against a local double of the Hugging Face Hub (node:http on
 * 127.0.0.1): /resolve/ answers config and index files itself and 302-redirects safetensors files
 * to a CDN path that serves Range requests (206 + Content-Range), ETag / If-None-Match (304),
 * X-Repo-Commit, 401 for a gated repo without its token, 404 with X-Error-Code. Nothing leaves the
 * machine: "offline" is a port nobody listens on.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VramError, estimate, fromHFConfig, fromHub, type HubCache, type HubCacheEntry } from '../../src/index.js';
import { runAsync } from '../../src/cli/main.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const COMMIT = 'a'.repeat(40);
const TOKEN = 'hf_test_token';

/** A safetensors file: the 8-byte length, the header JSON, then zeroed data (every tensor's bytes). */
function safetensors(tensors: Readonly<Record<string, readonly number[]>>, dtype: string, bytesPer: number, padding = 0): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt', ...(padding > 0 ? { pad: 'x'.repeat(padding) } : {}) } };
  let offset = 0;
  for (const [name, shape] of Object.entries(tensors)) {
    const size = shape.reduce((a, b) => a * b, 1) * bytesPer;
    header[name] = { dtype, shape, data_offsets: [offset, offset + size] };
    offset += size;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const file = new Uint8Array(8 + json.length + offset);
  new DataView(file.buffer).setBigUint64(0, BigInt(json.length), true);
  file.set(json, 8);
  return file;
}

/** Every weight of a Llama config, named as transformers saves them. */
function llamaTensors(
  c: {
    hidden_size: number;
    intermediate_size: number;
    num_hidden_layers: number;
    vocab_size: number;
    num_attention_heads: number;
    num_key_value_heads: number;
  },
  tied: boolean,
): Record<string, number[]> {
  const h = c.hidden_size;
  const kv = (h / c.num_attention_heads) * c.num_key_value_heads;
  const out: Record<string, number[]> = { 'model.embed_tokens.weight': [c.vocab_size, h] };
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}.`;
    Object.assign(out, {
      [`${p}input_layernorm.weight`]: [h],
      [`${p}post_attention_layernorm.weight`]: [h],
      [`${p}self_attn.q_proj.weight`]: [h, h],
      [`${p}self_attn.k_proj.weight`]: [kv, h],
      [`${p}self_attn.v_proj.weight`]: [kv, h],
      [`${p}self_attn.o_proj.weight`]: [h, h],
      [`${p}mlp.gate_proj.weight`]: [c.intermediate_size, h],
      [`${p}mlp.up_proj.weight`]: [c.intermediate_size, h],
      [`${p}mlp.down_proj.weight`]: [h, c.intermediate_size],
    });
  }
  out['model.norm.weight'] = [h];
  if (!tied) out['lm_head.weight'] = [c.vocab_size, h];
  return out;
}

const elements = (tensors: Record<string, number[]>) => Object.values(tensors).reduce((sum, shape) => sum + shape.reduce((a, b) => a * b, 1), 0);

// The sharded bf16 checkpoint: 4 layers over 3 shards, the second with a header longer than the first range read.
const shardedConfig = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: 128,
  intermediate_size: 344,
  num_hidden_layers: 4,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 1000,
  max_position_embeddings: 512,
  torch_dtype: 'bfloat16',
  tie_word_embeddings: false,
};
const shardedTensors = llamaTensors(shardedConfig, false);
const shardNames = ['model-00001-of-00003.safetensors', 'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors'];
const shardOf = (name: string) => (name.startsWith('model.embed') ? 0 : /layers\.[01]\./.test(name) ? 1 : 2);
const shards = shardNames.map((_, i) => Object.fromEntries(Object.entries(shardedTensors).filter(([n]) => shardOf(n) === i)));
const index = {
  metadata: { total_size: elements(shardedTensors) * 2 },
  weight_map: Object.fromEntries(Object.keys(shardedTensors).map((n) => [n, shardNames[shardOf(n)]])),
};

// A gated repo: one model.safetensors, tied embeddings, no torch_dtype in the config (the checkpoint's F16 is used).
const gatedConfig = {
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 4,
  vocab_size: 256,
  tie_word_embeddings: true,
};
const gatedTensors = llamaTensors(gatedConfig, true);

interface Repo {
  readonly files: Readonly<Record<string, string | Uint8Array>>;
  readonly gated?: boolean;
  /** Its CDN ignores Range and sends the whole file. */
  readonly noRange?: boolean;
}
const repos: Record<string, Repo> = {
  'acme/tiny-sharded': {
    files: {
      'config.json': JSON.stringify(shardedConfig),
      'model.safetensors.index.json': JSON.stringify(index),
      ...Object.fromEntries(shardNames.map((n, i) => [n, safetensors(shards[i]!, 'BF16', 2, i === 1 ? 150_000 : 0)])),
    },
  },
  'acme/gated': { gated: true, files: { 'config.json': JSON.stringify(gatedConfig), 'model.safetensors': safetensors(gatedTensors, 'F16', 2) } },
  'acme/no-range': { noRange: true, files: { 'config.json': JSON.stringify(gatedConfig), 'model.safetensors': safetensors(gatedTensors, 'BF16', 2, 150_000) } },
  'acme/not-json': { files: { 'config.json': '<html>not json</html>' } },
  'acme/no-safetensors': { files: { 'config.json': JSON.stringify(gatedConfig), 'pytorch_model.bin': 'weights' } },
  'acme/extra-tensor': {
    files: { 'config.json': JSON.stringify(gatedConfig), 'model.safetensors': safetensors({ ...gatedTensors, 'lm_head.weight': [256, 64] }, 'BF16', 2) },
  },
};

interface Logged {
  readonly method: string;
  readonly url: string;
  readonly range?: string;
  readonly ifNoneMatch?: string;
  readonly status: number;
}
const log: Logged[] = [];
let server: Server;
let endpoint = '';
let offlineEndpoint = '';
let cacheRoot = '';

const etagOf = (repo: string, file: string) => `"${Buffer.from(`${repo}/${file}`).toString('hex').slice(0, 32)}"`;

function handle(req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const send = (status: number, headers: Record<string, string> = {}, body?: string | Uint8Array) => {
    log.push({
      method: req.method ?? '',
      url: url.pathname,
      ...(req.headers.range !== undefined ? { range: req.headers.range } : {}),
      ...(req.headers['if-none-match'] !== undefined ? { ifNoneMatch: req.headers['if-none-match'] } : {}),
      status,
    });
    res.writeHead(status, headers);
    res.end(body);
  };
  const cdn = /^\/cdn\/([^/]+\/[^/]+)\/(.+)$/.exec(url.pathname);
  if (cdn !== null) {
    const [, repo, file] = cdn;
    const data = repos[repo!]?.files[decodeURIComponent(file!)];
    if (!(data instanceof Uint8Array) || url.searchParams.get('sig') !== 'ok') return send(403);
    const etag = etagOf(repo!, file!);
    if (req.headers['if-none-match'] === etag) return send(304, { ETag: etag });
    const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (range === null || repos[repo!]!.noRange) return send(200, { ETag: etag, 'Content-Length': String(data.length) }, data);
    const start = Number(range[1]);
    const end = Math.min(Number(range[2]), data.length - 1);
    return send(206, { ETag: etag, 'Content-Range': `bytes ${start}-${end}/${data.length}`, 'Accept-Ranges': 'bytes' }, data.subarray(start, end + 1));
  }
  const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
  if (resolve === null) return send(404, { 'X-Error-Code': 'RepoNotFound' });
  const [, repoId, revision, file] = resolve;
  const repo = repos[repoId!];
  if (repo === undefined) return send(404, { 'X-Error-Code': 'RepoNotFound' }, 'Repository not found');
  if (repo.gated && req.headers.authorization !== `Bearer ${TOKEN}`)
    return send(401, { 'X-Error-Code': 'GatedRepo' }, 'Access to model acme/gated is restricted.');
  if (decodeURIComponent(revision!) !== 'main' && revision !== COMMIT) return send(404, { 'X-Error-Code': 'RevisionNotFound' }, 'Invalid rev id');
  const name = decodeURIComponent(file!);
  const data = repo.files[name];
  if (data === undefined) return send(404, { 'X-Error-Code': 'EntryNotFound', 'X-Repo-Commit': COMMIT }, 'Entry not found');
  const etag = etagOf(repoId!, name);
  if (data instanceof Uint8Array)
    return send(302, { Location: `/cdn/${repoId}/${encodeURIComponent(name)}?sig=ok`, 'X-Repo-Commit': COMMIT, 'X-Linked-Etag': etag });
  if (req.headers['if-none-match'] === etag) return send(304, { ETag: etag, 'X-Repo-Commit': COMMIT });
  return send(200, { ETag: etag, 'X-Repo-Commit': COMMIT, 'Content-Type': 'application/json' }, data);
}

beforeAll(async () => {
  server = createServer(handle);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // A port that was free a moment ago and that nobody listens on: connection refused.
  const closed = createServer();
  await new Promise<void>((done) => closed.listen(0, '127.0.0.1', done));
  offlineEndpoint = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
  await new Promise<void>((done) => closed.close(() => done()));
  cacheRoot = mkdtempSync(join(tmpdir(), 'vram-ts-hub-'));
});

afterAll(async () => {
  await new Promise<void>((done) => server.close(() => done()));
  rmSync(cacheRoot, { recursive: true, force: true });
});

function memoryCache(): HubCache & { entries: Map<string, HubCacheEntry> } {
  const entries = new Map<string, HubCacheEntry>();
  return { entries, get: (key) => entries.get(key), set: (key, entry) => void entries.set(key, entry) };
}

async function vramError(promise: Promise<unknown>): Promise<VramError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof VramError) return error;
    throw error;
  }
  throw new Error('expected a VramError');
}

describe('fromHub against a local Hub double', () => {
  it('reads a sharded bf16 checkpoint: parameters and bytes exact from the headers, no weights downloaded', async () => {
    log.length = 0;
    const hub = await fromHub('acme/tiny-sharded', { endpoint });
    const params = elements(shardedTensors);
    expect(hub.checkpoint?.parameters).toBe(params);
    expect(hub.checkpoint?.bytes).toBe(params * 2);
    expect(hub.checkpoint?.byDtype).toEqual({ BF16: { parameters: params, bytes: params * 2 } });
    expect(hub.checkpoint?.dtype).toBe('BF16');
    expect(hub.checkpoint?.tensors).toBe(Object.keys(shardedTensors).length);
    expect(hub.checkpoint?.files.map((f) => f.name)).toEqual(shardNames);
    expect(hub.checkpoint?.files.map((f) => f.parameters)).toEqual(shards.map(elements));
    expect(hub.commit).toBe(COMMIT);
    // The model built from config.json has exactly the checkpoint's parameters.
    expect(hub.parameters).toBe(params);
    expect(hub.mismatch).toBeUndefined();
    expect(estimate(hub.model, { input: [1, 8], mode: 'inference' }).params.total).toBe(
      estimate(fromHFConfig(shardedConfig), { input: [1, 8], mode: 'inference' }).params.total,
    );
    // Only ranges of the safetensors files were asked for: 3 first reads + 1 more for the long header.
    const cdn = log.filter((l) => l.url.startsWith('/cdn/'));
    expect(cdn.every((l) => l.status === 206 && l.range !== undefined)).toBe(true);
    expect(cdn).toHaveLength(4);
    const fileBytes = (repos['acme/tiny-sharded']!.files[shardNames[1]!] as Uint8Array).length;
    expect(cdn.find((l) => l.range !== 'bytes=0-99999')?.range).toMatch(/^bytes=100000-\d+$/);
    expect(Number(/-(\d+)$/.exec(cdn.find((l) => l.range !== 'bytes=0-99999')!.range!)![1])).toBeLessThan(fileBytes - 1000);
    // After the config, everything is read at the commit the revision resolved to (model.safetensors: 404, the index, 3 shards, the long header's rest).
    expect(log.filter((l) => l.url.includes('/resolve/')).map((l) => l.url.split('/resolve/')[1]!.split('/')[0])).toEqual(['main', ...Array(6).fill(COMMIT)]);
  });

  it('with a cache, a second call asks one conditional request (304) and nothing else', async () => {
    const cache = memoryCache();
    await fromHub('acme/tiny-sharded', { endpoint, cache });
    log.length = 0;
    const again = await fromHub('acme/tiny-sharded', { endpoint, cache });
    expect(again.checkpoint?.parameters).toBe(elements(shardedTensors));
    expect(log).toEqual([
      { method: 'GET', url: '/acme/tiny-sharded/resolve/main/config.json', ifNoneMatch: etagOf('acme/tiny-sharded', 'config.json'), status: 304 },
    ]);
    // At a commit hash nothing is asked at all; offline reads only the cache.
    log.length = 0;
    await fromHub('acme/tiny-sharded', { endpoint, cache, revision: COMMIT });
    await fromHub('acme/tiny-sharded', { endpoint, cache, offline: true });
    expect(log).toEqual([]);
    expect([...cache.entries.keys()].some((k) => k.endsWith(`/${COMMIT}/model.safetensors`) && cache.entries.get(k)?.missing === true)).toBe(true);
  });

  it('a gated repo: 401 without the token is an error naming HF_TOKEN; with it the checkpoint is read', async () => {
    const error = await vramError(fromHub('acme/gated', { endpoint }));
    expect(error.issues[0]).toMatchObject({ code: 'hub-auth', path: ['config.json'] });
    expect(error.message).toMatch(/acme\/gated is gated or private: set HF_TOKEN/);
    const wrong = await vramError(fromHub('acme/gated', { endpoint, token: 'hf_wrong' }));
    expect(wrong.message).toMatch(/has no access/);
    log.length = 0;
    const hub = await fromHub('acme/gated', { endpoint, token: TOKEN });
    expect(hub.checkpoint?.parameters).toBe(elements(gatedTensors));
    expect(hub.checkpoint?.byDtype).toEqual({ F16: { parameters: elements(gatedTensors), bytes: elements(gatedTensors) * 2 } });
    // Tied embeddings stored once and counted once: no mismatch. No torch_dtype: the checkpoint's float16.
    expect(hub.mismatch).toBeUndefined();
    expect(estimate(hub.model, { input: [1, 4], mode: 'inference' }).ir.settings.paramDtype).toBe('float16');
    expect(estimate(hub.build({ dtype: 'float32' }), { input: [1, 4], mode: 'inference' }).ir.settings.paramDtype).toBe('float32');
  });

  it('flags a checkpoint whose parameter count differs from the model built from config.json', async () => {
    const hub = await fromHub('acme/extra-tensor', { endpoint });
    expect(hub.checkpoint!.parameters - hub.parameters).toBe(256 * 64);
    expect(hub.mismatch).toMatch(/16,384 fewer than the checkpoint.*tied weight stored twice/);
  });

  it('a server that ignores Range: the header is read from the start of the body, the rest let go', async () => {
    log.length = 0;
    const hub = await fromHub('acme/no-range', { endpoint });
    expect(hub.checkpoint?.parameters).toBe(elements(gatedTensors));
    expect(hub.checkpoint?.bytes).toBe(elements(gatedTensors) * 2);
    expect(log.filter((l) => l.url.startsWith('/cdn/')).map((l) => l.status)).toEqual([200]);
  });

  it('a repo with no safetensors: the model, no checkpoint', async () => {
    const hub = await fromHub('acme/no-safetensors', { endpoint });
    expect(hub.checkpoint).toBeUndefined();
    expect(hub.parameters).toBe(elements(gatedTensors));
  });

  it('404s name the repo, the revision or the file; a config that is not JSON is bad-config', async () => {
    const repo = await vramError(fromHub('acme/nope', { endpoint }));
    expect(repo.issues[0]).toMatchObject({ code: 'hub-not-found', path: ['config.json'] });
    expect(repo.message).toMatch(/repository acme\/nope not found/);
    const revision = await vramError(fromHub('acme/tiny-sharded', { endpoint, revision: 'v9' }));
    expect(revision.message).toMatch(/revision v9 of acme\/tiny-sharded not found/);
    const bad = await vramError(fromHub('acme/not-json', { endpoint }));
    expect(bad.issues[0]).toMatchObject({ code: 'bad-config', path: ['config.json'] });
  });

  it('offline: a refused connection is a clear error; offline with nothing cached too', async () => {
    const error = await vramError(fromHub('acme/tiny-sharded', { endpoint: offlineEndpoint }));
    expect(error.issues[0]?.code).toBe('hub-offline');
    expect(error.message).toMatch(/cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): offline\?/);
    const cacheOnly = await vramError(fromHub('acme/tiny-sharded', { endpoint, offline: true, cache: memoryCache() }));
    expect(cacheOnly.message).toMatch(/not in the cache/);
  });

  it('refuses bad options up front, every issue at once', async () => {
    const error = await vramError(fromHub('not a repo', { endpoint: 'ftp://x', revision: '' }));
    expect(error.issues.map((i) => i.path[0])).toEqual(['repo', 'revision', 'endpoint']);
  });
});

describe('vram-ts <org>/<name>', () => {
  const env = () => ({ HF_ENDPOINT: endpoint, XDG_CACHE_HOME: join(cacheRoot, 'xdg'), HF_HOME: join(cacheRoot, 'hf'), HOME: cacheRoot });
  async function cli(args: string[], environment: Record<string, string>) {
    let out = '';
    let err = '';
    const code = await runAsync(
      args,
      (t) => void (out += t),
      (t) => void (err += t),
      environment,
    );
    return { code, out, err };
  }

  it('estimates a Hub model; a second call hits the disk cache (one 304, no ranges)', async () => {
    log.length = 0;
    const first = await cli(['acme/tiny-sharded', '--infer', '--seq', '16'], env());
    expect(first.err).toBe('');
    expect(first.code).toBe(0);
    const params = elements(shardedTensors);
    expect(first.out).toContain(
      `Hub acme/tiny-sharded@main (aaaaaaaaaaaa): 3 safetensors files, ${params.toLocaleString('en-US')} parameters (BF16 ${params.toLocaleString('en-US')})`,
    );
    expect(first.out).toContain('the model built from config.json has as many');
    expect(log.length).toBeGreaterThan(5);
    expect(readdirSync(join(cacheRoot, 'xdg', 'vram-ts', 'hub'))).toEqual([new URL(endpoint).host.replace(':', '_')]);
    log.length = 0;
    const second = await cli(['acme/tiny-sharded', '--infer', '--seq', '16'], env());
    expect(second.out).toBe(first.out);
    expect(log).toEqual([
      { method: 'GET', url: '/acme/tiny-sharded/resolve/main/config.json', ifNoneMatch: etagOf('acme/tiny-sharded', 'config.json'), status: 304 },
    ]);
    // HF_HUB_OFFLINE=1: the cache alone; --revision at the commit: no request either.
    log.length = 0;
    expect((await cli(['acme/tiny-sharded', '--infer', '--seq', '16'], { ...env(), HF_ENDPOINT: endpoint, HF_HUB_OFFLINE: '1' })).out).toBe(first.out);
    expect((await cli(['acme/tiny-sharded', '--infer', '--seq', '16', '--revision', COMMIT, '--format', 'json'], env())).code).toBe(0);
    expect(log).toEqual([]);
  });

  it('--format json carries the checkpoint', async () => {
    const { out } = await cli(['acme/tiny-sharded', '--seq', '16', '--format', 'json'], env());
    const json = JSON.parse(out) as { hub: { checkpoint: { parameters: number; bytes: number }; commit: string; mismatch: null } };
    expect(json.hub.checkpoint.parameters).toBe(elements(shardedTensors));
    expect(json.hub.checkpoint.bytes).toBe(elements(shardedTensors) * 2);
    expect(json.hub.mismatch).toBeNull();
  });

  it('gated: one line naming HF_TOKEN, exit 2; HF_TOKEN or the saved token file opens it', async () => {
    const denied = await cli(['acme/gated', '--seq', '16'], env());
    expect(denied.code).toBe(2);
    expect(denied.out).toBe('');
    expect(denied.err).toBe(
      'vram-ts: acme/gated: config.json: acme/gated is gated or private: set HF_TOKEN (or pass token) to a token with access (got HTTP 401)\n',
    );
    const allowed = await cli(['acme/gated', '--seq', '16'], { ...env(), HF_TOKEN: TOKEN });
    expect(allowed.code).toBe(0);
    expect(allowed.out).toContain('Hub acme/gated@main');
    mkdirSync(join(cacheRoot, 'hf'), { recursive: true });
    writeFileSync(join(cacheRoot, 'hf', 'token'), `${TOKEN}\n`);
    try {
      expect((await cli(['acme/gated', '--seq', '16'], env())).code).toBe(0);
    } finally {
      rmSync(join(cacheRoot, 'hf', 'token'));
    }
  });

  it('offline, 404 and --revision on a non-Hub model are one-line errors', async () => {
    const offline = await cli(['acme/tiny-sharded', '--revision', 'v2'], { ...env(), HF_ENDPOINT: offlineEndpoint });
    expect(offline.code).toBe(2);
    expect(offline.err).toMatch(/^vram-ts: acme\/tiny-sharded: config\.json: cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): offline\?/);
    const missing = await cli(['acme/tiny-sharded', '--revision', 'v2'], env());
    expect(missing.err).toMatch(/revision v2 of acme\/tiny-sharded not found/);
    const notHub = await cli(['gpt2', '--revision', 'main'], env());
    expect(notHub.err).toBe('vram-ts: --revision: applies to a Hugging Face Hub model (<org>/<name>) (got "gpt2")\n');
  });

  it('the bin reads the Hub (a separate process, its cache on disk from the calls above)', () => {
    const tsx = join(root, 'node_modules', '.bin', 'tsx');
    log.length = 0;
    const result = spawnSync(tsx, [join(root, 'src', 'cli', 'bin.ts'), 'acme/tiny-sharded', '--infer', '--seq', '16', '--revision', COMMIT], {
      env: { ...process.env, ...env(), HF_HUB_OFFLINE: '1' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('Hub acme/tiny-sharded@');
    expect(log).toEqual([]);
  });
});
