import type { OpLayer } from '../nn/types.js';
import type { QuantScheme } from '../ops/quant.js';
import { current, type State } from './state.js';

// Quantized Linear layers: which Linear/Conv1D a quantization plan stores quantized, and the
// module class it becomes.

/** The scheme a Linear/Conv1D with this module key is stored in, or undefined when it stays in the model's dtype. */
export function quantFor(state: State, key: string): QuantScheme | undefined {
  const plan = state.options.quantize;
  if (plan === undefined) return undefined;
  const within = plan.within ?? [''];
  if (!within.some((prefix) => prefix === '' || key === prefix || key.startsWith(`${prefix}.`))) return undefined;
  const skip = plan.skip ?? ['lm_head'];
  if (skip.some((entry) => key === entry || `${key}.`.includes(`${entry}.`))) return undefined;
  return plan.scheme;
}

/** The module key a child named `name` of the current module gets. */
export function childKey(state: State, name: string): string {
  const parent = state.stack.length === 0 ? '' : current(state).key;
  return parent === '' ? name : `${parent}.${name}`;
}

/** Whether an op layer is an `nn.Linear` or GPT-2's `Conv1D`. */
export function isLinear(layer: OpLayer<unknown>): boolean {
  return layer.rule.name === 'linear' && (layer.className === 'Linear' || layer.className === 'Conv1D');
}

/** The class a quantized layer becomes (bitsandbytes, GPTQ, AWQ, FP8 modules). */
export const QUANT_CLASS: Readonly<Record<QuantScheme['method'], string>> = {
  'bnb-4bit': 'Linear4bit',
  'bnb-8bit': 'Linear8bitLt',
  gptq: 'QuantLinear',
  awq: 'WQLinear_GEMM',
  fp8: 'FP8Linear',
  'fbgemm-fp8': 'FbgemmFp8Linear',
};
