/**
 * `PYTORCH_CUDA_ALLOC_CONF` read as PyTorch reads it: the lexer and the per-key parsers of
 * c10/cuda/CUDAAllocatorConfig.cpp (`lexArgs`, `consumeToken`, `parseArgs`, `parseMaxSplitSize`,
 * `parseMaxNonSplitRoundingSize`, `parseGarbageCollectionThreshold`, `parseRoundUpPower2Divisions`;
 * the 2.5–2.8 line, moved unchanged in substance to c10/core/AllocatorConfig.cpp in 2.9) and the
 * interval lookup `CUDAAllocatorConfig::roundup_power2_divisions(size)`.
 */

import { fail } from '../errors.js';
import { didYouMean, type Path, show } from '../validate.js';

const MiB = 2 ** 20;
/** kLargeBuffer (CUDACachingAllocator.cpp): 20 MiB, also the floor of max_split_size_mb and the default max_non_split_rounding. */
const LARGE_BUFFER = 20 * MiB;
/** kRoundUpPowerOfTwoIntervals: the power-of-two intervals from 1 MiB (index 0: below 2 MiB) to 64 GiB (index 15: 32 GiB and up). */
const INTERVALS = 16;

/**
 * The caching allocator's settings that change a replay (CUDAAllocatorConfig's members).
 *
 * @example
 * ```ts
 * import { parseAllocConf } from 'vram-ts';
 * const conf = parseAllocConf('max_split_size_mb:128');
 * console.log(conf.maxSplitSize / 2 ** 20, conf.expandableSegments); // 128 false
 * ```
 */
export interface AllocConf {
  /** `expandable_segments:True`: one segment per pool that grows by pages (2 MiB small, 20 MiB large). */
  readonly expandableSegments: boolean;
  /** `max_split_size_mb` in bytes: blocks this large are never split; Infinity when unset (`m_max_split_size = SIZE_MAX`). */
  readonly maxSplitSize: number;
  /** `max_non_split_rounding_mb` in bytes: how much larger than a request >= maxSplitSize a reused block may be (default kLargeBuffer, 20 MiB). */
  readonly maxNonSplitRounding: number;
  /** `garbage_collection_threshold` in (0, 1); 0 when unset (off). Acts only with a per-process memory fraction, as in the source. */
  readonly garbageCollectionThreshold: number;
  /** `roundup_power2_divisions` per power-of-two interval from 1 MiB (16 entries; 0 or 1: plain 512 B rounding). */
  readonly roundupPower2Divisions: readonly number[];
  /** `backend`: `native` (this allocator) or `cudaMallocAsync` (not replayed). */
  readonly backend: 'native' | 'cudaMallocAsync';
}

/** The settings with no PYTORCH_CUDA_ALLOC_CONF (CUDAAllocatorConfig's constructor). */
export const DEFAULT_ALLOC_CONF: AllocConf = Object.freeze({
  expandableSegments: false,
  maxSplitSize: Number.POSITIVE_INFINITY,
  maxNonSplitRounding: LARGE_BUFFER,
  garbageCollectionThreshold: 0,
  roundupPower2Divisions: Object.freeze(new Array<number>(INTERVALS).fill(0)),
  backend: 'native',
});

/** Keys PyTorch accepts that change nothing here (locks, pinned host memory, graph capture), with what their value must be. */
const IGNORED_BOOLEAN = [
  'release_lock_on_cudamalloc',
  'release_lock_on_hipmalloc',
  'pinned_use_cuda_host_register',
  'pinned_use_hip_host_register',
  'pinned_use_background_threads',
  'graph_capture_record_stream_reuse',
];
const KNOWN = [
  'max_split_size_mb',
  'max_non_split_rounding_mb',
  'garbage_collection_threshold',
  'roundup_power2_divisions',
  'backend',
  'expandable_segments',
  'pinned_num_register_threads',
  'pinned_reserve_segment_size_mb',
  ...IGNORED_BOOLEAN,
];

/** lexArgs: `,` `:` `[` `]` are tokens of their own, spaces are dropped, anything else runs together. */
function lex(text: string): string[] {
  const tokens: string[] = [];
  let buf = '';
  for (const ch of text) {
    if (ch === ',' || ch === ':' || ch === '[' || ch === ']') {
      if (buf !== '') tokens.push(buf);
      buf = '';
      tokens.push(ch);
    } else if (ch !== ' ') buf += ch;
  }
  if (buf !== '') tokens.push(buf);
  return tokens;
}

const isPowerOf2 = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && 2 ** Math.round(Math.log2(n)) === n;

/** floor(log2(n)) for a positive safe integer, exact at powers of two (`63 - countLeadingZeros(n)`). */
export function log2Floor(n: number): number {
  // Below 2^32 the count of leading zeros is exact and cheap (the allocator's replay calls this per request).
  if (n < 4294967296) return 31 - Math.clz32(n);
  let e = Math.floor(Math.log2(n));
  if (2 ** e > n) e -= 1;
  else if (2 ** (e + 1) <= n) e += 1;
  return e;
}

/** The settings as parseAllocConf fills them in, key by key. */
interface Draft {
  expandableSegments: boolean;
  maxSplitSize: number;
  maxNonSplitRounding: number;
  garbageCollectionThreshold: number;
  backend: AllocConf['backend'];
  readonly divisions: number[];
}

/** parseAllocConf's reading of the tokens, every failure a `bad-option` VramError at its path. */
interface TokenReader {
  readonly tokens: readonly string[];
  token(i: number): string | undefined;
  /** consumeToken: token `i` must be `c`. */
  consume(i: number, c: string): void;
  /** Token `i` as a whole number (`what` names it in the messages). */
  integer(i: number, what: string): number;
  /** Token `i` as `True` or `False`. */
  bool(i: number, what: string): boolean;
  bad(message: string, expected?: string, received?: string): never;
}

function tokenReader(tokens: readonly string[], path: Path): TokenReader {
  const bad = (message: string, expected?: string, received?: string): never =>
    fail('bad-option', message, { path, ...(expected !== undefined ? { expected } : {}), ...(received !== undefined ? { received } : {}) });
  const token = (i: number): string | undefined => tokens[i];
  const consume = (i: number, c: string): void => {
    if (token(i) !== c)
      bad(`Error parsing CachingAllocator settings, expected ${c}`, JSON.stringify(c), token(i) === undefined ? 'end of text' : JSON.stringify(token(i)));
  };
  const integer = (i: number, what: string): number => {
    const t = token(i);
    if (t === undefined) return bad(`Error, expecting ${what} value`);
    if (!/^\d+$/.test(t) || !Number.isSafeInteger(Number(t))) return bad(`${what} must be a whole number`, 'digits', JSON.stringify(t));
    return Number(t);
  };
  const bool = (i: number, what: string): boolean => {
    const t = token(i);
    if (t !== 'True' && t !== 'False')
      bad(`Expected a single True/False argument for ${what}`, 'True | False', t === undefined ? 'end of text' : JSON.stringify(t));
    return t === 'True';
  };
  return { tokens, token, consume, integer, bool, bad };
}

/** A key's parser: reads `key:value` from the key at `at` into `conf`; the index of the value's last token. */
type KeyParser = (r: TokenReader, at: number, key: string, conf: Draft) => number;

/** parseMaxSplitSize / parseMaxNonSplitRoundingSize: "must be > 20" (kLargeBuffer / mb). */
function parseMaxSize(r: TokenReader, at: number, key: string, conf: Draft): number {
  r.consume(at + 1, ':');
  const mb = r.integer(at + 2, key);
  if (mb <= LARGE_BUFFER / MiB) r.bad(`CachingAllocator option ${key} too small, must be > ${LARGE_BUFFER / MiB}`, `> ${LARGE_BUFFER / MiB}`, String(mb));
  if (!Number.isSafeInteger(mb * MiB)) r.bad(`${key} passes 2^53 bytes`, `at most ${Math.floor(Number.MAX_SAFE_INTEGER / MiB)}`, String(mb));
  if (key === 'max_split_size_mb') conf.maxSplitSize = mb * MiB;
  else conf.maxNonSplitRounding = mb * MiB;
  return at + 2;
}

/** parseGarbageCollectionThreshold: a number in (0, 1). */
function parseThreshold(r: TokenReader, at: number, _key: string, conf: Draft): number {
  r.consume(at + 1, ':');
  const t = r.token(at + 2);
  if (t === undefined) r.bad('Error, expecting garbage_collection_threshold value');
  const v = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(t!) ? Number(t) : Number.NaN;
  if (Number.isNaN(v)) r.bad('garbage_collection_threshold must be a number', 'a number in (0, 1)', JSON.stringify(t));
  if (!(v > 0)) r.bad('garbage_collect_threshold too small, set it 0.0~1.0', '(0.0, 1.0)', t);
  if (!(v < 1)) r.bad('garbage_collect_threshold too big, set it 0.0~1.0', '(0.0, 1.0)', t);
  conf.garbageCollectionThreshold = v;
  return at + 2;
}

/** parseRoundUpPower2Divisions: one power of two for every interval, or the list form. */
function parseDivisions(r: TokenReader, at: number, _key: string, conf: Draft): number {
  r.consume(at + 1, ':');
  const i = at + 2;
  if (r.token(i) === undefined) r.bad('Error, expecting roundup_power2_divisions value');
  if (r.token(i) === '[') return parseDivisionList(r, i, conf.divisions);
  const value = r.integer(i, 'roundup_power2_divisions');
  if (!isPowerOf2(value)) r.bad('For roundups, the divisions has to be power of 2', 'a power of 2', String(value));
  conf.divisions.fill(value);
  return i;
}

/** parseRoundUpPower2Divisions, list form: `[interval:divisions,…]` from the `[` at `at`; the index of its `]`. */
function parseDivisionList(r: TokenReader, at: number, divisions: number[]): number {
  const { tokens } = r;
  let i = at;
  let first = true;
  let last = 0;
  while (++i < tokens.length && tokens[i] !== ']') {
    const interval = tokens[i]!;
    r.consume(++i, ':');
    const value = r.integer(++i, 'roundup_power2_divisions');
    if (value !== 0 && !isPowerOf2(value))
      r.bad('For roundups, the divisions has to be power of 2 or 0 to disable roundup', 'a power of 2 or 0', String(value));
    if (interval === '>') divisions.fill(value, last);
    else {
      const mb = r.integer(i - 2, 'roundup_power2_divisions interval');
      if (!isPowerOf2(mb)) r.bad('For roundups, the intervals have to be power of 2', 'a power of 2 (MiB)', String(mb));
      const index = Math.min(log2Floor(mb), INTERVALS - 1);
      if (first) {
        divisions.fill(value, 0, index);
        first = false;
      }
      divisions[index] = value;
      last = index;
    }
    if (r.token(i + 1) === undefined) r.bad('Error parsing roundup_power2_divisions value, expected ]', '"]"', 'end of text');
    if (r.token(i + 1) !== ']') r.consume(++i, ',');
  }
  if (i >= tokens.length) r.bad('Error parsing roundup_power2_divisions value, expected ]', '"]"', 'end of text');
  return i;
}

/** backend: native or cudaMallocAsync. */
function parseBackend(r: TokenReader, at: number, _key: string, conf: Draft): number {
  r.consume(at + 1, ':');
  const t = r.token(at + 2);
  if (t !== 'native' && t !== 'cudaMallocAsync')
    r.bad('Unknown allocator backend, options are native and cudaMallocAsync', 'native | cudaMallocAsync', t === undefined ? 'end of text' : JSON.stringify(t));
  conf.backend = t as AllocConf['backend'];
  return at + 2;
}

/** expandable_segments, and the True/False keys that change nothing here (checked, then dropped). */
function parseBoolean(r: TokenReader, at: number, key: string, conf: Draft): number {
  r.consume(at + 1, ':');
  const value = r.bool(at + 2, key);
  if (key === 'expandable_segments') conf.expandableSegments = value;
  return at + 2;
}

/** pinned_num_register_threads: a power of two (checked, then dropped). */
function parseRegisterThreads(r: TokenReader, at: number, key: string): number {
  r.consume(at + 1, ':');
  const n = r.integer(at + 2, key);
  if (!isPowerOf2(n)) r.bad('Number of register threads has to be power of 2', 'a power of 2', String(n));
  return at + 2;
}

/** pinned_reserve_segment_size_mb: more than 0 (checked, then dropped). */
function parseReserveSegment(r: TokenReader, at: number, key: string): number {
  r.consume(at + 1, ':');
  if (r.integer(at + 2, key) <= 0) r.bad('Pinned reserve segment size has to be greater than 0', '> 0', '0');
  return at + 2;
}

/** A key PyTorch does not know: the error, with the nearest known key. */
function parseUnknown(r: TokenReader, _at: number, key: string): never {
  const hint = didYouMean(key, KNOWN);
  return r.bad(
    `Unrecognized CachingAllocator option: ${key}${hint !== undefined ? `; did you mean ${JSON.stringify(hint)}?` : ''}`,
    KNOWN.join(' | '),
    JSON.stringify(key),
  );
}

/** Each known key's parser (a Map, so that no key reaches Object.prototype). */
const PARSERS: ReadonlyMap<string, KeyParser> = new Map<string, KeyParser>([
  ['max_split_size_mb', parseMaxSize],
  ['max_non_split_rounding_mb', parseMaxSize],
  ['garbage_collection_threshold', parseThreshold],
  ['roundup_power2_divisions', parseDivisions],
  ['backend', parseBackend],
  ['expandable_segments', parseBoolean],
  ['pinned_num_register_threads', parseRegisterThreads],
  ['pinned_reserve_segment_size_mb', parseReserveSegment],
  ...IGNORED_BOOLEAN.map((key): [string, KeyParser] => [key, parseBoolean]),
]);

/**
 * Reads `PYTORCH_CUDA_ALLOC_CONF` text in PyTorch's syntax (`key:value` pairs separated by
 * commas, spaces ignored; `roundup_power2_divisions` as one number or `[256:1,512:2,>:8]`, the
 * interval keys in MiB). A key PyTorch does not know, a missing `:` or `,`, or a value PyTorch
 * refuses (max_split_size_mb <= 20, a threshold outside (0, 1), divisions not a power of two) is a
 * VramError at the path with PyTorch's own message. Integers must be whole tokens, where torch's
 * `stoi` would read the leading digits of `128MB`.
 *
 * Note PyTorch's list form as the source has it, not as the docs word it: `[256:1,512:2,1024:4,>:8]`
 * sets 1 below 512 MiB (the first entry also fills every interval under it), 2 for 512 MiB – 1 GiB,
 * and `>` overwrites from the last named interval on, so 1 GiB and up get 8.
 *
 * @example
 * ```ts
 * import { parseAllocConf } from 'vram-ts';
 * const conf = parseAllocConf('expandable_segments:True,garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,512:2,>:8]');
 * console.log(conf.expandableSegments, conf.garbageCollectionThreshold, conf.roundupPower2Divisions.join(','));
 * // true 0.6 1,1,1,1,1,1,1,1,1,8,8,8,8,8,8,8
 * ```
 */
export function parseAllocConf(text: string, path: Path = ['parseAllocConf', 'text']): AllocConf {
  if (typeof text !== 'string') fail('bad-argument', 'must be PYTORCH_CUDA_ALLOC_CONF text', { path, expected: 'string', received: show(text) });
  if (text.length > 100_000)
    fail('bad-argument', 'is longer than any allocator setting', { path, expected: 'at most 100000 characters', received: `${text.length} characters` });
  const tokens = lex(text);
  const r = tokenReader(tokens, path);
  const conf: Draft = {
    expandableSegments: false,
    maxSplitSize: Number.POSITIVE_INFINITY,
    maxNonSplitRounding: LARGE_BUFFER,
    garbageCollectionThreshold: 0,
    backend: 'native',
    divisions: new Array<number>(INTERVALS).fill(0),
  };
  for (let i = 0; i < tokens.length; i += 1) {
    const key = tokens[i]!;
    i = (PARSERS.get(key) ?? parseUnknown)(r, i, key, conf);
    if (i + 1 < tokens.length) r.consume(++i, ',');
  }
  return Object.freeze({
    expandableSegments: conf.expandableSegments,
    maxSplitSize: conf.maxSplitSize,
    maxNonSplitRounding: conf.maxNonSplitRounding,
    garbageCollectionThreshold: conf.garbageCollectionThreshold,
    roundupPower2Divisions: Object.freeze(conf.divisions),
    backend: conf.backend,
  });
}

const CONF_KEYS = ['expandableSegments', 'maxSplitSize', 'maxNonSplitRounding', 'garbageCollectionThreshold', 'roundupPower2Divisions', 'backend'];

/** The settings from text or from a (partial) AllocConf object, checked; a VramError at `path` otherwise. */
export function resolveAllocConf(conf: unknown, path: Path): AllocConf {
  if (conf === undefined) return DEFAULT_ALLOC_CONF;
  if (typeof conf === 'string') return parseAllocConf(conf, path);
  if (typeof conf !== 'object' || conf === null || Array.isArray(conf))
    fail('bad-option', 'must be PYTORCH_CUDA_ALLOC_CONF text or an AllocConf', { path, expected: 'string | AllocConf', received: show(conf) });
  const record = conf as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!CONF_KEYS.includes(key)) {
      const hint = didYouMean(key, CONF_KEYS);
      fail('unknown-option', `unknown option${hint !== undefined ? `; did you mean ${JSON.stringify(hint)}?` : ''}`, {
        path: [...path, key],
        expected: CONF_KEYS.join(' | '),
        received: show(record[key]),
      });
    }
  }
  const get = <T>(key: string, ok: (v: unknown) => boolean, expected: string, fallback: T): T => {
    const v = record[key];
    // The default itself is accepted (maxNonSplitRounding's 20 MiB, which the text form cannot set).
    if (v === undefined || v === fallback) return fallback;
    if (!ok(v)) fail('bad-option', `must be ${expected}`, { path: [...path, key], expected, received: show(v) });
    return v as T;
  };
  const bytes = (min: number) => (v: unknown) => v === Number.POSITIVE_INFINITY || (typeof v === 'number' && Number.isSafeInteger(v) && v > min);
  const divisionOk = (v: unknown) => v === 0 || (typeof v === 'number' && isPowerOf2(v));
  const rawDivisions = record.roundupPower2Divisions;
  let divisions = DEFAULT_ALLOC_CONF.roundupPower2Divisions;
  if (rawDivisions !== undefined) {
    if (divisionOk(rawDivisions)) divisions = Object.freeze(new Array<number>(INTERVALS).fill(rawDivisions as number));
    else if (Array.isArray(rawDivisions) && rawDivisions.length === INTERVALS && rawDivisions.every(divisionOk))
      divisions = Object.freeze([...(rawDivisions as number[])]);
    else
      fail('bad-option', 'must be a power of 2 (or 0), or 16 of them, one per power-of-two interval from 1 MiB', {
        path: [...path, 'roundupPower2Divisions'],
        expected: 'power of 2 | 0, or 16 of them',
        received: show(rawDivisions),
      });
  }
  return Object.freeze({
    expandableSegments: get('expandableSegments', (v) => typeof v === 'boolean', 'true or false', false),
    maxSplitSize: get('maxSplitSize', bytes(LARGE_BUFFER), 'a byte count > 20 MiB, or Infinity', Number.POSITIVE_INFINITY),
    maxNonSplitRounding: get('maxNonSplitRounding', bytes(LARGE_BUFFER), 'a byte count > 20 MiB, or Infinity', LARGE_BUFFER),
    garbageCollectionThreshold: get(
      'garbageCollectionThreshold',
      (v) => v === 0 || (typeof v === 'number' && v > 0 && v < 1),
      '0 (off) or a number in (0, 1)',
      0,
    ),
    roundupPower2Divisions: divisions,
    backend: get('backend', (v) => v === 'native' || v === 'cudaMallocAsync', 'native | cudaMallocAsync', 'native' as const),
  });
}

/**
 * CUDAAllocatorConfig::roundup_power2_divisions(size): the divisions of the power-of-two interval
 * holding `size` (index floor(log2 size) − 20, clamped to 0–15).
 */
export function divisionsFor(conf: AllocConf, size: number): number {
  const index = Math.max(0, Math.min(INTERVALS - 1, log2Floor(size) - 20));
  return conf.roundupPower2Divisions[index]!;
}
