import { ddpEngine, zeroRedundancyEngine, type DdpKnobs } from './ddp.js';
import { deepspeedEngine, type DeepSpeedKnobs } from './deepspeed/index.js';
import type { CommonPlan, EngineRecord } from './engine.js';
import { fsdp2Engine, type Fsdp2Knobs } from './fsdp2.js';
import { megatronEngine, type MegatronKnobs } from './megatron.js';

/**
 * The data-parallel engines vram-ts models per rank, one record each: the only list of them.
 * Adding an engine is its file and one entry here; schemas, messages, `plan`'s search and the CLI
 * read this list.
 */
export const ENGINES = [ddpEngine, zeroRedundancyEngine, fsdp2Engine, deepspeedEngine, megatronEngine] as const;

/** The distributed engines vram-ts models per rank. */
export type Engine = (typeof ENGINES)[number]['name'];

/**
 * The engines' names, in the registry's order (schemas, help texts, error messages).
 *
 * @example
 * ```ts
 * import { ENGINE_NAMES } from 'vram-ts';
 * console.log(ENGINE_NAMES.join(' ')); // ddp zero-redundancy fsdp2 deepspeed megatron
 * ```
 */
export const ENGINE_NAMES: readonly Engine[] = ENGINES.map((engine) => engine.name);

/**
 * The engine a many-GPU job gets when none is named where a default is wanted (the command's
 * `--gpus N`): FSDP2, PyTorch's own sharding (`estimate` itself needs `engine` with dp > 1).
 *
 * @example
 * ```ts
 * import { DEFAULT_ENGINE, ENGINE_NAMES } from 'vram-ts';
 * console.log(DEFAULT_ENGINE, ENGINE_NAMES.length); // fsdp2 5
 * ```
 */
export const DEFAULT_ENGINE: Engine = fsdp2Engine.name;

/** The plan the registry's engines read: the common fields and every engine's knobs (ParallelPlan, with `engine` any name). */
export type EnginesPlan = CommonPlan & DdpKnobs & Fsdp2Knobs & DeepSpeedKnobs & MegatronKnobs;

const BY_NAME = new Map<string, EngineRecord<Engine, EnginesPlan>>(ENGINES.map((engine) => [engine.name, engine]));

/** The record of an engine named in a plan (the schema has checked the name). */
export function engineNamed(name: Engine): EngineRecord<Engine, EnginesPlan> {
  return BY_NAME.get(name)!;
}

/** The engines `plan` searches when its `engines` option is not given, in the search's order. */
export const PLANNED_ENGINES: readonly Engine[] = ENGINES.filter((engine) => engine.planned?.byDefault === true)
  .sort((a, b) => a.planned!.order - b.planned!.order)
  .map((engine) => engine.name);

export type { EngineEnv, EngineRecord } from './engine.js';
