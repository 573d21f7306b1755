import { showJson } from '../validate.js';
/** The Hub's HTTP side: one file's request (auth, 404s, offline), its body piecewise, and the optional cache. */
import { VramError } from '../errors.js';
import type { HubCache } from './types.js';

/** A one-issue VramError with the file (and field) as path. */
export function hubError(
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

/** Where and how to fetch: the checked options of one fromHub call. */
export interface Target {
  readonly base: string;
  readonly host: string;
  readonly repo: string;
  readonly revision: string;
  readonly token: string | undefined;
  readonly fetch: (input: string, init?: RequestInit) => Promise<Response>;
  readonly cache: HubCache | undefined;
  readonly offline: boolean;
  /** Aborted by the caller's signal or when `timeout` ms have passed; `timedOut` says which. */
  readonly stop: Stop;
}

/** The call's stop: the caller's signal joined with the timeout. */
export interface Stop {
  readonly signal: AbortSignal;
  readonly timeoutMs: number | undefined;
  timedOut(): boolean;
  /** Clears the timer (the call is over). */
  end(): void;
}

/** A stop aborted by `signal` or after `timeoutMs` (none when both are absent: never aborts). */
export function stopOf(signal: AbortSignal | undefined, timeoutMs: number | undefined): Stop {
  const controller = new AbortController();
  let timedOut = false;
  const timer =
    timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          controller.abort();
        }, timeoutMs);
  const onAbort = () => controller.abort();
  if (signal?.aborted === true) controller.abort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    timeoutMs,
    timedOut: () => timedOut,
    end() {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    },
  };
}

/** The error of a stopped call: the timeout's, or the caller's abort. */
function stoppedError(t: Target, file: string): VramError {
  return t.stop.timedOut()
    ? hubError('hub-timeout', `no complete answer from ${t.base} for ${file} within ${t.stop.timeoutMs} ms (options.timeout; the CLI's --timeout)`, [file], {
        received: `${t.stop.timeoutMs} ms`,
      })
    : hubError('hub-aborted', `reading ${file} of ${t.repo} was aborted (options.signal)`, [file]);
}

/** `promise`, or the stop's error as soon as the call is stopped (a fetch that ignores signals included). */
export function unlessStopped<T>(t: Target, file: string, promise: Promise<T>): Promise<T> {
  const { signal } = t.stop;
  if (signal.aborted) {
    promise.catch(() => undefined);
    return Promise.reject(stoppedError(t, file));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(stoppedError(t, file));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(signal.aborted ? stoppedError(t, file) : error);
      },
    );
  });
}

/** A commit hash: what it names never changes. */
export function immutable(revision: string): boolean {
  return /^[0-9a-f]{40}$/.test(revision);
}

/** The cache key of a file at a revision. */
export function keyOf(t: Target, revision: string, file: string): string {
  return `${t.host}/${t.repo}/${encodeURIComponent(revision)}/${file}`;
}

function urlOf(t: Target, revision: string, file: string): string {
  return `${t.base}/${t.repo}/resolve/${encodeURIComponent(revision)}/${file.split('/').map(encodeURIComponent).join('/')}`;
}

/** The 404s of a file in a repository and revision that exist (not of the repository, not of the revision). */
const ENTRY_MISSING = new WeakSet<VramError>();

/** A request; a failure to connect becomes the offline error. */
export async function request(t: Target, revision: string, file: string, headers: Record<string, string>): Promise<Response> {
  const url = urlOf(t, revision, file);
  const all = { ...headers, ...(t.token !== undefined ? { Authorization: `Bearer ${t.token}` } : {}) };
  let response: Response;
  try {
    response = await unlessStopped(t, file, t.fetch(url, { headers: all, redirect: 'follow', signal: t.stop.signal }));
  } catch (error) {
    if (error instanceof VramError) throw error;
    const cause = error instanceof Error ? ((error.cause as { code?: string } | undefined)?.code ?? error.message) : String(error);
    throw hubError('hub-offline', `cannot reach ${t.base} (${cause}): offline? With HF_HUB_OFFLINE=1 (offline: true) only the cache is read`, [file], {
      received: url,
    });
  }
  if (!isResponse(response))
    throw hubError('hub-http', `the fetch for ${file} answered something that is not a Response`, [file], {
      expected: 'a Response',
      received: showJson(response),
    });
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

/**
 * A body read a piece at a time, never past what is asked (a server ignoring Range sends every
 * weight; a gzip bomb inflates only as far as it is read); `close` lets go of the rest. A broken
 * connection is a `hub-http` error, a stopped call the stop's.
 */
export function bodyOf(response: Response, t: Target, file: string): { take(n: number): Promise<Uint8Array>; close(): Promise<void> } {
  const reader = response.body?.getReader();
  let buffered = new Uint8Array(0);
  let ended = reader === undefined;
  const read = async () => {
    try {
      return await unlessStopped(t, file, reader!.read());
    } catch (error) {
      if (error instanceof VramError) throw error;
      throw hubError('hub-http', `the connection broke while reading ${file} of ${t.repo}`, [file], {
        received: error instanceof Error ? error.message : String(error),
      });
    }
  };
  return {
    async take(n: number): Promise<Uint8Array> {
      while (buffered.length < n && !ended) {
        const { done, value } = await read();
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

/** The most a config.json or an index may hold (the largest on the Hub are a few MB). */
export const JSON_CAP = 16 * 1024 * 1024;

/** A JSON file's text, read to at most `cap` bytes: a longer body is an error, not a read to the end. */
export function capped(t: Target, file: string, cap = JSON_CAP): (r: Response) => Promise<string> {
  return async (response) => {
    const body = bodyOf(response, t, file);
    try {
      const bytes = await body.take(cap + 1);
      if (bytes.length > cap)
        throw hubError('hub-too-large', `${file} of ${t.repo} is larger than ${cap} bytes: not a config file`, [file], {
          expected: `at most ${cap} bytes`,
          received: `more than ${cap} bytes`,
        });
      return new TextDecoder().decode(bytes);
    } finally {
      await body.close();
    }
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
export async function cached(
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
  // The commit names what is cached for good: a malformed one is an error, never a cache key.
  if (commit !== undefined && !immutable(commit)) {
    await response.body?.cancel().catch(() => undefined);
    throw hubError('hub-bad-commit', `the Hub's X-Repo-Commit for ${file} is not a 40-digit commit hash`, [file], {
      expected: '40 hex digits',
      received: JSON.stringify(commit.slice(0, 80)),
    });
  }
  if (response.status === 304 && entry !== undefined) {
    await response.body?.cancel().catch(() => undefined);
    return { text: entry.text, ...((commit ?? entry.commit) !== undefined ? { commit: (commit ?? entry.commit)! } : {}), found: true };
  }
  const text = await read(response, headers);
  const etag = response.headers.get('x-linked-etag') ?? response.headers.get('etag') ?? undefined;
  if (t.cache !== undefined) await t.cache.set(key, { text, ...(etag !== undefined ? { etag } : {}), ...(commit !== undefined ? { commit } : {}) });
  return { text, ...(commit !== undefined ? { commit } : {}), found: true };
}

/** A JSON object from a file's text (a BOM allowed), or a bad-config error naming the file. */
export function parseJson(text: string, file: string, what: string): Record<string, unknown> {
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

/** What the client reads of a Response: a user's fetch may answer anything. */
function isResponse(value: unknown): value is Response {
  const r = value as Partial<Response> | null;
  const body = r?.body as { getReader?: unknown } | null | undefined;
  return (
    typeof r === 'object' &&
    r !== null &&
    typeof r.ok === 'boolean' &&
    typeof r.status === 'number' &&
    typeof r.headers?.get === 'function' &&
    (body === null || body === undefined || typeof body.getReader === 'function')
  );
}
