import { linearOp } from '../ops/linear.js';
import { allGatherOp, allReduceOp, reduceScatterOp, tpCopyOp } from '../ops/collective.js';
import { mulOp } from '../ops/merge.js';
import { sliceOp } from '../ops/view.js';
import { fail } from '../errors.js';
import { boolean, integer, string } from '../validate.js';
import { dropout } from './dropout.js';
import { graph } from './graph.js';
import { hfActivation } from './hfActivation.js';
import { activationName, blockTensorParallel, checkInput, fieldsOf, probability } from './block-schema.js';
import { linear } from './linear.js';
import { checkOptions, opLayer, type Fields } from './op.js';
import type { Layer, LayerOptions, ModuleLayer } from './types.js';

/** Linear's inputs: any rank from 1 (the features last). */
const ANY_RANK = [1, Number.MAX_SAFE_INTEGER] as const;

const MLP_FIELDS: Fields = {
  ...fieldsOf(['hidden', 'inner'], integer(1)),
  activation: activationName,
  dropout: probability,
  conv1d: boolean,
  className: string,
};

const GATED_MLP_FIELDS: Fields = {
  ...fieldsOf(['hidden', 'intermediate'], integer(1)),
  bias: boolean,
  activation: activationName,
  className: string,
  tensorParallel: blockTensorParallel,
  fused: boolean,
};

/** Options of {@link mlp}. */
export interface MlpOptions extends LayerOptions {
  readonly hidden: number;
  readonly inner: number;
  /**
   * A Hugging Face `ACT2FN` name (see {@link hfActivation}): `gelu_new` (default, GPT-2's
   * NewGELUActivation written in Python ops, four [.., inner] tensors kept), `gelu` (torch's
   * fused GELU, one kept), `relu`, `gelu_pytorch_tanh`, …
   */
  readonly activation?: string;
  /** Dropout after the output projection (GPT-2's resid_pdrop). */
  readonly dropout?: number;
  /** Hugging Face Conv1D projections (weights [in, out]) named c_fc / c_proj, as in GPT-2. */
  readonly conv1d?: boolean;
  readonly className?: string;
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
  checkOptions(options, MLP_FIELDS, 'mlp', ['hidden', 'inner']);
  const proj = (name: string, out: number): Layer =>
    options.conv1d ? opLayer(linearOp, 'Conv1D', { out, transposedWeight: true }, { name }) : linear({ out, name });
  const act = hfActivation(options.activation ?? 'gelu_new', 'act', [options.name ?? 'mlp', 'activation']);
  // Layers made once, not at every trace.
  const upProj = proj(options.conv1d ? 'c_fc' : 'fc1', options.inner);
  const downProj = proj(options.conv1d ? 'c_proj' : 'fc2', options.hidden);
  const drop = dropout({ p: options.dropout ?? 0, name: 'dropout' });
  const body = graph((g, [x]) => {
    checkInput(g, x!, ANY_RANK, ['mlp', 'hidden', options.hidden]);
    const up = g.apply(upProj, x!);
    const activated = g.apply(act, up);
    const down = g.apply(downProj, activated);
    return g.apply(drop, down);
  });
  return Object.freeze({ kind: 'module', className: options.className ?? 'GPT2MLP', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}

/** Options of {@link gatedMlp}. */
export interface GatedMlpOptions extends LayerOptions {
  readonly hidden: number;
  readonly intermediate: number;
  readonly bias?: boolean;
  /** The gate's activation, a Hugging Face `ACT2FN` name (default `silu`: SwiGLU). */
  readonly activation?: string;
  readonly className?: string;
  /**
   * One rank of tensor parallelism: `intermediate` is then the rank's share. gate/up are
   * ColwiseParallel (each wraps the replicated input: an all-reduce of its gradient in
   * backward), down RowwiseParallel (output all-reduced); with `sequence` the input is
   * all-gathered first and down's output reduce-scattered (see {@link attention}).
   */
  readonly tensorParallel?: { readonly size: number; readonly sequence: boolean };
  /**
   * Phi-3's fused form: one `gate_up_proj` [2·intermediate] whose output is chunked into two
   * views (the gate's activation keeps the whole fused output), `up * activation_fn(gate)`,
   * `down_proj`.
   */
  readonly fused?: boolean;
}

/**
 * The gated MLP `down(act(gate(x)) * up(x))` of Llama, Qwen2 and Mistral (SwiGLU with the default SiLU). Keeps the gate output, the
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
  checkOptions(options, GATED_MLP_FIELDS, 'gatedMlp', ['hidden', 'intermediate']);
  const tp = options.tensorParallel;
  const bias = options.bias ?? false;
  const fused = options.fused === true;
  if (fused && tp !== undefined)
    fail('not-modelled', 'tensor parallelism of a fused gate_up_proj is not modelled', {
      path: ['gatedMlp', 'tensorParallel'],
      expected: 'absent',
      received: JSON.stringify(tp),
    });
  const activation = hfActivation(options.activation ?? 'silu', fused ? 'activation_fn' : 'act_fn', [options.name ?? 'mlp', 'activation']);
  const gateUpProj = linear({ out: 2 * options.intermediate, bias, name: 'gate_up_proj' });
  // Layers made once, not at every trace.
  const gateProj = linear({ out: options.intermediate, bias, name: 'gate_proj' });
  const upProj = linear({ out: options.intermediate, bias, name: 'up_proj' });
  const downProj = linear({ out: options.hidden, bias, name: 'down_proj' });
  const body = graph((g, [input]) => {
    checkInput(g, input!, tp?.sequence === true ? [3, 3] : ANY_RANK, ['gatedMlp', 'hidden', options.hidden]);
    if (fused) {
      const both = g.apply(gateUpProj, input!);
      const gate = g.call(sliceOp, [both], { dim: -1, start: 0, end: options.intermediate })[0]!;
      const up = g.call(sliceOp, [both], { dim: -1, start: options.intermediate, end: 2 * options.intermediate })[0]!;
      return g.apply(downProj, g.call(mulOp, [up, g.apply(activation, gate)], {})[0]!);
    }
    const x = tp?.sequence === true ? g.call(allGatherOp, [input!], { dim: 1, size: tp.size })[0]! : input!;
    const projected = () => (tp !== undefined && !tp.sequence ? g.call(tpCopyOp, [x], {})[0]! : x);
    const gate = g.apply(gateProj, projected());
    const act = g.apply(activation, gate);
    const up = g.apply(upProj, projected());
    const product = g.call(mulOp, [act, up], {})[0]!;
    const down = g.apply(downProj, product);
    if (tp === undefined) return down;
    return tp.sequence ? g.call(reduceScatterOp, [down], { dim: 1, size: tp.size })[0]! : g.call(allReduceOp, [down], {})[0]!;
  });
  return Object.freeze({ kind: 'module', className: options.className ?? 'LlamaMLP', body, ...(options.name !== undefined ? { name: options.name } : {}) });
}
