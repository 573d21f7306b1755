import { addScalarRule, mulScalarRule, powRule } from '../ops/pointwise.js';
import { activationRule } from '../ops/activation.js';
import { addRule, mulRule } from '../ops/merge.js';
import { dropout } from './dropout.js';
import { gelu } from './gelu.js';
import { graph } from './graph.js';
import { linear } from './linear.js';
import { module } from './module.js';
import { silu } from './silu.js';
import type { Layer, LayerOptions, ModuleLayer } from './types.js';

/** Options of {@link mlp}. */
export interface MlpOptions extends LayerOptions {
  readonly hidden: number;
  readonly inner: number;
  /**
   * `gelu_new`: GPT-2's NewGELUActivation, the tanh formula written in Python ops (it keeps
   * four [.., inner] tensors); `gelu`: torch's fused GELU (keeps one).
   */
  readonly activation?: 'gelu_new' | 'gelu';
  /** Dropout after the output projection (GPT-2's resid_pdrop). */
  readonly dropout?: number;
  /** Hugging Face Conv1D projections (weights [in, out]) named c_fc / c_proj, as in GPT-2. */
  readonly conv1d?: boolean;
  readonly className?: string;
}

/** NewGELUActivation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), op by op. */
function newGelu(): ModuleLayer {
  const tanh = activationRule('tanh');
  return module(
    'act',
    'NewGELUActivation',
    graph((g, [x]) => {
      const half = g.call(mulScalarRule, [x!], {})[0]!;
      const cube = g.call(powRule, [x!], { exponent: 3 })[0]!;
      const scaled = g.call(mulScalarRule, [cube], {})[0]!;
      const inner = g.call(addRule, [x!, scaled], {})[0]!;
      const arg = g.call(mulScalarRule, [inner], {})[0]!;
      const t = g.call(tanh, [arg], {})[0]!;
      const onePlus = g.call(addScalarRule, [t], {})[0]!;
      return g.call(mulRule, [half, onePlus], {})[0]!;
    }),
  ) as ModuleLayer;
}

/**
 * The transformer MLP: up-projection, GELU, down-projection (GPT-2's `mlp`).
 *
 * @example
 * ```ts
 * import { estimate, mlp } from 'vram-ts';
 * const block = mlp({ hidden: 64, inner: 256, activation: 'gelu_new', conv1d: true });
 * console.log(estimate(block, { input: [1, 16, 64], loss: 'none' }).params.total); // 33088
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function mlp(options: MlpOptions): ModuleLayer {
  const proj = (name: string, out: number): Layer =>
    options.conv1d ? module(name, 'Conv1D', linear({ out, transposedWeight: true })) : linear({ out, name });
  const act = options.activation === 'gelu' ? gelu({ name: 'act' }) : newGelu();
  const body = graph((g, [x]) => {
    const up = g.apply(proj(options.conv1d ? 'c_fc' : 'fc1', options.inner), x!);
    const activated = g.apply(act, up);
    const down = g.apply(proj(options.conv1d ? 'c_proj' : 'fc2', options.hidden), activated);
    return g.apply(dropout({ p: options.dropout ?? 0, name: 'dropout' }), down);
  });
  return Object.freeze({ kind: 'module', className: options.className ?? 'GPT2MLP', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}

/** Options of {@link gatedMlp}. */
export interface GatedMlpOptions extends LayerOptions {
  readonly hidden: number;
  readonly intermediate: number;
  readonly bias?: boolean;
  readonly className?: string;
}

/**
 * SwiGLU: `down(silu(gate(x)) * up(x))` (Llama, Qwen2, Mistral). Keeps the gate output, the
 * SiLU output and the up output, then their product.
 *
 * @example
 * ```ts
 * import { estimate, gatedMlp } from 'vram-ts';
 * console.log(estimate(gatedMlp({ hidden: 64, intermediate: 172 }), { input: [1, 16, 64], loss: 'none' }).params.total); // 33024
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function gatedMlp(options: GatedMlpOptions): ModuleLayer {
  const bias = options.bias ?? false;
  const body = graph((g, [x]) => {
    const gate = g.apply(linear({ out: options.intermediate, bias, name: 'gate_proj' }), x!);
    const act = g.apply(silu({ name: 'act_fn' }), gate);
    const up = g.apply(linear({ out: options.intermediate, bias, name: 'up_proj' }), x!);
    const product = g.call(mulRule, [act, up], {})[0]!;
    return g.apply(linear({ out: options.hidden, bias, name: 'down_proj' }), product);
  });
  return Object.freeze({ kind: 'module', className: options.className ?? 'LlamaMLP', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}
