/**
 * The `<model>` argument: a catalog name, a config.json, or a Hugging Face Hub repository; and
 * the model built from it with the command's decoder options.
 */
import { existsSync } from 'node:fs';
import {
  LLMS,
  VISION_MODELS,
  VramError,
  decoderMeta,
  fromHFConfig,
  llm,
  mobilenetV3Large,
  mobilenetV3Small,
  vision,
  type HFConfigOptions,
  type HubModel,
  type Layer,
} from '../index.js';
import { nearest } from './args.js';
import { fromVramError, usage } from './errors.js';
import { DEFAULTS, type Values } from './flags.js';
import { readTextFile } from './text-file.js';
import { choice, count } from './values.js';

/** The CNNs built by the command itself (the other torchvision models come from the vision catalog). */
export const CNNS = ['mobilenet_v3_small', 'mobilenet_v3_large'] as const;

/** Every name `<model>` takes, for the error that lists them. */
export const MODEL_NAMES = [...CNNS, ...VISION_MODELS.filter((v) => !(CNNS as readonly string[]).includes(v)), ...LLMS.map((e) => e.id)];

/** What `<model>` names. */
export interface ModelRef {
  readonly name: string;
  readonly kind: 'cnn' | 'llm';
  readonly cnn?: (typeof CNNS)[number];
  /** A torchvision model of the vision catalog. */
  readonly vision?: string;
  readonly file?: string;
  /** A Hugging Face Hub repository id, and what fromHub read of it once loaded. */
  readonly repo?: string;
  readonly hub?: HubModel;
}

/** <org>/<name>, as the Hub spells repository ids. */
const HUB_REPO = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/;

/** The model a name refers to; --revision and --timeout only for a Hub model. */
export function resolveModel(name: string, values: Values): ModelRef {
  const ref = sourceOf(name);
  for (const flag of ['revision', 'timeout'] as const)
    if (ref.repo === undefined && values[flag] !== undefined)
      usage(`--${flag}`, 'applies to a Hugging Face Hub model (<org>/<name>)', { received: JSON.stringify(ref.name) });
  return ref;
}

function sourceOf(name: string): ModelRef {
  const key = name.toLowerCase().replace(/-/g, '_');
  const cnn = CNNS.find((c) => c === key);
  if (cnn !== undefined) return { name, kind: 'cnn', cnn };
  const torchvision = VISION_MODELS.find((v) => v === key);
  if (torchvision !== undefined) return { name, kind: 'cnn', vision: torchvision };
  // <org>/<name> that is not a file here is a Hub repository (a catalog repo too: its config on the Hub).
  if (HUB_REPO.test(name) && !name.endsWith('.json') && !existsSync(name)) return { name, kind: 'llm', repo: name };
  if (LLMS.some((e) => e.id === name.toLowerCase() || e.repo.toLowerCase() === name.toLowerCase())) return { name, kind: 'llm' };
  if (name.endsWith('.json') || name.includes('/')) return { name, kind: 'llm', file: name };
  const near = nearest(name, MODEL_NAMES);
  return usage('model', `unknown model${near !== undefined ? `; did you mean ${near}?` : ''}`, {
    expected: `${MODEL_NAMES.join(', ')} or the path of a config.json`,
    received: JSON.stringify(name),
  });
}

function readConfig(file: string): Record<string, unknown> {
  const text = readTextFile(file, 'a config.json');
  let config: unknown;
  try {
    // Editors on Windows save UTF-8 with a byte-order mark; JSON.parse does not skip it.
    config = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
  } catch (error) {
    return usage(file, 'is not valid JSON', { received: error instanceof Error ? error.message : undefined });
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    usage(file, 'a config.json holds one JSON object', { received: Array.isArray(config) ? 'an array' : config === null ? 'null' : `a ${typeof config}` });
  }
  return config as Record<string, unknown>;
}

/** What a decoder is built with besides the flags: one rank's share of a parallel layout. */
export type DecoderExtra = Pick<HFConfigOptions, 'tensorParallel' | 'contextParallel' | 'attention' | 'expertParallel'>;

/** The model the reference names, built with the command's flags. */
export function buildModel(ref: ModelRef, values: Values, extra: DecoderExtra = {}): Layer {
  if (ref.cnn !== undefined) {
    const numClasses = count(values, 'classes', DEFAULTS.classes);
    return ref.cnn === 'mobilenet_v3_small' ? mobilenetV3Small({ numClasses }) : mobilenetV3Large({ numClasses });
  }
  if (ref.vision !== undefined) return vision(ref.vision, { numClasses: count(values, 'classes', DEFAULTS.classes) });
  const decoder: HFConfigOptions = {
    ...(values.attention !== undefined ? { attention: choice(values, 'attention')! } : {}),
    ...(values.transformers !== undefined ? { transformers: values.transformers } : {}),
    ...(values.dtype !== undefined ? { dtype: choice(values, 'dtype')! } : {}),
    ...(values['no-cache'] ? { useCache: false } : {}),
    ...extra,
  };
  if (ref.hub !== undefined) return hubModel(ref.hub, decoder);
  if (ref.file === undefined) return llm(ref.name, decoder);
  const config = readConfig(ref.file);
  try {
    return fromHFConfig(config, decoder);
  } catch (error) {
    // The config's own problems are named by their keys, as in the file.
    if (error instanceof VramError) throw fromVramError(error);
    throw error;
  }
}

/** The model from a Hub config with the command's decoder options; its problems named by the config's keys. */
function hubModel(hub: HubModel, decoder: HFConfigOptions): Layer {
  try {
    return hub.build(decoder);
  } catch (error) {
    if (error instanceof VramError) throw fromVramError(error, `${hub.repo}: config.json`);
    throw error;
  }
}

/** Gradient checkpointing as transformers applies it: every decoder layer is one region. */
export function decoderLayers(model: Layer): { modules: string[] } {
  const meta = decoderMeta(model);
  return { modules: Array.from({ length: meta.layers }, (_, i) => (meta.family === 'gpt2' ? `transformer.h.${i}` : `model.layers.${i}`)) };
}

/** --checkpointing of a CNN: every block of its `features` (MobileNet, EfficientNet), or of ResNet's stages. */
export function cnnCheckpoint(ref: ModelRef, model: Layer): { readonly within: string; readonly every: number } | { readonly modules: readonly string[] } {
  const children =
    model.kind === 'seq'
      ? model.children.map((child, i) => child.name ?? String(i))
      : model.kind === 'module' && model.body.kind === 'seq'
        ? model.body.children.map((child, i) => child.name ?? String(i))
        : [];
  if (ref.cnn !== undefined || children.includes('features')) return { within: 'features', every: 1 };
  const stages = children.filter((name) => /^layer\d+$/.test(name));
  if (stages.length > 0) return { modules: stages };
  return usage('--checkpointing', `no block structure known for ${ref.name}: checkpoint it through the API (estimate's checkpoint option)`);
}
