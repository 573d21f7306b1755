/**
 * `vram-ts <org>/<name>`: the Hub lookup with huggingface_hub's environment (HF_ENDPOINT,
 * HF_TOKEN or the token file under HF_HOME, HF_HUB_OFFLINE) and an on-disk cache of what fromHub
 * reads (config, index and safetensors headers, never weights):
 * `${XDG_CACHE_HOME:-~/.cache}/vram-ts/hub/<endpoint host>/<repo>/<revision>/<file>.json`.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fromHub, type HubCache, type HubCacheEntry, type HubModel } from '../index.js';

/** The environment the lookup reads (process.env in the command). */
export type HubEnv = Readonly<Record<string, string | undefined>>;

/** The directory of the command's Hub cache. */
export function hubCacheDir(env: HubEnv): string {
  const base = env.XDG_CACHE_HOME !== undefined && env.XDG_CACHE_HOME !== '' ? env.XDG_CACHE_HOME : join(env.HOME ?? homedir(), '.cache');
  return join(base, 'vram-ts', 'hub');
}

/** A HubCache of JSON files under `dir`; a cache that cannot be written is only not kept. */
export function diskCache(dir: string): HubCache {
  // Keys are <host>/<repo>/<encoded revision>/<file>; a port's ':' is no file name on Windows.
  const pathOf = (key: string) => `${join(dir, ...key.replace(/:/g, '_').split('/'))}.json`;
  return {
    get(key: string): HubCacheEntry | undefined {
      try {
        const entry = JSON.parse(readFileSync(pathOf(key), 'utf8')) as unknown;
        if (typeof entry === 'object' && entry !== null && typeof (entry as { text?: unknown }).text === 'string') return entry as HubCacheEntry;
      } catch {
        // absent or unreadable: read from the Hub
      }
      return undefined;
    },
    set(key: string, entry: HubCacheEntry): void {
      const file = pathOf(key);
      try {
        mkdirSync(dirname(file), { recursive: true });
        const temporary = `${file}.${process.pid}.tmp`;
        writeFileSync(temporary, JSON.stringify(entry));
        renameSync(temporary, file);
      } catch {
        // a read-only or full disk: the next call asks the Hub again
      }
    },
  };
}

/** HF_TOKEN, else the token `huggingface-cli login` saved (HF_TOKEN_PATH, or HF_HOME/token). */
function tokenOf(env: HubEnv): string | undefined {
  if (env.HF_TOKEN !== undefined && env.HF_TOKEN.trim() !== '') return env.HF_TOKEN.trim();
  const hfHome =
    env.HF_HOME !== undefined && env.HF_HOME !== ''
      ? env.HF_HOME
      : join(env.XDG_CACHE_HOME !== undefined && env.XDG_CACHE_HOME !== '' ? env.XDG_CACHE_HOME : join(env.HOME ?? homedir(), '.cache'), 'huggingface');
  try {
    const token = readFileSync(env.HF_TOKEN_PATH !== undefined && env.HF_TOKEN_PATH !== '' ? env.HF_TOKEN_PATH : join(hfHome, 'token'), 'utf8').trim();
    return token === '' ? undefined : token;
  } catch {
    return undefined;
  }
}

/** huggingface_hub's truthy values of a boolean variable. */
function truthy(value: string | undefined): boolean {
  return value !== undefined && ['1', 'on', 'yes', 'true'].includes(value.trim().toLowerCase());
}

/** fromHub with the command's environment and disk cache. */
export function hubLookup(repo: string, revision: string | undefined, env: HubEnv, timeoutMs?: number): Promise<HubModel> {
  const token = tokenOf(env);
  return fromHub(repo, {
    ...(timeoutMs !== undefined ? { timeout: timeoutMs } : {}),
    ...(revision !== undefined ? { revision } : {}),
    ...(env.HF_ENDPOINT !== undefined && env.HF_ENDPOINT !== '' ? { endpoint: env.HF_ENDPOINT } : {}),
    ...(token !== undefined ? { token } : {}),
    offline: truthy(env.HF_HUB_OFFLINE),
    cache: diskCache(hubCacheDir(env)),
  });
}
