import { showJson } from '../validate.js';
/**
 * fromHub(): a Hugging Face Hub repository's `config.json` and safetensors headers, read with the
 * platform `fetch` (HTTP Range requests: no weights are downloaded), the model built by
 * fromHFConfig and the checkpoint's exact parameter counts and bytes per dtype beside it.
 * Keeps no state of its own: a caller may pass a {@link HubCache} (the CLI's is on disk).
 */
import { VramError, type VramIssue } from '../errors.js';
import { fromHFConfig, type HFConfigOptions } from '../catalog/hf.js';
import { estimate } from '../estimate.js';
import type { Layer } from '../nn/types.js';
import type { DType } from '../tensor/dtype.js';
import { cached, capped, immutable, keyOf, parseJson, stopOf, type Target } from './fetch.js';
import { checkpointFiles, checkpointOf } from './headers.js';
import type { HubCheckpoint, HubModel, HubOptions } from './types.js';

export type { HubCache, HubCacheEntry, HubCheckpoint, HubCheckpointFile, HubModel, HubOptions } from './types.js';

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
 * `hub-offline` (no connection), `bad-config` (config or index not JSON), `bad-safetensors` (a
 * header the safetensors library refuses, a tensor named twice, or data not ending where the
 * file does), `hub-bad-range` / `hub-bad-length` (a Range answer without the file's length).
 * Shard headers are read at most 8 at a time.
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
 * const file = new Uint8Array(8 + json.length + offset); // the length, the header, then the (zeroed) weights
 * new DataView(file.buffer).setBigUint64(0, BigInt(json.length), true);
 * file.set(json, 8);
 * const fetch = async (url: string) =>
 *   url.endsWith('/config.json') ? new Response(JSON.stringify(config))
 *   : url.endsWith('/model.safetensors') ? new Response(file, { status: 206, headers: { 'Content-Range': `bytes 0-${file.length - 1}/${file.length}` } })
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
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new VramError([
      { path: ['options'], code: 'bad-option', message: "fromHub's options must be an object", expected: 'object', received: showJson(options) },
    ]);
  const { revision = 'main', endpoint = DEFAULT_ENDPOINT, token, fetch: fetchOption, cache, offline = false, timeout, signal, ...build } = options;
  const issues: VramIssue[] = [];
  if (typeof repo !== 'string' || !REPO.test(repo) || repo.includes('..') || repo.includes('--'))
    issues.push({
      path: ['repo'],
      code: 'bad-option',
      message: 'a Hub repository id is <org>/<name> (letters, digits, - _ .)',
      expected: 'e.g. Qwen/Qwen2.5-0.5B',
      received: showJson(repo),
    });
  if (typeof revision !== 'string' || revision === '' || revision.includes('..'))
    issues.push({ path: ['revision'], code: 'bad-option', message: 'revision must be a branch, tag or commit hash', received: showJson(revision) });
  let base = '';
  let host = '';
  try {
    const url = new URL(String(endpoint));
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http');
    base = url.href.replace(/\/+$/, '');
    host = url.host;
  } catch {
    issues.push({ path: ['endpoint'], code: 'bad-option', message: 'endpoint must be an http(s) URL', received: showJson(endpoint) });
  }
  if (token !== undefined && (typeof token !== 'string' || token === ''))
    issues.push({ path: ['token'], code: 'bad-option', message: 'token must be a non-empty string', received: typeof token });
  const doFetch = fetchOption ?? (typeof globalThis.fetch === 'function' ? globalThis.fetch.bind(globalThis) : undefined);
  if (doFetch === undefined || typeof doFetch !== 'function')
    issues.push({ path: ['fetch'], code: 'bad-option', message: 'no fetch: pass options.fetch on a platform without globalThis.fetch' });
  if (cache !== undefined && (typeof cache !== 'object' || cache === null || typeof cache.get !== 'function' || typeof cache.set !== 'function'))
    issues.push({ path: ['cache'], code: 'bad-option', message: 'cache must have get(key) and set(key, entry)' });
  if (typeof offline !== 'boolean')
    issues.push({ path: ['offline'], code: 'bad-option', message: 'offline must be true or false', received: showJson(offline) });
  if (timeout !== undefined && !(typeof timeout === 'number' && Number.isInteger(timeout) && timeout >= 1 && timeout <= 2 ** 31 - 1))
    issues.push({
      path: ['timeout'],
      code: 'bad-option',
      message: 'timeout is whole milliseconds',
      expected: `1 .. ${2 ** 31 - 1}`,
      received: showJson(timeout),
    });
  if (
    signal !== undefined &&
    !(typeof signal === 'object' && signal !== null && typeof signal.aborted === 'boolean' && typeof signal.addEventListener === 'function')
  )
    issues.push({ path: ['signal'], code: 'bad-option', message: 'signal must be an AbortSignal', received: typeof signal });
  if (issues.length > 0) throw new VramError(issues);
  return { t: { base, host, repo, revision, token, fetch: doFetch!, cache, offline, stop: stopOf(signal, timeout) }, build };
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
  try {
    return await readTarget(t, build);
  } finally {
    t.stop.end();
  }
}

/** What fromHub reads and builds, once its options are checked. */
async function readTarget(t: Target, build: HFConfigOptions): Promise<HubModel> {
  const { revision, offline, repo } = t;
  const configFile = await cached(t, revision, 'config.json', capped(t, 'config.json'));
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
