import type { HFConfigOptions } from '../catalog/hf.js';
import type { HFConfig } from '../catalog/config-reader.js';
import type { Layer } from '../nn/types.js';

// What fromHub (index.ts) takes and returns, and its cache (fetch.ts, headers.ts read it too).

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
  /** Milliseconds the whole call may take (every request and body); then a `hub-timeout` error. Default: none (the CLI's is 60 s). */
  readonly timeout?: number;
  /** Aborts the call (a `hub-aborted` error). */
  readonly signal?: AbortSignal;
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
