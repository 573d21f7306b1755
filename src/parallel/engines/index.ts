import { ddpEngine, zeroRedundancyEngine } from './ddp.js';
import { deepspeedEngine } from './deepspeed/index.js';
import type { EngineRecord } from './engine.js';
import { fsdp2Engine } from './fsdp2.js';
import { megatronEngine } from './megatron.js';
import type { ParallelPlan } from '../plan.js';

/**
 * The data-parallel engines vram-ts models per rank, one record each: the only list of them.
 * Adding an engine is its file and one entry here; schemas, messages, `plan`'s search and the CLI
 * read this list.
 */
export const ENGINES = [ddpEngine, zeroRedundancyEngine, fsdp2Engine, deepspeedEngine, megatronEngine] as const;

/** The distributed engines vram-ts models per rank. */
export type Engine = (typeof ENGINES)[number]['name'];

/** The engines' names, in the registry's order (schemas, help texts, error messages). */
export const ENGINE_NAMES: readonly Engine[] = ENGINES.map((engine) => engine.name);

const BY_NAME = new Map<string, EngineRecord<Engine, ParallelPlan>>(ENGINES.map((engine) => [engine.name, engine]));

/** The record of an engine named in a plan (the schema has checked the name). */
export function engineNamed(name: Engine): EngineRecord<Engine, ParallelPlan> {
  return BY_NAME.get(name)!;
}

/** The engines `plan` searches when its `engines` option is not given, in the search's order. */
export const PLANNED_ENGINES: readonly Engine[] = ENGINES.filter((engine) => engine.planned?.byDefault === true)
  .sort((a, b) => a.planned!.order - b.planned!.order)
  .map((engine) => engine.name);

export type { EngineEnv, EngineRecord } from './engine.js';
