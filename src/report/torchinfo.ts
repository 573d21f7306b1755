import type { IR } from '../trace/ir.js';

/** Options of the torchinfo-compatible table. */
export interface TorchinfoOptions {
  readonly depth?: number;
}

/** Placeholder until the torchinfo spec lands. */
export function formatTorchinfo(ir: IR, options: TorchinfoOptions = {}): string {
  void options;
  return String(ir.modules.length);
}
