/** `vram-ts --safetensors FILE`: parameters and dtypes from a checkpoint's header. */
import { HELP } from '../help.js';
import { readSafetensors } from '../safetensors.js';
import type { PlainCommand } from './command.js';

/** A checkpoint's header, read without its weights. */
export const safetensorsCommand: PlainCommand<'safetensors'> = {
  name: 'safetensors',
  summary: "parameters and dtypes from a checkpoint's header",
  named: 'vram-ts --safetensors FILE',
  help: HELP,
  words: 0,
  model: false,
  run: (values) => ({ stdout: readSafetensors(values.safetensors!), code: 0 }),
};
