import type { OpLayer, TensorRef } from '../nn/types.js';
import { opLayer } from '../nn/op.js';
import { castOp } from '../ops/cast.js';
import { dropoutOp } from '../ops/dropout.js';
import { linearOp, type LinearAttrs } from '../ops/linear.js';
import { addOp } from '../ops/merge.js';
import { mulScalarOp } from '../ops/pointwise.js';
import { QUANT_CLASS, childKey, isLinear, quantFor } from './quant.js';
import { runOp, runOpModule } from './run-op.js';
import { closeModule, first, openModule, type State } from './state.js';

// LoRA rewriting: which Linear layers PEFT adapts, and the lora.Linear module that replaces them.

/** PEFT's default LoRA targets where the model family has none of its own. */
export const ATTENTION_PROJECTIONS = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];

/** Whether the LoRA plan adapts this Linear/Conv1D layer (never inside an adapter already). */
export function loraTarget(state: State, layer: OpLayer<unknown>, name: string): boolean {
  const plan = state.options.lora;
  if (plan === undefined || state.adapting || !isLinear(layer)) return false;
  if (plan.targets === 'all-linear') {
    // PEFT matches nn.Linear and Conv1D subclasses: bitsandbytes layers are, GPTQ/AWQ QuantLinear are not.
    const scheme = quantFor(state, childKey(state, name));
    return name !== 'lm_head' && (scheme === undefined || scheme.method === 'bnb-4bit' || scheme.method === 'bnb-8bit');
  }
  return (plan.targets ?? ATTENTION_PROJECTIONS).includes(name);
}

/**
 * PEFT's lora.Linear: `base_layer(x) + lora_B(lora_A(dropout(x))) * scaling`, the input cast
 * to the adapters' dtype first, before the dropout (a copy lora_A keeps when it differs).
 */
export function traceLora(state: State, layer: OpLayer<unknown>, inputs: readonly TensorRef[], name: string): TensorRef[] {
  const plan = state.options.lora!;
  const attrs = layer.attrs as LinearAttrs;
  const module = openModule(state, name, 'Linear', inputs);
  state.adapting = true;
  const scheme = quantFor(state, module.key);
  const baseAttrs: LinearAttrs = scheme !== undefined ? { ...attrs, quant: scheme } : attrs;
  const base = first(
    adapterLayer(
      state,
      opLayer(linearOp, scheme !== undefined ? QUANT_CLASS[scheme.method] : (layer.className ?? 'Linear'), baseAttrs, { name: 'base_layer' }),
      inputs,
    ),
    module.path,
  );
  let x = first(inputs, module.path);
  const adapterDtype = plan.adapterDtype ?? state.options.paramDtype;
  // peft 0.21 lora/layer.py Linear.forward: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`, then
  // dropout; the cast is the local `x` until forward returns (measured under a checkpoint's rerun).
  if (x.dtype !== adapterDtype) {
    x = runOp(state, castOp, { dtype: adapterDtype }, [x])[0]!;
    module.held.push(state.tensors[x.id]!.storage);
  }
  if ((plan.dropout ?? 0) > 0)
    x = first(adapterLayer(state, opLayer(dropoutOp, 'Dropout', { p: plan.dropout! }, { name: 'lora_dropout.default' }), [x]), module.path);
  const previous = state.adapterDtype;
  state.adapterDtype = adapterDtype;
  const a = first(adapterLayer(state, opLayer(linearOp, 'Linear', { out: plan.rank, bias: false }, { name: 'lora_A.default' }), [x]), module.path);
  const b = first(adapterLayer(state, opLayer(linearOp, 'Linear', { out: attrs.out, bias: false }, { name: 'lora_B.default' }), [a]), module.path);
  state.adapterDtype = previous;
  let scaled = runOp(state, mulScalarOp, {}, [b])[0]!;
  if (scaled.dtype !== base.dtype) scaled = runOp(state, castOp, { dtype: base.dtype }, [scaled])[0]!;
  const outputs = runOp(state, addOp, {}, [base, scaled]);
  state.adapting = false;
  closeModule(state, module, outputs);
  return outputs;
}

/** A layer of the adapter, named and with a class, traced as its own module: inside an adapter, no LoRA or quantization swap applies. */
function adapterLayer<A>(state: State, layer: OpLayer<A>, inputs: readonly TensorRef[]): TensorRef[] {
  return runOpModule(state, layer as OpLayer<unknown>, layer.name!, layer.className!, inputs);
}
