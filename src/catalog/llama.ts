import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { castOp } from '../ops/cast.js';
import { causalMaskOp, positionsOp } from '../ops/causal-mask.js';
import { rotaryOp } from '../ops/rotary.js';
import { expandOp } from '../ops/view.js';
import type { AttentionImpl } from '../nn/attention.js';
import { embedding } from '../nn/embedding.js';
import { graph } from '../nn/graph.js';
import { linear } from '../nn/linear.js';
import { module } from '../nn/module.js';
import { opLayer } from '../nn/op.js';
import { repeatedBlocks } from '../nn/repeated.js';
import { rmsNorm } from '../nn/rmsNorm.js';
import type { ContextParallelBuild, GraphBuilder, Layer, LmHead, ModuleLayer, ModelMeta, TensorParallelBuild, TensorRef } from '../nn/types.js';
import type { Dim } from '../sym/expr.js';
import { causalLmLoss } from './lm-loss.js';
import { checkHeadBuild, fp32, lossMetrics, trainerHead } from './lm-head.js';
import { localDecoderSizes } from './tensor-parallel.js';
import { contextParallelBuild } from './context-parallel.js';
import { contextShardOp } from '../ops/ring-attention.js';
import { allGatherOp, allReduceOp, globalViewOp, reduceScatterOp, tpCopyOp, vocabEmbeddingOp } from '../ops/collective.js';
import { TRANSFORMERS_RULES, transformersRules, type FamilyRules, type HFRules, type LlamaFamilyName, type VariantFamilyName } from './transformers.js';
import { activationOp } from '../ops/activation.js';
import { embeddingOp } from '../ops/embedding.js';
import { bufferScaleOp } from '../ops/layerNorm.js';
import { mulScalarOp } from '../ops/pointwise.js';
import { decoderOptions } from '../options.js';
import { validate } from '../validate.js';
import { decoderLayer } from './llama-layer.js';
import { checkLlamaShape, type DecoderOptions, type LlamaShape } from './llama-shape.js';

export type { DecoderOptions, LlamaShape } from './llama-shape.js';

const PREFIX: Readonly<Record<LlamaShape['family'], string>> = {
  llama: 'Llama',
  qwen2: 'Qwen2',
  mistral: 'Mistral',
  qwen3: 'Qwen3',
  gemma: 'Gemma',
  gemma2: 'Gemma2',
  gemma3_text: 'Gemma3',
  phi3: 'Phi3',
};

const VARIANTS: readonly string[] = ['qwen3', 'gemma', 'gemma2', 'gemma3_text', 'phi3'] satisfies readonly VariantFamilyName[];

/** The release's rules of a family: Llama/Qwen2/Mistral's own fields, or a variation's {@link HFRules.families} entry (a VramError where its code was not read). */
function familyRules(family: LlamaShape['family'], rules: HFRules): FamilyRules {
  if (!VARIANTS.includes(family)) {
    const f = family as LlamaFamilyName;
    return {
      rotary: rules.rotary[f],
      mask: rules.mask[f],
      logitsUpcast: rules.logitsUpcast[f],
      loss: rules.loss[f],
      defaultAttention: rules.defaultAttention[f],
      embedScale: 'model',
    };
  }
  const own = rules.families[family as VariantFamilyName];
  if (own !== undefined) return own;
  const variants = TRANSFORMERS_RULES.find((r) => r.field === `families.${family}`)?.variants ?? [];
  const read = variants.flatMap((v, i) =>
    v.value === undefined ? [] : [`${v.from} ${i + 1 < variants.length ? `– before ${variants[i + 1]!.from}` : 'and later'}`],
  );
  return fail('unsupported-release', `the ${family} modeling code of this transformers release was not read`, {
    path: ['transformers'],
    expected: read.join(' or '),
    received: JSON.stringify(rules.release),
  });
}

/** The float mask eager attention adds (expanded over the batch where it is built once), or undefined for sdpa/flash. */
function causalMask(g: GraphBuilder, embeds: TensorRef, shape: LlamaShape, rules: HFRules, impl: AttentionImpl): TensorRef | undefined {
  const style = familyRules(shape.family, rules).mask;
  if (impl !== 'eager' || style === 'none') return undefined;
  // Mistral always, Qwen2 up to 4.41 too: `_make_causal_mask` applies config.sliding_window.
  const window = shape.slidingWindow !== undefined || (shape.family === 'qwen2' && shape.maskWindow === true);
  const built = g.call(causalMaskOp, [embeds], { style, slidingWindow: window })[0]!;
  if (style === 'masking-utils') return built;
  const [batch] = embeds.shape as [Dim];
  return g.call(expandOp, [built], { shape: [batch, 1, built.shape[2]!, built.shape[3]!] })[0]!;
}

/**
 * A Llama-family causal LM as a Hugging Face release's `*ForCausalLM` runs it with `labels`:
 * embed tokens, the positions, the eager causal mask and (from 4.45) the rotary tables once,
 * N pre-norm decoder layers (RMSNorm, attention, residual, RMSNorm, gated MLP, residual),
 * final RMSNorm, LM head, and in training the loss. Module names and parameters follow the
 * checkpoints; where releases differ (rotary placement and buffers, the mask, how long
 * attention weights live, the logits' upcast, the loss) `options.transformers` picks the
 * release's rules ({@link vram-ts/internals!TRANSFORMERS_RULES}).
 *
 * @example
 * ```ts
 * import { estimate, llamaFamily } from 'vram-ts';
 * const tiny = llamaFamily({ family: 'llama', hidden: 64, intermediate: 172, layers: 1, heads: 4, kvHeads: 4, headDim: 16, vocab: 256, tied: false, qkvBias: false, outBias: false, mlpBias: false, attentionDropout: 0 });
 * console.log(estimate(tiny, { input: [1, 16] }).params.total); // 82368
 * ```
 */
export function llamaFamily(shape: LlamaShape, options: DecoderOptions = {}): ModuleLayer {
  checkLlamaShape(shape);
  validate(options, decoderOptions, ['options']);
  const b = decoderBuild(shape, options);
  const { prefix, stage, windows } = b;
  const layers: Layer[] = Array.from({ length: b.end - b.start }, (_, k) => decoderLayer(b, b.start + k));
  const model = decoderModel(b, layers);
  const body = causalLmBody(b, model);
  if (options.head !== undefined)
    checkHeadBuild(options.head, b.tp !== undefined || b.cp !== undefined || stage !== undefined, shape.finalSoftcap !== undefined);
  return Object.freeze({
    kind: 'module',
    className: `${prefix}ForCausalLM`,
    inputDtype: 'int64',
    ...(options.dtype !== undefined ? { dtype: options.dtype } : {}),
    meta: deepFreeze(decoderMeta(b)),
    body,
    withHead: (head: LmHead) => llamaFamily(shape, { ...options, head, ...(head.useCache !== undefined ? { useCache: head.useCache } : {}) }),
    // Layers of different windows differ in their inputs: traced whole.
    ...(stage === undefined && shape.layerMlp === undefined && (windows === undefined || windows.every((w) => w === windows[0]))
      ? {
          repeated: repeatedBlocks(
            shape.layers,
            'model.layers.',
            body,
            (count) => llamaFamily({ ...shape, layers: count, ...(windows !== undefined ? { layerWindows: windows.slice(0, count) } : {}) }, options),
            (from, to) => llamaFamily(shape, { ...options, pipelineStage: { layers: [from, to] } }),
          ),
        }
      : {}),
  });
}

/** One decoder's build: its shape and options, the release's rules and what they decide, the rank's local sizes and layers. */
export type DecoderBuild = ReturnType<typeof decoderBuild>;

/** The release's rules for the shape, the parallel options checked (TP, CP, EP, PP), the rank's local sizes and stage. */
function decoderBuild(shape: LlamaShape, options: DecoderOptions) {
  const rules = transformersRules(options.transformers, ['transformers']);
  const fam = familyRules(shape.family, rules);
  const impl = options.attention ?? fam.defaultAttention;
  // Gemma 2/3 in 4.57 make no cache object in training (`... and not self.training`).
  const cache: HFRules['cache'] | `${HFRules['cache']}-eval` | false =
    (options.useCache ?? true) ? (fam.noTrainingCache === true ? `${rules.cache}-eval` : rules.cache) : false;
  const prefix = shape.classPrefix ?? PREFIX[shape.family];
  const variant = VARIANTS.includes(shape.family);
  const windows = shape.layerWindows;
  const cp = checkParallel(shape, options, variant, impl);
  const rotaryDim = shape.rotaryDim ?? shape.headDim;
  const norm = (size: number, name: string) => rmsNorm({ size, name, className: `${prefix}RMSNorm`, ...(shape.normOffset === true ? { offset: true } : {}) });
  const tpOptions = options.tensorParallel;
  const local =
    tpOptions === undefined
      ? { heads: shape.heads, kvHeads: shape.kvHeads, intermediate: shape.intermediate, vocab: shape.vocab }
      : localDecoderSizes(shape, tpOptions);
  const tp: TensorParallelBuild | undefined =
    tpOptions === undefined
      ? undefined
      : {
          size: tpOptions.size,
          rank: tpOptions.rank ?? 0,
          sequenceParallel: tpOptions.sequenceParallel ?? false,
          lossParallel: tpOptions.lossParallel ?? false,
          tied: shape.tied && (tpOptions.retie ?? false),
        };
  // parallelize_module gives each module its own DTensor parameter: a tie survives only re-tied.
  // A pipeline cut keeps the tied Parameter on both sides as two: embed_tokens on the first
  // stage, lm_head's own weight on the last (nothing synchronises their gradients).
  const tied =
    (tp === undefined ? shape.tied : tp.tied) &&
    (options.pipelineStage === undefined || (options.pipelineStage.layers[0] === 0 && options.pipelineStage.layers[1] === shape.layers));
  const blockTp = tp === undefined ? {} : { tensorParallel: { size: tp.size, sequence: tp.sequenceParallel } };
  const blockCp = cp === undefined ? {} : { contextParallel: cp };
  const gqaAllowed = rules.sdpaGqa === 'enable-gqa' && (rules.gqaHeadDimMax === undefined || shape.headDim <= rules.gqaHeadDimMax);
  const stage = options.pipelineStage;
  const [start, end] = stage?.layers ?? [0, shape.layers];
  if (stage !== undefined) {
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end > shape.layers || start >= end)
      fail('bad-option', 'a pipeline stage is a non-empty run of the layers', {
        path: ['options', 'pipelineStage', 'layers'],
        expected: `[start, end) within 0 .. ${shape.layers}`,
        received: JSON.stringify(stage.layers),
      });
    if (tp !== undefined) fail('not-modelled', 'a pipeline stage of a tensor-parallel decoder is not modelled yet', { path: ['options', 'pipelineStage'] });
  }
  return {
    shape,
    options,
    rules,
    fam,
    impl,
    cache,
    prefix,
    rotaryRules: fam.rotary,
    variant,
    windows,
    cp,
    tp,
    local,
    tied,
    rotaryDim,
    norm,
    blockTp,
    blockCp,
    gqaAllowed,
    stage,
    start,
    end,
    first: start === 0,
    last: end === shape.layers,
  };
}

/** The layer windows and the parallel options a shape allows (the variations: none); returns the context-parallel build. */
function checkParallel(shape: LlamaShape, options: DecoderOptions, variant: boolean, impl: AttentionImpl): ContextParallelBuild | undefined {
  if (variant && options.tensorParallel !== undefined)
    fail('not-modelled', `tensor parallelism of ${shape.family} is not modelled (llama, qwen2 and mistral are)`, {
      path: ['options', 'tensorParallel'],
      expected: 'absent',
      received: JSON.stringify(options.tensorParallel),
    });
  if (variant && options.pipelineStage !== undefined)
    fail('not-modelled', `a pipeline stage of ${shape.family} is not modelled (llama, qwen2 and mistral are)`, {
      path: ['options', 'pipelineStage'],
      expected: 'absent',
      received: JSON.stringify(options.pipelineStage),
    });
  // Expert parallelism shards MoE blocks (built by the caller's layerMlp); a dense model has none.
  if (options.expertParallel !== undefined && shape.extraMeta?.moe === undefined)
    fail('bad-option', 'expert parallelism applies to mixture-of-experts decoders', {
      path: ['options', 'expertParallel'],
      expected: 'absent for a dense model',
      received: JSON.stringify(options.expertParallel),
    });
  const cp = options.contextParallel === undefined ? undefined : contextParallelBuild(options.contextParallel);
  if (cp !== undefined) {
    if (variant)
      fail('not-modelled', `context parallelism of ${shape.family} is not modelled (llama, qwen2 and mistral are)`, {
        path: ['options', 'contextParallel'],
        expected: 'absent',
        received: JSON.stringify(options.contextParallel),
      });
    if (impl !== 'sdpa')
      fail('not-modelled', 'context parallelism runs sdpa as ring attention: build the model with attention: "sdpa"', {
        path: ['options', 'attention'],
        expected: "'sdpa'",
        received: impl,
      });
    for (const key of ['pipelineStage'] as const)
      if (options[key] !== undefined)
        fail('not-modelled', `context parallelism with ${key} is not modelled yet`, {
          path: ['options', key],
          expected: 'absent',
          received: JSON.stringify(options[key]),
        });
  }
  return cp;
}

/** `embed_tokens`: the embedding, vocab-parallel under TP (a short rank's shard a narrowed view of a padded buffer), or Gemma 5.x's scaled one. */
function embedTokensOf(b: DecoderBuild): Layer {
  const { shape, tp, local, prefix } = b;
  // Tensor parallel: RowwiseParallel(input_layouts=Replicate()) on the embedding (vocab-parallel).
  // Gemma 5.x: GemmaTextScaledWordEmbedding multiplies by its 0-dim buffer embed_scale.
  return scaledEmbedding(b)
    ? module(
        'embed_tokens',
        `${prefix}TextScaledWordEmbedding`,
        graph((g, [ids]) => g.call(bufferScaleOp, [g.call(embeddingOp, [ids!], { num: shape.vocab, dim: shape.hidden })[0]!], { buffer: 'embed_scale' })[0]!),
      )
    : tp === undefined
      ? embedding({ num: shape.vocab, dim: shape.hidden, name: 'embed_tokens' })
      : opLayer(
          vocabEmbeddingOp,
          'Embedding',
          { num: local.vocab, dim: shape.hidden, ...(b.tied ? {} : { wholeNum: shape.vocab }), ...vocabStorage(b) },
          { name: 'embed_tokens' },
        );
}

function scaledEmbedding(b: DecoderBuild): boolean {
  return b.shape.embedScale === true && b.fam.embedScale === 'embedding';
}

// A short rank's vocabulary shard is a narrowed view of a buffer padded to ⌈V/t⌉ rows.
function vocabStorage(b: DecoderBuild): { storageRows?: number } {
  const paddedVocab = b.tp === undefined ? b.shape.vocab : Math.ceil(b.shape.vocab / b.tp.size);
  return paddedVocab !== b.local.vocab ? { storageRows: paddedVocab } : {};
}

/** The model's rotary tables and masks per layer: one table pair per layer type present, the local ones for sliding layers. */
function layerTables(b: DecoderBuild) {
  const { shape, windows, variant, rotaryRules, prefix, impl, fam } = b;
  // Gemma 3: one table pair per layer type present, the local ones from rope_local_base_freq.
  // Phi-3's sliding_window makes every layer local; so does Mistral's under masking_utils (4.53 on).
  const allLocal = (variant || fam.mask === 'masking-utils') && windows === undefined && shape.slidingWindow !== undefined;
  const isLocal = (i: number) => allLocal || (windows?.[i] !== undefined && windows[i] !== null);
  // 4.57's Gemma 3: rotary_emb and rotary_emb_local, two modules, both run whatever the layer types.
  const twoModules = shape.localRotary === true && windows !== undefined && fam.localRotaryModule === true;
  const tableTypes = twoModules
    ? ['full_attention_', 'sliding_attention_']
    : shape.localRotary === true && windows !== undefined
      ? [...(windows.some((w) => w === null) ? ['full_attention_'] : []), ...(windows.some((w) => w !== null) ? ['sliding_attention_'] : [])]
      : [''];
  const rotaryTables = (name: string) =>
    module(
      name,
      `${prefix}RotaryEmbedding`,
      graph((inner, [x]) => inner.call(rotaryOp, [x!], { headDim: b.rotaryDim, ...(rotaryRules.originalInvFreq ? { originalInvFreq: true } : {}) })),
    );
  const rotaryModule = twoModules
    ? graph((inner, [x]) => [...inner.applyAll(rotaryTables('rotary_emb'), x!), ...inner.applyAll(rotaryTables('rotary_emb_local'), x!)])
    : rotaryRules.placement === 'model'
      ? module(
          'rotary_emb',
          `${prefix}RotaryEmbedding`,
          graph((inner, [x]) =>
            tableTypes.flatMap((p) =>
              inner.call(rotaryOp, [x!], {
                headDim: b.rotaryDim,
                ...(rotaryRules.originalInvFreq ? { originalInvFreq: true } : {}),
                ...(p !== '' ? { bufferPrefix: p } : {}),
              }),
            ),
          ),
        )
      : undefined;
  /** Layer i's rotary tables and mask: the local ones for a sliding layer of Gemma 3 (tables) and Gemma 2/3, Qwen3 (mask). */
  const layerInputs = (i: number, tables: readonly TensorRef[], masks: Masks): TensorRef[] => {
    const pair = tables.length > 2 && (tableTypes[0] === 'sliding_attention_' ? !isLocal(i) : isLocal(i)) ? tables.slice(2, 4) : tables.slice(0, 2);
    const mask = isLocal(i) ? masks.sliding : masks.full;
    return [...pair, ...(mask !== undefined ? [mask] : [])];
  };
  /** Whether sdpa gets a sliding-window mask: masking_utils skips it only for inputs no longer than the window. */
  const minWindow = allLocal ? shape.slidingWindow : windows === undefined ? undefined : Math.min(...windows.filter((w): w is number => w !== null));
  const sdpaSlidingMask = (seq: Dim) =>
    impl === 'sdpa' && minWindow !== undefined && fam.mask === 'masking-utils' && !(typeof seq === 'number' && seq < minWindow);
  return { allLocal, rotaryModule, layerInputs, sdpaSlidingMask };
}

/** Whether sdpa gets masks because the forward has no cache object (the release's packed-sequence detection). */
function packedMasks(b: DecoderBuild, g: GraphBuilder): boolean {
  if (!b.rules.packedSequenceMask || b.impl !== 'sdpa' || b.fam.mask !== 'masking-utils') return false;
  return b.cache === false || (g.training && (g.checkpointing || b.fam.noTrainingCache === true));
}

/**
 * create_causal_mask / create_sliding_window_causal_mask as sdpa_mask builds them: bool [B, 1, S, S].
 * With layer types the full one is always built (Gemma 2/3, Qwen2/3), the sliding one when a layer
 * is sliding, or always (Gemma 2/3: `everyMaskType`).
 */
function boolMasks(g: GraphBuilder, b: DecoderBuild, global: TensorRef, allLocal: boolean, batch: Dim, seq: Dim): Masks {
  const { windows } = b;
  const one = () => g.call(expandOp, [g.call(causalMaskOp, [global], { bool: true })[0]!], { shape: [batch, 1, seq, seq] })[0]!;
  const full = !allLocal;
  const sliding = allLocal || (windows !== undefined && (b.fam.everyMaskType === true || windows.some((w) => w !== null)));
  return { ...(full ? { full: one() } : {}), ...(sliding ? { sliding: one() } : {}) };
}

/** The causal and sliding-window masks the layers read. */
interface Masks {
  full?: TensorRef | undefined;
  sliding?: TensorRef | undefined;
}

/** `model`: embeddings (all-reduced or reduce-scattered under TP), positions, masks and rotary tables once, the layers, the final norm. */
function decoderModel(b: DecoderBuild, layers: readonly Layer[]): Layer {
  const { shape, rules, impl, fam, tp, windows, first, last } = b;
  const embedTokens = embedTokensOf(b);
  const finalNorm = b.norm(shape.hidden, 'norm');
  const { allLocal, rotaryModule, layerInputs, sdpaSlidingMask } = layerTables(b);
  const scaled = scaledEmbedding(b);
  return module(
    'model',
    `${b.prefix}Model`,
    graph((g, [ids]) => {
      // A later pipeline stage is fed the received hidden states as inputs_embeds.
      if (!first) return stageModel(b, g, ids!, layers, rotaryModule, finalNorm);
      let embeds = g.apply(embedTokens, ids!);
      // The vocab-parallel embedding's Partial output: all-reduced, or reduce-scattered over
      // the sequence (sequence parallel, kept a DTensor: `use_local_output=False`).
      if (tp !== undefined)
        embeds = tp.sequenceParallel ? g.call(reduceScatterOp, [embeds], { dim: 1, size: tp.size })[0]! : g.call(allReduceOp, [embeds], {})[0]!;
      g.hold(embeds);
      // What Python reads of the (DTensor) embeddings' shape: the whole sequence.
      const [batch, seq] = ids!.shape as [Dim, Dim];
      const global = tp?.sequenceParallel === true ? g.call(globalViewOp, [embeds], { shape: [batch, seq, shape.hidden] })[0]! : embeds;
      // cache_position = arange(S) (position_ids is a view of it): alive for the whole forward.
      g.hold(g.call(positionsOp, [ids!], {})[0]!);
      // Gemma 2/3, Qwen3 with local layers: create_causal_mask and create_sliding_window_causal_mask
      // (sdpa: none for the global layers, a bool one for the local layers unless the input fits the window).
      const masks: Masks = {};
      if (packedMasks(b, g)) Object.assign(masks, boolMasks(g, b, global, allLocal, batch, seq));
      else if (windows === undefined && !allLocal) masks.full = causalMask(g, global, shape, rules, impl);
      else if (allLocal && impl === 'eager') masks.sliding = causalMask(g, global, shape, rules, impl);
      else if (impl === 'eager' && fam.mask === 'masking-utils') {
        masks.full = g.call(causalMaskOp, [global], { style: 'masking-utils', slidingWindow: false })[0]!;
        masks.sliding = g.call(causalMaskOp, [global], { style: 'masking-utils', slidingWindow: true })[0]!;
      } else if (sdpaSlidingMask(seq)) {
        const bool = g.call(causalMaskOp, [global], { bool: true })[0]!;
        masks.sliding = g.call(expandOp, [bool], { shape: [batch, 1, seq, seq] })[0]!;
      }
      for (const mask of [masks.full, masks.sliding]) if (mask !== undefined) g.hold(mask);
      const tables: TensorRef[] = [];
      if (rotaryModule !== undefined) {
        tables.push(...g.applyAll(rotaryModule, global));
        for (const t of tables) g.hold(t);
      }
      // Gemma 4.x: `hidden_states = inputs_embeds * torch.tensor(hidden ** 0.5, dtype)` in the model.
      let h = shape.embedScale === true && !scaled ? g.call(mulScalarOp, [embeds], { scalarDtype: embeds.dtype })[0]! : embeds;
      layers.forEach((layer, k) => {
        h = g.apply(layer, h, ...layerInputs(b.start + k, tables, masks));
      });
      return last ? g.apply(finalNorm, h) : h;
    }),
  );
}

/** Qwen2Model.forward(inputs_embeds=h): positions, mask and rotary tables from h, the stage's layers. */
function stageModel(
  b: DecoderBuild,
  g: GraphBuilder,
  embeds: TensorRef,
  layers: readonly Layer[],
  rotaryModule: Layer | undefined,
  finalNorm: Layer,
): TensorRef {
  g.hold(g.call(positionsOp, [embeds], {})[0]!);
  const mask = causalMask(g, embeds, b.shape, b.rules, b.impl);
  if (mask !== undefined) g.hold(mask);
  const shared: TensorRef[] = [];
  if (rotaryModule !== undefined) {
    const [cos, sin] = g.applyAll(rotaryModule, embeds) as [TensorRef, TensorRef];
    g.hold(cos);
    g.hold(sin);
    shared.push(cos, sin);
  }
  if (mask !== undefined) shared.push(mask);
  let h = embeds;
  for (const layer of layers) h = g.apply(layer, h, ...shared);
  return b.last ? g.apply(finalNorm, h) : h;
}

/** The `*ForCausalLM` forward: the context-parallel cut, the model, lm_head (TP: wrapped or gathered input), soft-capping, the logits' upcast, the loss. */
function causalLmBody(b: DecoderBuild, model: Layer): Layer {
  const { shape, tp, cp, fam, local, last, stage } = b;
  const lmHead = linear({ out: local.vocab, bias: false, ...vocabStorage(b), name: 'lm_head', ...(b.tied ? { tiedWeight: 'model.embed_tokens.weight' } : {}) });
  return graph((g, [whole]) => {
    // context_parallel cuts input ids, labels and position ids to the rank's positions in place.
    const ids = cp === undefined ? whole : g.call(contextShardOp, [whole!], { size: cp.size, loadBalance: cp.loadBalance })[0];
    const h = g.apply(model, ids!);
    // `outputs = self.model(...)` keeps the last hidden state until forward returns.
    g.hold(h);
    // ColwiseParallel on lm_head: the replicated input wrapped (or, sequence parallel, gathered).
    const headInput = tp === undefined ? h : tp.sequenceParallel ? g.call(allGatherOp, [h], { dim: 1, size: tp.size })[0]! : g.call(tpCopyOp, [h], {})[0]!;
    const head = b.options.head ?? { kind: 'loss' };
    if (head.kind !== 'loss' && head.kind !== 'loss-metrics') return trainerHead(g, { vocab: shape.vocab, tied: b.tied, lmHead }, head, h, ids!);
    // Before the last pipeline stage lm_head is an Identity: the "logits" are the hidden states.
    let logits = last ? g.apply(lmHead, headInput) : headInput;
    if (shape.finalSoftcap !== undefined && last) {
      // Gemma 2: `logits / cap`, `tanh` (its result kept), `* cap`.
      logits = g.call(mulScalarOp, [logits], {})[0]!;
      logits = g.call(activationOp('tanh'), [logits], {})[0]!;
      logits = g.call(mulScalarOp, [logits], {})[0]!;
    }
    // Without loss_parallel the vocabulary shards are all-gathered (`output_layouts=Replicate()`).
    if (tp !== undefined && !tp.lossParallel) logits = g.call(allGatherOp, [logits], { dim: 2, size: tp.size, backward: 'split', extent: shape.vocab })[0]!;
    const parallelLoss = tp?.lossParallel === true;
    const upcast = fam.logitsUpcast;
    if (upcast === 'always' || (upcast === 'labels' && g.gradEnabled)) logits = g.call(castOp, [logits], { dtype: 'float32' })[0]!;
    // The output returns the logits: they live through the loss (SFTTrainer's metrics run after
    // the forward returned, on accelerate's float32 copy: the logits themselves end with the loss).
    if (head.kind !== 'loss-metrics') g.hold(logits);
    // A pipeline stage gets no labels: its loss function runs outside the model.
    if (!g.gradEnabled || stage !== undefined) return logits;
    const loss = causalLmLoss(g, logits, ids!, parallelLoss ? local.vocab : shape.vocab, fam.loss, upcast === 'loss', parallelLoss);
    // accelerate converts the returned logits to float32 (a transient the loop drops with the outputs);
    // SFTTrainer's metrics then run on them outside the forward.
    if (head.kind === 'loss-metrics') g.touch(logits);
    g.endForward();
    const returned = fp32(g, logits, head.autocast);
    if (head.kind === 'loss-metrics') lossMetrics(g, returned);
    return loss;
  });
}

/** The model's meta: its sizes, windows, the parallel builds, the shape's extra facts. */
function decoderMeta(b: DecoderBuild): ModelMeta {
  const { shape, options, windows, tp, cp } = b;
  return {
    kind: 'decoder',
    family: shape.family,
    layers: shape.layers,
    heads: shape.heads,
    kvHeads: shape.kvHeads,
    headDim: shape.headDim,
    hidden: shape.hidden,
    vocab: shape.vocab,
    intermediate: shape.intermediate,
    gatedMlp: true,
    tied: shape.tied,
    roles: { layerClass: `${b.prefix}DecoderLayer`, inputEmbedding: 'model.embed_tokens', outputEmbedding: 'lm_head', finalNorm: 'model.norm' },
    attention: b.impl,
    ...(shape.maxPositions !== undefined ? { maxPositions: shape.maxPositions } : {}),
    ...(shape.slidingWindow !== undefined ? { slidingWindow: shape.slidingWindow } : {}),
    ...(windows !== undefined ? { layerWindows: windows } : {}),
    ...(tp !== undefined ? { tensorParallel: tp } : {}),
    ...(cp !== undefined ? { contextParallel: cp } : {}),
    ...(options.expertParallel !== undefined ? { expertParallel: { size: options.expertParallel.size, rank: options.expertParallel.rank ?? 0 } } : {}),
    ...shape.extraMeta,
  };
}
