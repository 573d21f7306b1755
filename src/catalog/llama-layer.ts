import { addOp } from '../ops/merge.js';
import { rotaryBuffersOp, rotaryCacheOp, rotaryOp } from '../ops/rotary.js';
import { attention, type AttentionImpl, type AttentionOptions } from '../nn/attention.js';
import { dropout } from '../nn/dropout.js';
import { graph } from '../nn/graph.js';
import { gatedMlp } from '../nn/mlp.js';
import { module } from '../nn/module.js';
import { opLayer } from '../nn/op.js';
import type { Layer, ModuleLayer } from '../nn/types.js';
import type { LlamaShape } from './llama-shape.js';
import type { LocalDecoderSizes } from './tensor-parallel.js';
import type { HFRules, RotaryRule } from './transformers.js';

// One decoder layer of a Llama-family model (llama.ts): its attention, with the rotary module
// a release puts in every layer, the gated MLP, the norms.

/** What a decoder layer is built from: the facts of the decoder's build (llama.ts) it reads. */
export interface LayerBuild {
  readonly shape: LlamaShape;
  readonly rules: HFRules;
  readonly prefix: string;
  readonly rotaryRules: RotaryRule;
  /** The rank's local sizes (tensor parallelism), else the shape's. */
  readonly local: LocalDecoderSizes;
  readonly norm: (size: number, name: string) => Layer;
  readonly impl: AttentionImpl;
  readonly cache: NonNullable<AttentionOptions['cache']>;
  readonly gqaAllowed: boolean;
  readonly rotaryDim: number;
  readonly blockTp: Pick<AttentionOptions, 'tensorParallel'>;
  readonly blockCp: Pick<AttentionOptions, 'contextParallel'>;
}

/** The rotary module a layer's attention owns, or undefined when the model computes cos/sin once (with or without a leftover module). */
function layerRotary(b: LayerBuild): Layer | undefined {
  const { shape, prefix } = b;
  const rotary = b.rotaryRules;
  const positions = shape.maxPositions ?? 2048;
  const className = `${prefix}RotaryEmbedding`;
  if (rotary.placement === 'attention') {
    return module(
      'rotary_emb',
      className,
      graph((g, [v]) => g.call(rotaryOp, [v!], { headDim: shape.headDim, seqDim: 2, ...(rotary.unusedTables ? { cachedPositions: positions } : {}) })),
    );
  }
  if (rotary.placement === 'attention-cached') {
    return module(
      'rotary_emb',
      className,
      graph((g, [v]) => g.call(rotaryCacheOp, [v!], { headDim: shape.headDim, positions })),
    );
  }
  return undefined;
}

/** Layer i's `self_attn`: the shape's own module (DeepSeek's MLA), or {@link attention} with the release's rules. */
function layerSelfAttention(b: LayerBuild, i: number): Layer {
  const { shape, rules, prefix, rotaryRules, local, norm } = b;
  const rotary = layerRotary(b);
  // 4.43 – 4.47: a rotary module in every attention that the model's tables leave unused.
  const buffersOp = opLayer(rotaryBuffersOp, null, { headDim: shape.headDim });
  const leftover = rotaryRules.layerModule
    ? module(
        'rotary_emb',
        `${prefix}RotaryEmbedding`,
        graph((g, [x]) => g.applyAll(buffersOp, x!)),
      )
    : undefined;
  return (
    shape.layerAttention?.(i) ??
    attention({
      name: 'self_attn',
      className: `${prefix}Attention`,
      hidden: shape.hidden,
      heads: local.heads,
      kvHeads: local.kvHeads,
      headDim: shape.headDim,
      qkvBias: shape.qkvBias,
      outBias: shape.outBias,
      impl: b.impl,
      dropout: shape.attentionDropout,
      returnWeights: rules.attentionCode === 'function',
      locals: rules.attentionCode,
      cache: b.cache,
      sdpaGqa: b.gqaAllowed ? 'enable-gqa' : 'repeat',
      sdpaContiguous: rules.sdpaContiguous === 'always',
      ...(rotary !== undefined ? { rotary, rotaryGathered: rotaryRules.placement === 'attention-cached' } : {}),
      ...(leftover !== undefined ? { unusedModule: leftover } : {}),
      ...(shape.qkNorm !== undefined ? { qkNorm: { q: norm(shape.headDim, 'q_norm'), k: norm(shape.headDim, 'k_norm'), at: shape.qkNorm } } : {}),
      ...(shape.attnSoftcap !== undefined ? { softcap: shape.attnSoftcap } : {}),
      ...(shape.fused === true ? { fusedQkv: true } : {}),
      // Measured: the variations (transformers 5.18), Llama (4.40.2, tools/oracle/cp_cpu.py's cp1), PyTorch 2 CPU.
      sdpaOutputTransposed: true,
      ...(shape.rotaryDim !== undefined || shape.fused === true ? { rotaryDim: b.rotaryDim } : {}),
      ...b.blockTp,
      ...b.blockCp,
    })
  );
}

/** Decoder layer i: pre-norm attention and gated MLP, each added back (Gemma 2/3: sandwiched in norms; Phi-3: dropout first). */
export function decoderLayer(b: LayerBuild, i: number): Layer {
  const { shape, prefix, local, norm } = b;
  const attn = layerSelfAttention(b, i);
  const mlp =
    shape.layerMlp?.(i) ??
    gatedMlp({
      name: 'mlp',
      className: `${prefix}MLP`,
      hidden: shape.hidden,
      intermediate: local.intermediate,
      bias: shape.mlpBias,
      activation: shape.activation ?? 'silu',
      ...(shape.fused === true ? { fused: true } : {}),
      ...b.blockTp,
    });
  const inputNorm = norm(shape.hidden, 'input_layernorm');
  const postNorm = norm(shape.hidden, 'post_attention_layernorm');
  const preFeedforward = norm(shape.hidden, 'pre_feedforward_layernorm');
  const postFeedforward = norm(shape.hidden, 'post_feedforward_layernorm');
  const residAttn = dropout({ p: shape.residDropout ?? 0, name: 'resid_attn_dropout' });
  const residMlp = dropout({ p: shape.residDropout ?? 0, name: 'resid_mlp_dropout' });
  const sandwich = shape.sandwichNorms === true;
  const layer: ModuleLayer = Object.freeze({
    kind: 'module',
    name: `layers.${i}`,
    className: `${prefix}DecoderLayer`,
    // __init__ registers self_attn, mlp, then the norms: model.parameters() follows that order.
    childOrder: [
      'self_attn',
      mlp.name ?? 'mlp',
      'input_layernorm',
      'post_attention_layernorm',
      ...(sandwich ? ['pre_feedforward_layernorm', 'post_feedforward_layernorm'] : []),
    ],
    body: graph((g, [h, ...rest]) => {
      const normed = g.apply(inputNorm, h!);
      const [out, weights] = g.applyAll(attn, normed, ...rest);
      // The layer's `hidden_states` keeps the normed input until self_attn returns (and mlp's below).
      g.touch(normed);
      // `hidden_states, _ = self.self_attn(...)`: the eager attention weights live until the layer returns.
      if (weights !== undefined) g.hold(weights);
      // Gemma 2/3: post_attention_layernorm on the attention output; Phi-3: resid_attn_dropout.
      const attnOut = sandwich ? g.apply(postNorm, out!) : shape.residDropout !== undefined ? g.apply(residAttn, out!) : out!;
      const mid = g.call(addOp, [h!, attnOut], {})[0]!;
      const normed2 = g.apply(sandwich ? preFeedforward : postNorm, mid);
      const mlpOut = g.apply(mlp, normed2);
      g.touch(normed2);
      const last = sandwich ? g.apply(postFeedforward, mlpOut) : shape.residDropout !== undefined ? g.apply(residMlp, mlpOut) : mlpOut;
      return g.call(addOp, [mid, last], {})[0]!;
    }),
  });
  return layer;
}
