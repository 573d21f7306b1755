/**
 * fromHub(): a Hugging Face Hub repository's `config.json` and safetensors headers, read with the
 * platform `fetch` (HTTP Range requests: no weights are downloaded), the model built by
 * fromHFConfig and the checkpoint's exact parameter counts and bytes per dtype beside it.
 * Keeps no state of its own: a caller may pass a {@link HubCache} (the CLI's is on disk).
 */
import { VramError, type VramIssue } from './errors.js';
import { fromHFConfig, type HFConfig, type HFConfigOptions } from './catalog/hf.js';
import { estimate } from './estimate.js';
import type { Layer } from './nn/types.js';
import type { DType } from './tensor/dtype.js';
import { safetensorsHeaderLength, safetensorsSummary } from './report/safetensors.js';

/** What a {@link HubCache} keeps for one file: its text (config or index JSON, a safetensors header's JSON). */
export interface HubCacheEntry {
  /** The body: config.json or the index as served, or a safetensors header's JSON text. */
  readonly text: string;
  /** The server's ETag (sent back as If-None-Match), when it gave one. */
  readonly etag?: string;
  /** The commit the revision resolved to (X-Repo-Commit), when the server said. */
  readonly commit?: string;
  /** The file does not exist at this commit (kept only for commit hashes: model.safetensors of a sharded checkpoint). */
  readonly missing?: boolean;
}

/**
 * Where {@link fromHub} keeps what it read, keyed by `<endpoint host>/<repo>/<revision>/<file>`
 * (a revision is URI-encoded, so a key's `/` separate only those parts). Entries under a commit
 * hash never change and are used without a request; others are revalidated with If-None-Match.
 * Methods may be synchronous or return promises.
 */
export interface HubCache {
  get(key: string): HubCacheEntry | undefined | Promise<HubCacheEntry | undefined>;
  set(key: string, entry: HubCacheEntry): void | Promise<void>;
}

/** Options of {@link fromHub}; the rest are {@link HFConfigOptions}, passed to fromHFConfig. */
export interface HubOptions extends HFConfigOptions {
  /** Branch, tag or commit hash. Default `'main'`. */
  readonly revision?: string;
  /** The Hub's address. Default `https://huggingface.co` (the CLI reads HF_ENDPOINT). */
  readonly endpoint?: string;
  /** A Hugging Face access token, sent as `Authorization: Bearer` (the CLI reads HF_TOKEN). */
  readonly token?: string;
  /** The fetch to use. Default: the platform's `globalThis.fetch`. */
  readonly fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /** Where to keep and find config, index and headers. Default: none. */
  readonly cache?: HubCache;
  /** Use only the cache: no request at all (huggingface_hub's HF_HUB_OFFLINE). Default false. */
  readonly offline?: boolean;
}

/** One safetensors file of a checkpoint, from its header. */
export interface HubCheckpointFile {
  readonly name: string;
  readonly tensors: number;
  readonly parameters: number;
  /** Bytes of tensor data (the header not included). */
  readonly bytes: number;
}

/** A checkpoint's safetensors headers, summed over its files. */
export interface HubCheckpoint {
  readonly files: readonly HubCheckpointFile[];
  readonly tensors: number;
  readonly parameters: number;
  readonly bytes: number;
  /** Elements and bytes by safetensors dtype name (BF16, F32, I64, …). */
  readonly byDtype: Readonly<Record<string, { readonly parameters: number; readonly bytes: number }>>;
  /** The dtype most parameters are stored in (BF16, F16, F32, …). */
  readonly dtype: string;
}

/** What {@link fromHub} returns. */
export interface HubModel {
  readonly repo: string;
  readonly revision: string;
  /** The commit the revision resolved to, when the server said (X-Repo-Commit). */
  readonly commit?: string;
  readonly config: HFConfig;
  /** The model fromHFConfig builds from the config. */
  readonly model: Layer;
  /**
   * The model again with other options (dtype, attention, transformers release, tensor
   * parallelism …), built as `model` was: with the checkpoint's stored dtype when neither the
   * options nor the config name one.
   */
  readonly build: (options?: HFConfigOptions) => Layer;
  /** Parameters of the built model (a tied weight counted once, as model.parameters()). */
  readonly parameters: number;
  /** The safetensors checkpoint; undefined when the repo has none (only .bin or .gguf files). */
  readonly checkpoint?: HubCheckpoint;
  /** When the built model's parameter count differs from the checkpoint's: why it may. */
  readonly mismatch?: string;
}

const DEFAULT_ENDPOINT = 'https://huggingface.co';
const REPO = /^(?:[A-Za-z0-9][\w.-]{0,95}\/)?[A-Za-z0-9][\w.-]{0,95}$/;
/** The first request's range: most headers fit, so one request reads the length and the header. */
const FIRST_RANGE = 100_000;
const FLOAT_DTYPES: Readonly<Record<string, DType>> = { BF16: 'bfloat16', F16: 'float16', F32: 'float32' };

function hubError(
  code: string,
  message: string,
  path: readonly (string | number)[],
  details: { expected?: string | undefined; received?: string | undefined } = {},
): VramError {
  return new VramError([
    {
      path,
      code,
      message,
      ...(details.expected !== undefined ? { expected: details.expected } : {}),
      ...(details.received !== undefined ? { received: details.received } : {}),
    },
  ]);
}

interface Target {
  readonly base: string;
  readonly host: string;
  readonly repo: string;
  readonly revision: string;
  readonly token: string | undefined;
  readonly fetch: (input: string, init?: RequestInit) => Promise<Response>;
  readonly cache: HubCache | undefined;
  readonly offline: boolean;
}

/** A commit hash: what it names never changes. */
function immutable(revision: string): boolean {
  return /^[0-9a-f]{40}$/.test(revision);
}

function keyOf(t: Target, revision: string, file: string): string {
  return `${t.host}/${t.repo}/${encodeURIComponent(revision)}/${file}`;
}

function urlOf(t: Target, revision: string, file: string): string {
  return `${t.base}/${t.repo}/resolve/${encodeURIComponent(revision)}/${file.split('/').map(encodeURIComponent).join('/')}`;
}

/** The 404s of a file in a repository and revision that exist (not of the repository, not of the revision). */
const ENTRY_MISSING = new WeakSet<VramError>();

/** A request; a failure to connect becomes the offline error. */
async function request(t: Target, revision: string, file: string, headers: Record<string, string>): Promise<Response> {
  const url = urlOf(t, revision, file);
  const all = { ...headers, ...(t.token !== undefined ? { Authorization: `Bearer ${t.token}` } : {}) };
  let response: Response;
  try {
    response = await t.fetch(url, { headers: all, redirect: 'follow' });
  } catch (error) {
    const cause = error instanceof Error ? ((error.cause as { code?: string } | undefined)?.code ?? error.message) : String(error);
    throw hubError('hub-offline', `cannot reach ${t.base} (${cause}): offline? With HF_HUB_OFFLINE=1 (offline: true) only the cache is read`, [file], {
      received: url,
    });
  }
  if (response.ok || response.status === 304) return response;
  await response.body?.cancel().catch(() => undefined);
  const code = response.headers.get('x-error-code');
  const at = `${t.repo}@${revision}`;
  if (code === 'RepoNotFound')
    throw hubError('hub-not-found', `repository ${t.repo} not found (or private: set HF_TOKEN to a token with access)`, [file], {
      received: `HTTP ${response.status}`,
    });
  if (response.status === 401 || response.status === 403 || code === 'GatedRepo') {
    const how =
      t.token === undefined
        ? 'set HF_TOKEN (or pass token) to a token with access'
        : 'the token given (HF_TOKEN) has no access to it; accept its terms on the Hub or use another token';
    throw hubError('hub-auth', `${t.repo} is gated or private: ${how}`, [file], { received: `HTTP ${response.status}` });
  }
  if (response.status === 404) {
    if (code === 'RevisionNotFound') throw hubError('hub-not-found', `revision ${revision} of ${t.repo} not found`, [file], { received: 'HTTP 404' });
    const missing = hubError('hub-not-found', `${file} not found in ${at}`, [file], { received: 'HTTP 404' });
    ENTRY_MISSING.add(missing);
    throw missing;
  }
  throw hubError('hub-http', `the Hub answered HTTP ${response.status} for ${file} of ${at}`, [file], { received: `HTTP ${response.status}` });
}

/** A body read a piece at a time; `close` lets go of the rest (a server ignoring Range sends every weight). */
function bodyOf(response: Response): { take(n: number): Promise<Uint8Array>; close(): Promise<void> } {
  const reader = response.body?.getReader();
  let buffered = new Uint8Array(0);
  let ended = reader === undefined;
  return {
    async take(n: number): Promise<Uint8Array> {
      while (buffered.length < n && !ended) {
        const { done, value } = await reader!.read();
        if (done) ended = true;
        else {
          const joined = new Uint8Array(buffered.length + value.length);
          joined.set(buffered, 0);
          joined.set(value, buffered.length);
          buffered = joined;
        }
      }
      return buffered.subarray(0, Math.min(n, buffered.length));
    },
    async close(): Promise<void> {
      if (!ended) await reader!.cancel().catch(() => undefined);
      ended = true;
    },
  };
}

interface Fetched {
  readonly text: string;
  readonly commit?: string;
  /** Whether the file exists (false for a 404 when `optional`). */
  readonly found: boolean;
}

/**
 * One file through the cache: a commit's entries are used as they are, others are revalidated
 * (If-None-Match → 304); `read` turns a 200/206 response into the entry's text.
 */
async function cached(
  t: Target,
  revision: string,
  file: string,
  read: (r: Response, headers: Record<string, string>) => Promise<string>,
  headers: Record<string, string> = {},
  optional = false,
): Promise<Fetched> {
  const key = keyOf(t, revision, file);
  const entry = t.cache !== undefined ? await t.cache.get(key) : undefined;
  if (entry !== undefined && (immutable(revision) || t.offline))
    return { text: entry.text, ...(entry.commit !== undefined ? { commit: entry.commit } : {}), found: entry.missing !== true };
  if (t.offline) throw hubError('hub-offline', `${file} of ${t.repo}@${revision} is not in the cache and HF_HUB_OFFLINE (offline) forbids requests`, [file]);
  let response: Response;
  try {
    response = await request(t, revision, file, { ...headers, ...(entry?.etag !== undefined ? { 'If-None-Match': entry.etag } : {}) });
  } catch (error) {
    if (optional && error instanceof VramError && ENTRY_MISSING.has(error)) {
      if (t.cache !== undefined && immutable(revision)) await t.cache.set(key, { text: '', missing: true });
      return { text: '', found: false };
    }
    throw error;
  }
  const commit = response.headers.get('x-repo-commit') ?? undefined;
  if (response.status === 304 && entry !== undefined) {
    await response.body?.cancel().catch(() => undefined);
    return { text: entry.text, ...((commit ?? entry.commit) !== undefined ? { commit: (commit ?? entry.commit)! } : {}), found: true };
  }
  const text = await read(response, headers);
  const etag = response.headers.get('x-linked-etag') ?? response.headers.get('etag') ?? undefined;
  if (t.cache !== undefined) await t.cache.set(key, { text, ...(etag !== undefined ? { etag } : {}), ...(commit !== undefined ? { commit } : {}) });
  return { text, ...(commit !== undefined ? { commit } : {}), found: true };
}

function parseJson(text: string, file: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
  } catch (error) {
    throw hubError('bad-config', `${file} is not valid JSON`, [file], { expected: what, received: error instanceof Error ? error.message : undefined });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw hubError('bad-config', `${file} holds no JSON object`, [file], { expected: what, received: Array.isArray(value) ? 'an array' : String(value) });
  return value as Record<string, unknown>;
}

/** The header's JSON text from the first bytes and, when the header is longer, a second Range request. */
function headerReader(t: Target, revision: string, file: string) {
  return async (response: Response): Promise<string> => {
    const body = bodyOf(response);
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
        const restBody = bodyOf(rest);
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
        return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      } catch {
        throw hubError('bad-safetensors', `${file}'s header is not UTF-8 text`, [file]);
      }
    } finally {
      await body.close();
    }
  };
}

/** One file's header summed up: elements and bytes per dtype; undefined when an optional file is absent. */
type FileSummary = HubCheckpointFile & { readonly byDtype: Readonly<Record<string, number>>; readonly bytesByDtype: Readonly<Record<string, number>> };

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
function checkpointOf(files: readonly FileSummary[]): HubCheckpoint {
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

/**
 * Reads a Hugging Face Hub model without downloading its weights: `config.json` (built with
 * {@link fromHFConfig}) and the safetensors headers of `model.safetensors`, or of every shard that
 * `model.safetensors.index.json`'s `weight_map` lists, with HTTP Range requests (8 bytes of
 * length, then the header JSON). Returns the model, the config, the checkpoint's exact parameters
 * and bytes per dtype, and a note when the built model's parameter count differs from the
 * checkpoint's. With no `dtype` option and no `torch_dtype` in the config, the model takes the
 * checkpoint's stored dtype (as `from_pretrained(torch_dtype="auto")`).
 *
 * Uses only the platform `fetch` (Node 18+, Deno, Bun, browsers) and keeps nothing itself: pass a
 * {@link HubCache} to reuse what was read. Errors are VramErrors with the file as path: `hub-auth`
 * (401/403: a gated or private repo; set HF_TOKEN), `hub-not-found` (repo, revision or file),
 * `hub-offline` (no connection), `bad-config` (config or index not JSON), `bad-safetensors`.
 *
 * @example
 * ```ts
 * import { fromHub } from 'vram-ts';
 * // A canned Hub: config.json and one safetensors file served from memory.
 * const config = { model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 256, torch_dtype: 'bfloat16', tie_word_embeddings: true };
 * const tensors: Record<string, number[]> = { 'model.embed_tokens.weight': [256, 64], 'model.norm.weight': [64] };
 * for (let i = 0; i < 2; i++) {
 *   const p = `model.layers.${i}.`;
 *   Object.assign(tensors, { [`${p}input_layernorm.weight`]: [64], [`${p}post_attention_layernorm.weight`]: [64], [`${p}self_attn.q_proj.weight`]: [64, 64], [`${p}self_attn.k_proj.weight`]: [64, 64], [`${p}self_attn.v_proj.weight`]: [64, 64], [`${p}self_attn.o_proj.weight`]: [64, 64], [`${p}mlp.gate_proj.weight`]: [128, 64], [`${p}mlp.up_proj.weight`]: [128, 64], [`${p}mlp.down_proj.weight`]: [64, 128] });
 * }
 * const header: Record<string, unknown> = {};
 * let offset = 0;
 * for (const [name, shape] of Object.entries(tensors)) {
 *   const bytes = shape.reduce((a, b) => a * b, 1) * 2;
 *   header[name] = { dtype: 'BF16', shape, data_offsets: [offset, offset + bytes] };
 *   offset += bytes;
 * }
 * const json = new TextEncoder().encode(JSON.stringify(header));
 * const file = new Uint8Array(8 + json.length);
 * new DataView(file.buffer).setBigUint64(0, BigInt(json.length), true);
 * file.set(json, 8);
 * const fetch = async (url: string) =>
 *   url.endsWith('/config.json') ? new Response(JSON.stringify(config))
 *   : url.endsWith('/model.safetensors') ? new Response(file, { status: 206 })
 *   : new Response('not found', { status: 404 });
 * const hub = await fromHub('my-org/tiny-llama', { fetch });
 * console.log(hub.checkpoint?.parameters, hub.checkpoint?.dtype); // 98624 BF16
 * console.log(hub.parameters === hub.checkpoint?.parameters); // true
 * ```
 */
export function fromHub(repo: string, options: HubOptions = {}): Promise<HubModel> {
  return readHub(repo, options);
}

/** The checked options as a fetch target, and the rest (the model's build options); every bad option in one error. */
function targetOf(repo: string, options: HubOptions): { t: Target; build: HFConfigOptions } {
  const { revision = 'main', endpoint = DEFAULT_ENDPOINT, token, fetch: fetchOption, cache, offline = false, ...build } = options;
  const issues: VramIssue[] = [];
  if (typeof repo !== 'string' || !REPO.test(repo) || repo.includes('..') || repo.includes('--'))
    issues.push({
      path: ['repo'],
      code: 'bad-option',
      message: 'a Hub repository id is <org>/<name> (letters, digits, - _ .)',
      expected: 'e.g. Qwen/Qwen2.5-0.5B',
      received: JSON.stringify(repo),
    });
  if (typeof revision !== 'string' || revision === '' || revision.includes('..'))
    issues.push({ path: ['revision'], code: 'bad-option', message: 'revision must be a branch, tag or commit hash', received: JSON.stringify(revision) });
  let base = '';
  let host = '';
  try {
    const url = new URL(String(endpoint));
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http');
    base = url.href.replace(/\/+$/, '');
    host = url.host;
  } catch {
    issues.push({ path: ['endpoint'], code: 'bad-option', message: 'endpoint must be an http(s) URL', received: JSON.stringify(endpoint) });
  }
  if (token !== undefined && (typeof token !== 'string' || token === ''))
    issues.push({ path: ['token'], code: 'bad-option', message: 'token must be a non-empty string', received: typeof token });
  const doFetch = fetchOption ?? (typeof globalThis.fetch === 'function' ? globalThis.fetch.bind(globalThis) : undefined);
  if (doFetch === undefined || typeof doFetch !== 'function')
    issues.push({ path: ['fetch'], code: 'bad-option', message: 'no fetch: pass options.fetch on a platform without globalThis.fetch' });
  if (cache !== undefined && (typeof cache !== 'object' || cache === null || typeof cache.get !== 'function' || typeof cache.set !== 'function'))
    issues.push({ path: ['cache'], code: 'bad-option', message: 'cache must have get(key) and set(key, entry)' });
  if (typeof offline !== 'boolean')
    issues.push({ path: ['offline'], code: 'bad-option', message: 'offline must be true or false', received: JSON.stringify(offline) });
  if (issues.length > 0) throw new VramError(issues);
  return { t: { base, host, repo, revision, token, fetch: doFetch!, cache, offline }, build };
}

/** The safetensors headers at `at`: one model.safetensors, or every shard the index names, or none. */
async function checkpointFiles(t: Target, at: string): Promise<FileSummary[]> {
  const single = await readHeader(t, at, 'model.safetensors', true);
  if (single !== undefined) return [single];
  const files: FileSummary[] = [];
  const index = await cached(t, at, 'model.safetensors.index.json', (r) => r.text(), {}, true);
  if (index.found) {
    const parsed = parseJson(index.text, 'model.safetensors.index.json', 'an index with weight_map');
    const map = parsed.weight_map;
    if (typeof map !== 'object' || map === null || Array.isArray(map))
      throw hubError('bad-config', 'the index has no weight_map object', ['model.safetensors.index.json', 'weight_map']);
    const shards = [...new Set(Object.values(map as Record<string, unknown>).map((n) => shardName(n, 'model.safetensors.index.json')))];
    for (const shard of shards) files.push((await readHeader(t, at, shard, false))!);
  }
  return files;
}

/** Why the built model's parameter count differs from the checkpoint's, when it does. */
function mismatchOf(checkpoint: HubCheckpoint | undefined, parameters: number): string | undefined {
  if (checkpoint === undefined || checkpoint.parameters === parameters) return undefined;
  const diff = checkpoint.parameters - parameters;
  // The model counts a tied weight once (model.parameters()); save_pretrained stores it once too.
  const why =
    diff > 0
      ? 'tensors the model does not build: a tied weight stored twice, buffers, extra heads'
      : 'a quantized, pruned or partial checkpoint, or layers the config builds that it does not store';
  return `the model built from config.json has ${parameters.toLocaleString('en-US')} parameters, ${Math.abs(diff).toLocaleString('en-US')} ${diff > 0 ? 'fewer' : 'more'} than the checkpoint (${why})`;
}

/** fromHub's body: every failure, bad options included, a rejected promise. */
async function readHub(repo: string, options: HubOptions): Promise<HubModel> {
  const { t, build } = targetOf(repo, options);
  const { revision, offline } = t;
  const configFile = await cached(t, revision, 'config.json', (r) => r.text());
  const config = parseJson(configFile.text, 'config.json', 'a config.json object');
  // Everything else is read at the commit the revision resolved to: fixed, so cached for good.
  const at = configFile.commit !== undefined && immutable(configFile.commit) ? configFile.commit : revision;
  if (at !== revision && t.cache !== undefined && !offline) await t.cache.set(keyOf(t, at, 'config.json'), { text: configFile.text, commit: at });
  const files = await checkpointFiles(t, at);
  const checkpoint = files.length > 0 ? checkpointOf(files) : undefined;

  const text = config.text_config;
  const fromConfig = ['torch_dtype', 'dtype'].some(
    (k) =>
      (config[k] !== undefined && config[k] !== null) ||
      (typeof text === 'object' && text !== null && (text as Record<string, unknown>)[k] !== undefined && (text as Record<string, unknown>)[k] !== null),
  );
  const stored = checkpoint !== undefined && Object.hasOwn(FLOAT_DTYPES, checkpoint.dtype) ? FLOAT_DTYPES[checkpoint.dtype] : undefined;
  const make = (more: HFConfigOptions = {}): Layer =>
    fromHFConfig(config, more.dtype === undefined && !fromConfig && stored !== undefined ? { ...more, dtype: stored } : more);
  const model = make(build);
  const parameters = estimate(model, { input: [1, 1], mode: 'inference' }).params.total;
  const mismatch = mismatchOf(checkpoint, parameters);
  return {
    repo,
    revision,
    ...(configFile.commit !== undefined ? { commit: configFile.commit } : {}),
    config,
    model,
    build: make,
    parameters,
    ...(checkpoint !== undefined ? { checkpoint } : {}),
    ...(mismatch !== undefined ? { mismatch } : {}),
  };
}
