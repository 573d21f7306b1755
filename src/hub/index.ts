/**
 * fromHub(): a Hugging Face Hub repository's `config.json` and safetensors headers, read with the
 * platform `fetch` (HTTP Range requests: no weights are downloaded), the model built by
 * fromHFConfig and the checkpoint's exact parameter counts and bytes per dtype beside it.
 * Keeps no state of its own: a caller may pass a {@link HubCache} (the CLI's is on disk).
 */
import { VramError, type VramIssue } from '../errors.js';
import { fromHFConfig, type HFConfig, type HFConfigOptions } from '../catalog/hf.js';
import { estimate } from '../estimate.js';
import type { Layer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import { cached, immutable, keyOf, parseJson, type Target } from './fetch.js';
import { checkpointFiles, checkpointOf } from './headers.js';

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
const FLOAT_DTYPES: Readonly<Record<string, DType>> = { BF16: 'bfloat16', F16: 'float16', F32: 'float32' };

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
