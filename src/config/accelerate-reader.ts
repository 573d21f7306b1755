/* The accelerate config reader's state and the value rules accelerate's launcher applies (fromAccelerateConfig in accelerate.ts). */
import type { VramIssue } from '../errors.js';
import type { Layer } from '../nn/types.js';
import { type Check, didYouMean, integer, object, show, type Path } from '../validate.js';
import { FALSE_WORDS, TRUE_WORDS } from './accelerate-keys.js';
import { isDict, issueOf, type Dict } from './deepspeed-reader.js';

/** What an accelerate config alone does not say: what the training script and its model decide. */
export interface AccelerateContext {
  /**
   * The DeepSpeed config file that `deepspeed_config.deepspeed_config_file` names, read and parsed
   * (JSON): vram-ts reads no files. Without it a config naming a file is a VramError
   * `missing-context` whose `received` is the file's path.
   */
  readonly deepspeedConfig?: unknown;
  /** The model's `hidden_size`: fills a DeepSpeed config's bucket `"auto"` values as `Accelerator.prepare` does. */
  readonly hiddenSize?: number;
  /** The data loader's batch size per process: fills DeepSpeed's `train_micro_batch_size_per_gpu: "auto"`. */
  readonly batchSize?: number;
  /** `Accelerator(gradient_accumulation_steps=…)` (default 1), for a loop under `accelerator.accumulate()`. */
  readonly gradientAccumulationSteps?: number;
  /**
   * The model the script trains (a catalog decoder: llm, fromHFConfig): under `distributed_type:
   * FSDP` accelerate makes its FSDP2 units of the model's own modules (decoder layers, input
   * embedding, final norm, lm_head), so an FSDP config needs it.
   */
  readonly model?: Layer;
}

/** A key read and accepted that moves no memory, or that the reading takes approximately: with why. */
export interface AccelerateNote {
  readonly path: readonly (string | number)[];
  readonly why: string;
}

/** A context's model: a Layer (its own checks run where it is used). */
export const layerCheck: Check = (value, path, issues) => {
  if (typeof value !== 'object' || value === null || typeof (value as { kind?: unknown }).kind !== 'string')
    issues.push({ path, code: 'bad-option', message: 'must be a model (a Layer: llm, fromHFConfig)', expected: 'Layer', received: show(value) });
};

/** The context's schema, built when read (a module-level schema would stay in every bundle). */
export const contextCheck = (): Check =>
  object({
    fields: {
      deepspeedConfig: (value, path, issues) => {
        if (!isDict(value))
          issues.push({ path, code: 'bad-option', message: 'must be the parsed DeepSpeed config (an object)', expected: 'object', received: show(value) });
      },
      hiddenSize: integer(1),
      batchSize: integer(1),
      gradientAccumulationSteps: integer(1),
      model: layerCheck,
    },
  });

/** The reader's state: every issue found (reported at once), the keys ignored and the approximations. */
export class AccelerateReader {
  readonly issues: VramIssue[] = [];
  readonly ignored: AccelerateNote[] = [];
  readonly approximations: AccelerateNote[] = [];
  constructor(readonly context: AccelerateContext) {}

  /** Records an issue; returns undefined. */
  issue(code: string, path: Path, message: string, expected?: string, received?: unknown): undefined {
    this.issues.push(issueOf(code, path, message, expected, received));
  }

  ignore(path: Path, why: string): void {
    this.ignored.push({ path, why });
  }

  approximate(path: Path, why: string): void {
    this.approximations.push({ path, why });
  }

  /** A mapping (or absent / null / `{}`: accelerate's `None` becomes `{}`, ca:219-231). */
  dict(value: unknown, path: Path): Dict {
    if (value === undefined || value === null) return {};
    if (isDict(value)) return value;
    this.issue('bad-option', path, 'must be a mapping', 'a mapping', value);
    return {};
  }

  /**
   * The keys of a mapping: each read by the caller (`handled`), neutral (listed in `ignored` with
   * why), or unknown (an `unknown-option` with the nearest name). `rename` gives the name accelerate
   * reads a key as (a missing `fsdp_` prefix added, cl:1270-1275).
   */
  keys(section: Dict, path: Path, handled: readonly string[], neutral: Readonly<Record<string, string>>, rename: (key: string) => string = (k) => k): void {
    const known = [...handled, ...Object.keys(neutral)];
    for (const key of Object.keys(section)) {
      const name = rename(key);
      if (handled.includes(name)) continue;
      if (Object.hasOwn(neutral, name)) this.ignore([...path, key], neutral[name]!);
      else {
        const near = didYouMean(name, known);
        this.issue(
          'unknown-option',
          [...path, key],
          `accelerate has no such key here${near !== undefined ? `; did you mean ${JSON.stringify(near)}?` : ''}`,
          known.join(' | '),
          section[key],
        );
      }
    }
  }

  /** A flag as the launcher passes it through an environment variable to `str_to_bool` (`str(value).lower()`, ul:304-331). */
  flag(value: unknown, path: Path): boolean | undefined {
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'boolean') return value;
    const word = String(value).toLowerCase();
    if (TRUE_WORDS.includes(word)) return true;
    if (FALSE_WORDS.includes(word)) return false;
    return this.issue('bad-option', path, 'str_to_bool refuses it (accelerate/utils/environment.py:59-71)', 'true | false', value);
  }

  /** An integer ≥ min, or its decimal string (accelerate reads the environment with `int(...)`). */
  int(value: unknown, path: Path, min: number): number | undefined {
    const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
    if (typeof n === 'number' && Number.isSafeInteger(n) && n >= min) return n;
    return this.issue('bad-option', path, `must be an integer ≥ ${min}`, `integer ≥ ${min}`, value);
  }
}

/** Python's truthiness of a YAML value (the launcher's `if args.x` on what the config put there). */
export const truthy = (value: unknown): boolean =>
  !(value === undefined || value === null || value === false || value === 0 || value === '' || (Array.isArray(value) && value.length === 0));
