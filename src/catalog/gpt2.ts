import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { causalMaskOp, positionsOp } from '../ops/causal-mask.js';
import { addOp } from '../ops/merge.js';
import { expandOp } from '../ops/view.js';
import type { Dim } from '../sym/expr.js';
import { attention, type AttentionImpl } from '../nn/attention.js';
import { dropout } from '../nn/dropout.js';
import { embedding } from '../nn/embedding.js';
import { graph } from '../nn/graph.js';
import { layerNorm } from '../nn/layerNorm.js';
import { linear } from '../nn/linear.js';
import { mlp } from '../nn/mlp.js';
import { module } from '../nn/module.js';
import { repeatedBlocks } from '../nn/repeated.js';
import type { Layer, ModuleLayer, ModelMeta, TensorRef } from '../nn/types.js';
import type { DecoderOptions } from './llama.js';
import { causalLmLoss } from './lm-loss.js';
import { sub } from '../sym/ops.js';
import { transformersRules, type HFRules } from './transformers.js';
import { activationName, fieldsOf, probability } from '../nn/block-schema.js';
import { LIMITS } from '../limits.js';
import { decoderOptions } from '../options.js';
import { boolean, integer, object, validate } from '../validate.js';

/** The shape of a GPT-2 model. */
export interface Gpt2Shape {
  readonly hidden: number;
  readonly layers: number;
  readonly heads: number;
  readonly inner: number;
  readonly vocab: number;
  readonly positions: number;
  readonly attnDropout: number;
  readonly residDropout: number;
  readonly embdDropout: number;
  /** `tie_word_embeddings` (default true): lm_head shares wte's weight. */
  readonly tied?: boolean;
  /** `activation_function`, a Hugging Face ACT2FN name (default `gelu_new`). */
  readonly activation?: string;
}

/** {@link Gpt2Shape} as GPT2Config holds it: sizes >= 1, up to `LIMITS.layers` blocks, dropout probabilities, `tie_word_embeddings`, an `ACT2FN` name. */
const GPT2_SHAPE = object({
  fields: {
    ...fieldsOf(['hidden', 'heads', 'inner', 'vocab', 'positions'], integer(1)),
    layers: integer(1, LIMITS.layers),
    ...fieldsOf(['attnDropout', 'residDropout', 'embdDropout'], probability),
    tied: boolean,
    activation: activationName,
  },
  required: ['hidden', 'layers', 'heads', 'inner', 'vocab', 'positions', 'attnDropout', 'residDropout', 'embdDropout'],
});

/** What every GPT-2 block is built from: the model's shape, the release's rules, the attention implementation and cache. */
interface Gpt2BlockContext {
  readonly shape: Gpt2Shape;
  readonly rules: HFRules;
  readonly impl: AttentionImpl;
  readonly cache: false | 'alias' | 'copy';
}

/** GPT2Block `h.{i}`: ln_1, fused Conv1D attention, residual, ln_2, MLP, residual. */
function gpt2Block(i: number, { shape, rules, impl, cache }: Gpt2BlockContext): Layer {
  const attn = attention({
    name: 'attn',
    style: 'gpt2',
    hidden: shape.hidden,
    heads: shape.heads,
    impl,
    dropout: shape.attnDropout,
    residDropout: shape.residDropout,
    positions: shape.positions,
    maskBuffer: rules.gpt2MaskBuffers,
    qkvBias: true,
    outBias: true,
    cache,
    returnWeights: rules.gpt2Weights === 'block',
    locals: rules.attentionCode,
    sdpaContiguous: rules.sdpaContiguous === 'always',
    // q is a transposed view of c_attn's output: the flash kernel's output comes back [B, S, heads, D] (measured 5.18).
    sdpaOutputTransposed: true,
  });
  const ff = mlp({
    name: 'mlp',
    hidden: shape.hidden,
    inner: shape.inner,
    activation: shape.activation ?? 'gelu_new',
    conv1d: true,
    dropout: shape.residDropout,
  });
  const ln1 = layerNorm({ name: 'ln_1' });
  const ln2 = layerNorm({ name: 'ln_2' });
  return module(
    `h.${i}`,
    'GPT2Block',
    graph((g, [h, mask]) => {
      const a = g.apply(ln1, h!);
      // `attn_output` (and from 4.52 the weights) are locals until the block returns.
      const [attended, weights] = g.applyAll(attn, a, ...(mask !== undefined ? [mask] : [])) as [TensorRef, TensorRef | undefined];
      g.hold(attended);
      if (weights !== undefined) g.hold(weights);
      const mid = g.call(addOp, [attended, h!], {})[0]!;
      const b = g.apply(ln2, mid);
      return g.call(addOp, [mid, g.apply(ff, b)], {})[0]!;
    }),
  );
}

/**
 * GPT-2 as Hugging Face's GPT2LMHeadModel runs it: token and learned position embeddings,
 * pre-LayerNorm blocks with fused Conv1D attention (bool mask buffer, torch.where) and the
 * configured MLP activation, final LayerNorm, the LM head (tied to the token embedding unless
 * `tie_word_embeddings` is false), and in training the loss on a shifted copy of the logits.
 * With `use_cache` (the default) each block's `present` keeps views of its whole `c_attn`
 * output until the forward returns.
 *
 * @example
 * ```ts
 * import { estimate, gpt2Model } from 'vram-ts';
 * const tiny = gpt2Model({ hidden: 64, layers: 1, heads: 4, inner: 256, vocab: 256, positions: 64, attnDropout: 0, residDropout: 0, embdDropout: 0 });
 * console.log(estimate(tiny, { input: [1, 16] }).params.total); // 70592
 * ```
 */
export function gpt2Model(shape: Gpt2Shape, options: DecoderOptions = {}): ModuleLayer {
  validate(shape, GPT2_SHAPE, ['gpt2Model']);
  // GPT2Attention: "`embed_dim` must be divisible by num_heads".
  if (shape.hidden % shape.heads !== 0)
    fail('bad-option', 'heads must divide hidden', { path: ['gpt2Model', 'heads'], expected: `a divisor of ${shape.hidden}`, received: String(shape.heads) });
  validate(options, decoderOptions, ['options']);
  if (options.tensorParallel !== undefined)
    fail('not-modelled', 'tensor parallelism of GPT-2 (fused Conv1D c_attn) is not modelled: llama, qwen2 and mistral are', {
      path: ['options', 'tensorParallel'],
      expected: 'absent',
      received: JSON.stringify(options.tensorParallel),
    });
  const rules = transformersRules(options.transformers, ['transformers']);
  const impl = options.attention ?? rules.defaultAttention.gpt2;
  const cache = (options.useCache ?? true) ? rules.cache : false;
  const tied = shape.tied ?? true;
  const maskStyle = rules.mask.gpt2;
  const blocks: Layer[] = Array.from({ length: shape.layers }, (_, i) => gpt2Block(i, { shape, rules, impl, cache }));
  const wte = embedding({ num: shape.vocab, dim: shape.hidden, name: 'wte' });
  const wpe = embedding({ num: shape.positions, dim: shape.hidden, name: 'wpe' });
  const drop = dropout({ p: shape.embdDropout, name: 'drop' });
  const lnF = layerNorm({ name: 'ln_f' });
  const lmHead = linear({ out: shape.vocab, bias: false, name: 'lm_head', ...(tied ? { tiedWeight: 'transformer.wte.weight' } : {}) });
  const transformer = module(
    'transformer',
    'GPT2Model',
    graph((g, [ids]) => {
      // wpe has n_positions rows: a longer input is an index error in PyTorch.
      g.require(sub(shape.positions + 1, ids!.shape[1]!), `GPT-2 reads at most n_positions = ${shape.positions} positions`);
      // position_ids = arange(0, S).unsqueeze(0): a new int64 [1, S].
      const positionIds = g.call(positionsOp, [ids!], {})[0]!;
      const tokens = g.apply(wte, ids!);
      const positions = g.apply(wpe, positionIds);
      g.hold(tokens);
      g.hold(positions);
      let h = g.call(addOp, [tokens, positions], {})[0]!;
      // From 4.55 eager attention also adds create_causal_mask's float [B, 1, S, S].
      // 4.57 without a cache object: create_causal_mask's bool [B, 1, S, S] for sdpa too (packed-sequence detection).
      const packed = rules.packedSequenceMask && impl === 'sdpa' && maskStyle === 'masking-utils' && (cache === false || (g.training && g.checkpointing));
      const [batch, seq] = ids!.shape as [Dim, Dim];
      const mask =
        impl === 'eager' && maskStyle === 'masking-utils'
          ? g.call(causalMaskOp, [tokens], {})[0]!
          : packed
            ? g.call(expandOp, [g.call(causalMaskOp, [tokens], { bool: true })[0]!], { shape: [batch, 1, seq, seq] })[0]!
            : undefined;
      if (mask !== undefined) g.hold(mask);
      h = g.apply(drop, h);
      for (const block of blocks) h = g.apply(block, h, ...(mask !== undefined ? [mask] : []));
      return g.apply(lnF, h);
    }),
  );
  const meta: ModelMeta = deepFreeze({
    kind: 'decoder',
    family: 'gpt2',
    layers: shape.layers,
    heads: shape.heads,
    kvHeads: shape.heads,
    headDim: shape.hidden / shape.heads,
    hidden: shape.hidden,
    vocab: shape.vocab,
    intermediate: shape.inner,
    gatedMlp: false,
    tied,
    roles: { layerClass: 'GPT2Block', inputEmbedding: 'transformer.wte', outputEmbedding: 'lm_head', finalNorm: 'transformer.ln_f' },
  });
  const body = graph((g, [ids]) => {
    const h = g.apply(transformer, ids!);
    // `transformer_outputs` keeps the last hidden state until forward returns.
    g.hold(h);
    const logits = g.apply(lmHead, h);
    // The output returns the logits: they live through the loss.
    g.hold(logits);
    return g.gradEnabled ? causalLmLoss(g, logits, ids!, shape.vocab, rules.loss.gpt2, rules.logitsUpcast.gpt2 === 'loss') : logits;
  });
  return Object.freeze({
    kind: 'module',
    className: 'GPT2LMHeadModel',
    inputDtype: 'int64',
    ...(options.dtype !== undefined ? { dtype: options.dtype } : {}),
    meta,
    body,
    repeated: repeatedBlocks(shape.layers, 'transformer.h.', body, (count) => gpt2Model({ ...shape, layers: count }, options)),
  });
}
