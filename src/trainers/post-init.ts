/**
 * What transformers' `TrainingArguments.__post_init__` and `to_dict` write into the fields, undone: a
 * dump (`TrainingArguments(...).to_json_string()`, every field, post-init values included) and the
 * short mapping a user writes mean the same arguments, so the values the tool writes for a default
 * are read back as that default. Sources: transformers 5.18.0 src/transformers/training_args.py
 * (`ta:`) and trainer_pt_utils.py (`tpu:`), the release fields.ts records.
 */
import type { VramIssue } from '../errors.js';
import { show } from '../validate.js';
import { sameValue } from './field-checks.js';

/** `AcceleratorConfig()` as `to_dict` writes it (tpu:1440-1564; `use_configured_state` is popped by `_setup_devices`, ta:1822-1825). */
const ACCELERATOR_CONFIG_DEFAULT = {
  split_batches: false,
  dispatch_batches: null,
  even_batches: true,
  use_seedable_sampler: true,
  non_blocking: false,
  gradient_accumulation_kwargs: null,
} as const;

/** One field's rule: the value the tool writes back for the default, and for other values what they were read from. */
type Undo = (value: unknown) => unknown;

const emptyList = (value: unknown): boolean => Array.isArray(value) && value.length === 0;

/** Each field __post_init__ or to_dict rewrites, with what its written value was before. */
const UNDO: Readonly<Record<string, Undo>> = {
  // ta:1519-1520: None → `logger.getEffectiveLevel() > WARN` (false at the default level).
  disable_tqdm: (v) => (v === false ? null : v),
  // ta:1533-1536: the debug string split into DebugOption values ('' → []); to_dict writes their values.
  debug: (v) => (Array.isArray(v) && v.every((x) => typeof x === 'string') ? v.join(' ') : v),
  // ta:1562-1569: 'none' → []; one integration name → a list of it.
  report_to: (v) => (emptyList(v) ? 'none' : v),
  // ta:1607-1610 and to_dict (ta:2158-2159): None → AcceleratorConfig(), written as its dict.
  accelerator_config: (v) => (sameValue(v, ACCELERATOR_CONFIG_DEFAULT) ? null : v),
  // to_dict (ta:2155-2156) writes every `*_token` field as `<FIELD_TOKEN>`, set or not: the dump never holds a token.
  hub_token: (v) => (v === '<HUB_TOKEN>' ? null : v),
  // ta:2735: a false-y fsdp ('' / [] / false) is FSDP off, as None is.
  fsdp: (v) => (v === false || v === '' || emptyList(v) ? null : v),
};

/**
 * TrainingArguments' fields with the values `__post_init__` and `to_dict` write for a default read
 * back as that default (a new object; the other fields as given). The fields it rewrites: `disable_tqdm`,
 * `debug`, `report_to`, `accelerator_config`, `hub_token`, and `fsdp` when off.
 */
export function undoPostInit(fields: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(fields)) {
    // defineProperty: a `__proto__` key (JSON.parse makes it an own field) stays a field, to be refused as unknown.
    Object.defineProperty(out, name, { value: Object.hasOwn(UNDO, name) ? UNDO[name]!(value) : value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * TrainingArguments' `deepspeed` field (a ds_config path or dict). It is spelled like the engine,
 * but it is the Trainer's field name: written once here (test/parallel/registry.test.ts allows this one).
 */
export const TRAINER_DEEPSPEED_FIELD = 'deepspeed';

/** The fields __post_init__ reads a JSON object string into (ta:760-766, ta:1506-1513). */
const DICT_FIELDS = ['accelerator_config', 'fsdp_config', TRAINER_DEEPSPEED_FIELD, 'gradient_checkpointing_kwargs', 'lr_scheduler_kwargs'] as const;

/** `_convert_str_dict` (ta:161-176): inside a parsed string, 'true'/'false' become booleans and digit strings numbers. */
function convertStrDict(value: Record<string, unknown>, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    let x: unknown = v;
    if (typeof v === 'object' && v !== null && !Array.isArray(v) && depth < 32) x = convertStrDict(v as Record<string, unknown>, depth + 1);
    else if (typeof v === 'string') {
      const lower = v.toLowerCase();
      const noDot = v.replace('.', '');
      if (lower === 'true' || lower === 'false') x = lower === 'true';
      else if (/^[0-9]+$/.test(v)) x = Number.parseInt(v, 10);
      else if (/^[0-9]+$/.test(noDot)) x = Number.parseFloat(v);
    }
    Object.defineProperty(out, key, { value: x, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * The dict fields given as a JSON object string (a command line's `--deepspeed '{…}'`), parsed as
 * __post_init__ parses them (ta:1506-1513); a string that is not valid JSON is an issue at its field.
 * Other strings (paths) stay strings. `fields` is changed in place.
 */
export function parseDictStrings(fields: Record<string, unknown>, issues: VramIssue[]): void {
  for (const name of DICT_FIELDS) {
    const value = fields[name];
    if (typeof value !== 'string' || !value.startsWith('{')) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(value);
    } catch {
      issues.push({
        path: [name],
        code: 'bad-option',
        message: 'a string starting with "{" is read as a JSON object (json.loads), and this one is not JSON',
        received: show(value),
      });
      continue;
    }
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) fields[name] = convertStrDict(parsed as Record<string, unknown>);
    else issues.push({ path: [name], code: 'bad-option', message: 'a JSON string here must hold an object', received: show(value) });
  }
}
