/**
 * `vram-ts vllm <model> --config config.yaml`: vLLM's own config file, read as `vllm serve --config`
 * reads it (vllm/utils/argparse_utils.py FlexibleArgumentParser.load_config_file and
 * _pull_args_from_config): a YAML mapping whose keys are the long flag names, dashes or
 * underscores (`max_model_len` is `--max-model-len`); `true` adds the flag, `false` leaves a
 * store_true flag at its default, a list is the flag's values, a mapping its JSON. The file's
 * values sit under the command line (command line > config file > defaults), and the positional
 * <model> wins over the file's `model` (vLLM's docs/configuration/serve_args.md). Keys the vllm
 * command models become its flags; vLLM arguments that move no GPU memory are accepted; those
 * that do and are not modelled are accepted only at vLLM's default; anything else is unknown.
 */
import { oneOf, wholeNumber } from './args.js';
import { readConfigFile } from './config-file.js';
import { CliError, usage } from './errors.js';
import { specOf, type Values } from './flags.js';
import { nearest } from './args.js';

/** vLLM's arguments the vllm command models, and the flag each one is. */
export const MODELLED: Readonly<Record<string, string>> = {
  'gpu-memory-utilization': 'gpu-memory-utilization',
  'max-model-len': 'max-model-len',
  'max-num-seqs': 'max-num-seqs',
  'max-num-batched-tokens': 'max-num-batched-tokens',
  'tensor-parallel-size': 'tensor-parallel-size',
  'block-size': 'block-size',
  'kv-cache-dtype': 'kv-cache-dtype',
  'kv-cache-memory-bytes': 'kv-cache-memory',
  'enforce-eager': 'enforce-eager',
  'cpu-offload-gb': 'cpu-offload-gb',
  dtype: 'dtype',
};

/** vLLM's --dtype values → the model dtype vram-ts builds (`auto`: the checkpoint's, as with no --dtype). */
const DTYPES: Readonly<Record<string, string | undefined>> = {
  auto: undefined,
  half: 'float16',
  float16: 'float16',
  bfloat16: 'bfloat16',
  float: 'float32',
  float32: 'float32',
};

/** vLLM arguments that move no GPU memory at start-up: the server, logging, parsing, scheduling order, the host's files. */
const NEUTRAL = new Set([
  'model',
  'host',
  'port',
  'uds',
  'uvicorn-log-level',
  'disable-uvicorn-access-log',
  'allow-credentials',
  'allowed-origins',
  'allowed-methods',
  'allowed-headers',
  'api-key',
  'ssl-keyfile',
  'ssl-certfile',
  'ssl-ca-certs',
  'ssl-cert-reqs',
  'enable-ssl-refresh',
  'root-path',
  'middleware',
  'served-model-name',
  'chat-template',
  'chat-template-content-format',
  'trust-request-chat-template',
  'response-role',
  'enable-auto-tool-choice',
  'exclude-tools-when-tool-choice-none',
  'tool-call-parser',
  'tool-parser-plugin',
  'tool-server',
  'reasoning-parser',
  'reasoning-parser-plugin',
  'return-tokens-as-token-ids',
  'enable-prompt-tokens-details',
  'enable-force-include-usage',
  'enable-server-load-tracking',
  'enable-request-id-headers',
  'enable-log-outputs',
  'enable-log-requests',
  'disable-log-requests',
  'disable-log-stats',
  'disable-fastapi-docs',
  'max-log-len',
  'log-error-stack',
  'log-config-file',
  'lora-modules',
  'headless',
  'api-server-count',
  'tokenizer',
  'tokenizer-mode',
  'tokenizer-revision',
  'skip-tokenizer-init',
  'trust-remote-code',
  'download-dir',
  'config-format',
  'hf-token',
  'code-revision',
  'seed',
  'generation-config',
  'override-generation-config',
  'max-logprobs',
  'logprobs-mode',
  'guided-decoding-backend',
  'structured-outputs-config',
  'enable-prefix-caching',
  'prefix-caching-hash-algo',
  'swap-space',
  'distributed-executor-backend',
  'max-parallel-loading-workers',
  'worker-extension-cls',
  'disable-custom-all-reduce',
  'enable-sleep-mode',
  'async-scheduling',
  'scheduling-policy',
  // Tokens per streamed chunk: the server's output, on the host.
  'stream-interval',
  'max-num-partial-prefills',
  'max-long-partial-prefills',
  'long-prefill-token-threshold',
  'otlp-traces-endpoint',
  'collect-detailed-traces',
  'show-hidden-metrics-for-version',
  'kv-events-config',
  'calculate-kv-scales',
  'max-lora-rank',
  'max-loras',
  'max-cpu-loras',
  'lora-dtype',
  'fully-sharded-loras',
]);

const GRAPHS = 'the CUDA graphs captured are not modelled (--cuda-graph-memory measures them)';

/** vLLM arguments that move GPU memory in ways the vllm command does not model: accepted at vLLM's default only. */
const NOT_MODELLED: Readonly<Record<string, { readonly defaults: readonly unknown[]; readonly why: string }>> = {
  'pipeline-parallel-size': { defaults: [1], why: 'pipeline stages are not modelled (one rank of tensor parallelism is)' },
  'data-parallel-size': { defaults: [1], why: 'data-parallel engines are not modelled' },
  'enable-expert-parallel': { defaults: [false], why: 'expert parallelism is not modelled' },
  quantization: { defaults: [null], why: 'quantized weights are not modelled' },
  'load-format': { defaults: ['auto', 'safetensors', 'pt', 'npcache', 'dummy', 'fastsafetensors'], why: 'this load format changes the weights' },
  'model-impl': { defaults: ['auto', 'vllm'], why: "only vLLM's own model implementations are modelled" },
  runner: { defaults: ['auto', 'generate'], why: 'only the generate runner is modelled' },
  convert: { defaults: ['auto', 'none'], why: 'pooling conversions are not modelled' },
  'enable-lora': { defaults: [false], why: "LoRA adapters' buffers are not modelled" },
  'speculative-config': { defaults: [null], why: 'speculative decoding (a draft model) is not modelled' },
  'num-gpu-blocks-override': { defaults: [null], why: 'the KV pool is sized by --gpu-memory-utilization or --kv-cache-memory-bytes' },
  'hf-overrides': { defaults: [null], why: "overrides of the model's config are not modelled: give the config.json as <model>" },
  'rope-scaling': { defaults: [null], why: "overrides of the model's config are not modelled" },
  'rope-theta': { defaults: [null], why: "overrides of the model's config are not modelled" },
  'disable-sliding-window': { defaults: [false], why: 'a disabled sliding window is not modelled' },
  'enable-chunked-prefill': { defaults: [null, true], why: 'without chunked prefill the batch defaults differ: not modelled' },
  'compilation-config': { defaults: [null], why: "torch.compile's and the CUDA graphs' settings are not modelled" },
  'cuda-graph-sizes': { defaults: [null], why: GRAPHS },
  'max-cudagraph-capture-size': { defaults: [null], why: GRAPHS },
  'max-seq-len-to-capture': { defaults: [null, 8192], why: GRAPHS },
  'optimization-level': { defaults: [null], why: "torch.compile's level is not modelled" },
  'limit-mm-per-prompt': { defaults: [null], why: "multimodal inputs' profiling is not modelled" },
  'mm-processor-kwargs': { defaults: [null], why: "multimodal inputs' profiling is not modelled" },
  'kv-transfer-config': { defaults: [null], why: 'KV transfer (disaggregated prefill) is not modelled' },
  'kv-offloading-size': { defaults: [null], why: 'KV offloading is not modelled' },
  'kv-cache-memory': { defaults: [null], why: 'is no vLLM argument: vLLM names it --kv-cache-memory-bytes' },
};

/** The boolean arguments whose --no-X form vLLM also takes. */
const BOOLEANS = new Set([
  'enforce-eager',
  'enable-prefix-caching',
  'enable-chunked-prefill',
  'async-scheduling',
  'enable-sleep-mode',
  'disable-custom-all-reduce',
  'trust-remote-code',
  'enable-lora',
  'enable-expert-parallel',
  'disable-sliding-window',
  'enable-auto-tool-choice',
  'disable-log-stats',
  'enable-log-requests',
]);

/** Every name the reader knows, for did-you-mean. */
const KNOWN = [...Object.keys(MODELLED), ...NEUTRAL, ...Object.keys(NOT_MODELLED).filter((k) => k !== 'kv-cache-memory'), 'revision'];

/** The file's values as the flags they are, where each came from, and the file's model and revision. */
export interface VllmConfig {
  readonly file: string;
  /** Flag → its value as the command line would give it. */
  readonly values: Readonly<Record<string, string | boolean>>;
  /** Flag → `file: key`. */
  readonly origins: ReadonlyMap<string, string>;
  readonly revision?: string;
  /**
   * Every key in the file's order: the flag it sets with its text (none where it leaves vLLM's
   * default), or, for a key that moves no memory, `unmodelled` where only vLLM's default is accepted.
   */
  readonly keys: readonly VllmKey[];
}

/** One key of the file as read: its name (dashes, `no-X` made `X`) and value. */
export interface VllmKey {
  readonly key: string;
  readonly name: string;
  readonly value: unknown;
  readonly flag?: string;
  readonly text?: string | boolean;
  readonly unmodelled?: string;
}

/** vLLM's human_readable_int: 1k = 1000, 1K = 1024 (decimals only with k, m, g, t), or a plain integer. */
function humanInt(value: unknown, where: string): string {
  if (typeof value === 'number') return String(value);
  const text = String(value).trim();
  const m = /^(\d+(?:\.\d+)?)([kKmMgGtT])$/.exec(text);
  if (m === null) return text;
  const [, number, suffix] = m as unknown as [string, string, string];
  const decimal = { k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[suffix];
  if (decimal !== undefined) return String(Math.trunc(Number(number) * decimal));
  if (!/^\d+$/.test(number)) usage(where, `decimals are not allowed with binary suffixes like ${suffix}`, { received: JSON.stringify(text) });
  return String(BigInt(number) * 1024n ** BigInt('KMGT'.indexOf(suffix) + 1));
}

/** A flag's value read as the flag's own reader reads it: a problem is named `file: key`. */
function checked(flag: string, text: string, where: string): void {
  try {
    const spec = specOf(flag);
    if (spec.read !== undefined) spec.read(text);
    else if (Array.isArray(spec.values)) oneOf(text, `--${flag}`, spec.values);
    else if (spec.max !== undefined) wholeNumber(text, `--${flag}`, 1, spec.max);
  } catch (error) {
    if (error instanceof CliError) throw new CliError(where, error.message, { expected: error.expected, received: error.received });
    throw error;
  }
}

/** One modelled key's value as its flag's text; undefined where it leaves vLLM's default (`auto`, -1, false). */
function flagValue(flag: string, value: unknown, where: string): string | boolean | undefined {
  if (flag === 'enforce-eager') {
    if (typeof value !== 'boolean') usage(where, 'is a flag: true or false', { received: JSON.stringify(value) });
    return value ? true : undefined;
  }
  if (value === null || typeof value === 'object') usage(where, 'takes one value', { received: JSON.stringify(value) });
  if (flag === 'dtype') {
    const text = String(value);
    if (!Object.hasOwn(DTYPES, text))
      usage(where, "is one of vLLM's --dtype choices", { expected: Object.keys(DTYPES).join(', '), received: JSON.stringify(value) });
    return DTYPES[text];
  }
  if (flag === 'max-model-len' && (value === -1 || String(value).toLowerCase() === 'auto')) return undefined;
  const text = ['max-model-len', 'max-num-batched-tokens', 'kv-cache-memory'].includes(flag) ? humanInt(value, where) : String(value);
  checked(flag, text, where);
  return text;
}

/** The mapping of a vLLM config file read as `vllm serve --config` reads it (see the file's comment). */
export function readVllmConfig(file: string): VllmConfig {
  if (!/\.ya?ml$/i.test(file)) usage(file, "vLLM's config file is YAML (.yaml or .yml)");
  const mapping = readConfigFile(file);
  const values: Record<string, string | boolean> = {};
  const origins = new Map<string, string>();
  const keys: VllmKey[] = [];
  let revision: string | undefined;
  for (const [key, raw] of Object.entries(mapping)) {
    const where = `${file}: ${key}`;
    // FlexibleArgumentParser: underscores become dashes up to the first '.'.
    let name = key.replace(/^[^.]*/, (head) => head.replace(/_/g, '-'));
    let value = raw;
    // --no-X (argparse's BooleanOptionalAction): `no-X: true` is `X: false`.
    if (name.startsWith('no-') && !name.includes('.') && typeof raw === 'boolean' && BOOLEANS.has(name.slice(3))) {
      name = name.slice(3);
      value = !raw;
    }
    const head = name.split('.')[0]!;
    const flag = MODELLED[head];
    const read: { -readonly [K in keyof VllmKey]: VllmKey[K] } = { key, name, value };
    keys.push(read);
    if (flag !== undefined && head === name) {
      // The same argument twice (max-model-len and max_model_len): argparse keeps the last.
      const text = flagValue(flag, value, where);
      read.flag = flag;
      if (text !== undefined) {
        read.text = text;
        values[flag] = text;
        origins.set(flag, where);
      } else {
        delete values[flag];
        origins.delete(flag);
      }
    } else if (head === 'revision') {
      revision = value === null ? undefined : String(value);
    } else if (NEUTRAL.has(head)) continue;
    else if (Object.hasOwn(NOT_MODELLED, head)) {
      const rule = NOT_MODELLED[head]!;
      read.unmodelled = rule.why;
      if (head === name && rule.defaults.includes(value)) continue;
      usage(where, rule.why, { expected: rule.defaults.map((d) => JSON.stringify(d)).join(' | '), received: JSON.stringify(value) });
    } else {
      const hint = nearest(head, KNOWN);
      usage(where, `not a vLLM engine or server argument vram-ts knows${hint !== undefined ? `; did you mean ${hint}?` : ''}`, {
        received: JSON.stringify(value),
      });
    }
  }
  return { file, values, origins, keys, ...(revision !== undefined ? { revision } : {}) };
}

/** The command's flags with the file's under them (the command line wins, as in vLLM). */
export function withVllmConfig(values: Values, config: VllmConfig | undefined): Values {
  if (config === undefined) return values;
  return { ...config.values, ...Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) } as Values;
}

/** The name an engine flag's problem is given: `file: key` where the file set it and no flag overrode it. */
export function flagOrigin(flag: string, values: Values, config: VllmConfig | undefined): string {
  const bare = flag.replace(/^--/, '');
  const origin = config?.origins.get(bare);
  return origin !== undefined && values[bare] === undefined ? origin : flag;
}
