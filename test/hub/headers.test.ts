/**
 * fromHub's safetensors headers against hostile servers (node:http on 127.0.0.1 only, every call
 * time-boxed): an index of 40 shards read at most MAX_IN_FLIGHT at a time, a Content-Range whose
 * file length disagrees with the header (shorter, longer, missing, unknown, elsewhere), a whole
 * file without its length, a second Range request answered with the whole file, a tensor named
 * twice. Each ends in a VramError naming the file, having read no more than the first range.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VramError, fromHub, type HubCache, type HubCacheEntry } from '../../src/index.js';
import { countingFetch } from '../helpers/counting-fetch.js';
import { MAX_IN_FLIGHT } from '../../src/hub/headers.js';

const COMMIT = 'c'.repeat(40);
const CONFIG = JSON.stringify({ model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 256 });
const W = { dtype: 'F32', shape: [4], data_offsets: [0, 16] };

/** A safetensors file from its header's JSON text: the 8-byte length, the text, then `data` zeroed bytes. */
function file(text: string, data: number, claimed?: number): Uint8Array {
  const json = new TextEncoder().encode(text);
  const bytes = new Uint8Array(8 + json.length + data);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(claimed ?? json.length), true);
  bytes.set(json, 8);
  return bytes;
}

const SHARDS = 40;
const shardName = (i: number) => `model-${String(i + 1).padStart(5, '0')}-of-${String(SHARDS).padStart(5, '0')}.safetensors`;
/** Every fifth shard's header is longer than the first range: two requests for it, never at once. */
const shardFile = (i: number) => file(JSON.stringify({ [`w${i}`]: W, ...(i % 5 === 0 ? { __metadata__: { pad: 'x'.repeat(150_000) } } : {}) }), 16);
/** The index of a shard's name, undefined for another file (model.safetensors). */
const shardIndex = (f: string): number | undefined => {
  const m = /^model-(\d+)-of-\d+\.safetensors$/.exec(f);
  return m === null ? undefined : Number(m[1]) - 1;
};
const shard = (f: string) => {
  const i = shardIndex(f);
  return i === undefined ? undefined : shardFile(i);
};
const plain = file(JSON.stringify({ w: W }), 16);
const long = file(JSON.stringify({ __metadata__: { pad: 'x'.repeat(150_000) }, w: W }), 16);

/** Each repo is one behaviour of the server for model.safetensors (or the shards). */
interface Behaviour {
  readonly data: Uint8Array | ((file: string) => Uint8Array | undefined);
  readonly index?: boolean;
  /** The Content-Range of a 206, given the range served and the file's real length; null: none. */
  readonly contentRange?: (start: number, end: number, length: number) => string | null;
  /** Sends the whole file (200) to these requests (1-based), as a server ignoring Range. */
  readonly whole?: (nth: number) => boolean;
  /** A 200 without Content-Length (chunked). */
  readonly chunked?: boolean;
  /** Milliseconds each safetensors answer is held. */
  readonly delay?: number;
}
const repos: Record<string, Behaviour> = {
  ok: { data: plain },
  'ok-long': { data: long },
  shards: { index: true, delay: 25, data: shard },
  // The file the server says is 8 bytes short of the last tensor's end.
  shorter: { data: plain, contentRange: (s, e, n) => `bytes ${s}-${Math.min(e, n - 9)}/${n - 8}` },
  // A header length of 50 MB in a file the server says has 1000 bytes.
  'claims-more': { data: file(JSON.stringify({ w: W }), 16, 50_000_000), contentRange: (s, e) => `bytes ${s}-${Math.min(e, 999)}/1000` },
  longer: { data: plain, contentRange: (s, e, n) => `bytes ${s}-${e}/${n + 100}` },
  'no-content-range': { data: plain, contentRange: () => null },
  'unknown-length': { data: plain, contentRange: (s, e) => `bytes ${s}-${e}/*` },
  'past-2-53': { data: plain, contentRange: (s, e) => `bytes ${s}-${e}/99999999999999999999` },
  elsewhere: { data: plain, contentRange: (s, e, n) => `bytes ${s + 5}-${e}/${n}` },
  'whole-chunked': { data: plain, whole: () => true, chunked: true },
  'whole-ok': { data: plain, whole: () => true },
  'second-whole': { data: long, whole: (nth) => nth === 2 },
  'second-other-length': { data: long, contentRange: (s, e, n) => `bytes ${s}-${e}/${s === 0 ? n : n + 1}` },
  twice: { data: file(`{"w": ${JSON.stringify({ ...W, shape: [1000], data_offsets: [0, 4000] })}, "w": ${JSON.stringify(W)}}`, 16) },
  'twice-in-a-shard': {
    index: true,
    data: (f) => (f === shardName(1) ? file(`{"w1": ${JSON.stringify(W)}, "w1": ${JSON.stringify(W)}}`, 16) : shard(f)),
  },
};

let server: Server;
let endpoint = '';
/** Safetensors requests being answered now, the most at once, and how many each file got. */
let inFlight = 0;
let maxInFlight = 0;
const requests = new Map<string, number>();

function handle(req: IncomingMessage, res: ServerResponse): void {
  const [, repo, name] = /^\/acme\/([^/]+)\/resolve\/[^/]+\/(.+)$/.exec(req.url ?? '') ?? [];
  const behaviour = repos[repo!];
  const headers = { 'X-Repo-Commit': COMMIT };
  if (behaviour === undefined) return void res.writeHead(404, { 'X-Error-Code': 'RepoNotFound' }).end();
  if (name === 'config.json') return void res.writeHead(200, { ...headers, 'Content-Type': 'application/json' }).end(CONFIG);
  if (name === 'model.safetensors.index.json' && behaviour.index === true) {
    const weightMap = Object.fromEntries(Array.from({ length: SHARDS }, (_, i) => [`w${i}`, shardName(i)]));
    return void res.writeHead(200, headers).end(JSON.stringify({ weight_map: weightMap }));
  }
  const data = typeof behaviour.data === 'function' ? behaviour.data(name!) : name === 'model.safetensors' ? behaviour.data : undefined;
  if (data === undefined) return void res.writeHead(404, { ...headers, 'X-Error-Code': 'EntryNotFound' }).end();
  const key = `${repo}/${name}`;
  const nth = (requests.get(key) ?? 0) + 1;
  requests.set(key, nth);
  inFlight += 1;
  maxInFlight = Math.max(maxInFlight, inFlight);
  const answer = () => {
    inFlight -= 1;
    const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (range === null || behaviour.whole?.(nth) === true) {
      if (behaviour.chunked === true) {
        res.writeHead(200, headers);
        return void res.end(data);
      }
      return void res.writeHead(200, { ...headers, 'Content-Length': String(data.length) }).end(data);
    }
    const start = Number(range[1]);
    const end = Math.min(Number(range[2]), data.length - 1);
    const contentRange = (behaviour.contentRange ?? ((s, e, n) => `bytes ${s}-${e}/${n}`))(start, end, data.length);
    res.writeHead(206, { ...headers, ...(contentRange !== null ? { 'Content-Range': contentRange } : {}) });
    res.end(data.subarray(start, end + 1));
  };
  if (behaviour.delay !== undefined) setTimeout(answer, behaviour.delay);
  else answer();
}

beforeAll(async () => {
  server = createServer(handle);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((done) => server.close(() => done()));
});

async function failure(promise: Promise<unknown>): Promise<VramError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof VramError) return error;
    throw error;
  }
  throw new Error('expected a VramError');
}

const read = (repo: string, more: { fetch?: (input: string, init?: RequestInit) => Promise<Response>; cache?: HubCache } = {}) =>
  fromHub(`acme/${repo}`, { endpoint, timeout: 10_000, ...more });

describe('shard headers: at most MAX_IN_FLIGHT requests at once', () => {
  it(`40 shards: never more than ${MAX_IN_FLIGHT} safetensors requests open, all read, in the index's order`, async () => {
    maxInFlight = 0;
    const hub = await read('shards');
    expect(hub.checkpoint?.files.map((f) => f.name)).toEqual(Array.from({ length: SHARDS }, (_, i) => shardName(i)));
    expect(hub.checkpoint?.tensors).toBe(SHARDS);
    // The long headers took a second request each: 40 + 8.
    expect([...requests].filter(([k]) => k.startsWith('shards/')).reduce((n, [, v]) => n + v, 0)).toBe(SHARDS + SHARDS / 5);
    expect(maxInFlight).toBeLessThanOrEqual(MAX_IN_FLIGHT);
    // …and they do overlap: the shards are not read one at a time.
    expect(maxInFlight).toBe(MAX_IN_FLIGHT);
  });

  it('a bad shard: its error (the earliest bad one), no request left running', async () => {
    const error = await failure(read('twice-in-a-shard'));
    expect(error.issues[0]).toMatchObject({ code: 'bad-safetensors', path: [shardName(1), 'header', 'w1'] });
    expect(inFlight).toBe(0);
  });
});

describe("the header against the file's length (Content-Range, Content-Length)", () => {
  it('a well-formed Range answer, short or long header, or a whole file with its length: read', async () => {
    for (const repo of ['ok', 'ok-long', 'whole-ok']) expect((await read(repo)).checkpoint?.parameters).toBe(4);
  });

  it('a file shorter than the last tensor ends: refused, naming the tensor', async () => {
    const error = await failure(read('shorter'));
    expect(error.issues[0]).toMatchObject({ code: 'bad-safetensors', path: ['model.safetensors', 'header', 'w', 'data_offsets'] });
    expect(error.message).toMatch(/run past the end of the file/);
  });

  it('a header length past the file: refused after the first range, no second request', async () => {
    const counting = countingFetch();
    const error = await failure(read('claims-more', { fetch: counting.fetch }));
    expect(error.issues[0]).toMatchObject({ code: 'bad-safetensors', path: ['model.safetensors'], received: '50000000 bytes' });
    expect(error.message).toMatch(/header length runs past the end of the file/);
    expect(requests.get('claims-more/model.safetensors')).toBe(1);
    expect(counting.read()).toBeLessThanOrEqual(CONFIG.length + 100_000);
  });

  it('a file longer than its data: refused (data past the last tensor), and not cached', async () => {
    const entries = new Map<string, HubCacheEntry>();
    const cache: HubCache = { get: (k) => entries.get(k), set: (k, e) => void entries.set(k, e) };
    const error = await failure(read('longer', { cache }));
    expect(error.issues[0]).toMatchObject({ code: 'bad-safetensors', path: ['model.safetensors', 'header'] });
    expect(error.message).toMatch(/data past its last tensor/);
    expect([...entries.keys()].some((k) => k.endsWith('/model.safetensors'))).toBe(false);
  });

  it('no Content-Range, an unknown length (*), one past 2^53, or bytes from elsewhere: hub-bad-range, nothing guessed', async () => {
    for (const repo of ['no-content-range', 'unknown-length', 'past-2-53', 'elsewhere']) {
      const error = await failure(read(repo));
      expect(error.issues[0], repo).toMatchObject({ code: 'hub-bad-range', path: ['model.safetensors'] });
    }
  });

  it('a whole file (Range ignored) without Content-Length: hub-bad-length', async () => {
    const error = await failure(read('whole-chunked'));
    expect(error.issues[0]).toMatchObject({ code: 'hub-bad-length', path: ['model.safetensors'], received: 'no Content-Length' });
  });

  it('the second Range request answered with the whole file, or another length: hub-bad-range', async () => {
    const counting = countingFetch();
    const whole = await failure(read('second-whole', { fetch: counting.fetch }));
    expect(whole.issues[0]).toMatchObject({ code: 'hub-bad-range', path: ['model.safetensors'], received: 'HTTP 200' });
    expect(counting.read()).toBeLessThanOrEqual(CONFIG.length + 100_000 + long.length);
    const other = await failure(read('second-other-length'));
    expect(other.issues[0]).toMatchObject({ code: 'hub-bad-range', path: ['model.safetensors'] });
    expect(other.message).toMatch(/changed length/);
  });
});

describe('a tensor named twice in a header', () => {
  it('refused naming the file and the tensor (JSON.parse would have kept the last)', async () => {
    const error = await failure(read('twice'));
    expect(error.issues[0]).toMatchObject({ code: 'bad-safetensors', path: ['model.safetensors', 'header', 'w'] });
    expect(error.message).toMatch(/names the tensor "w" twice/);
  });
});
