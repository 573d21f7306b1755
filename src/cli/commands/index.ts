/** Every command of `vram-ts`, by name: one file each in this folder. */
import type { Command } from '../flags.js';
import type { CommandSpec } from './command.js';
import { compatCommand } from './compat.js';
import { estimateCommand } from './estimate.js';
import { explainConfigCommand } from './explain-config.js';
import { fitCommand } from './fit.js';
import { grpoCommand } from './grpo.js';
import { korthikantiCommand } from './korthikanti.js';
import { planCommand } from './plan.js';
import { rlCommand } from './rl.js';
import { safetensorsCommand } from './safetensors.js';
import { sftCommand } from './sft.js';
import { vllmCommand } from './vllm.js';

export type { CommandSpec, ModelCommand, Outcome, PlainCommand } from './command.js';

/** The command records; a new command is one file and one line here (and its name in flags.ts's Command). */
export const COMMAND_SPECS: { readonly [C in Command]: CommandSpec<C> } = {
  estimate: estimateCommand,
  fit: fitCommand,
  plan: planCommand,
  compat: compatCommand,
  grpo: grpoCommand,
  sft: sftCommand,
  vllm: vllmCommand,
  rl: rlCommand,
  korthikanti: korthikantiCommand,
  'explain-config': explainConfigCommand,
  safetensors: safetensorsCommand,
};

/** The subcommands named by their first word (an estimate and --safetensors have none). */
export const SUBCOMMANDS = (Object.keys(COMMAND_SPECS) as Command[]).filter((c) => COMMAND_SPECS[c].words > 0);
