import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { anyOf, arrayOf, number, show, string, validate } from '../validate.js';

/** Decoder families whose Hugging Face modeling code vram-ts follows. */
export type HFFamily = 'llama' | 'qwen2' | 'mistral' | 'gpt2';

/** The Llama-style families (rotary, RMSNorm, gated MLP). */
export type LlamaFamilyName = Exclude<HFFamily, 'gpt2'>;

/**
 * Decoder families built as variations of Llama (q/k norms, Gemma's norms and embedding scale,
 * soft-capping, local/global layers, Phi-3's fused projections) whose code was read only at
 * some releases: their rules are {@link HFRules.families}.
 */
export type VariantFamilyName = 'qwen3' | 'gemma' | 'gemma2' | 'gemma3_text' | 'phi3';

/** The release-dependent rules of one {@link VariantFamilyName} family (the fields of HFRules it has its own value of). */
export interface FamilyRules {
  readonly rotary: RotaryRule;
  readonly mask: MaskRule;
  readonly logitsUpcast: 'always' | 'labels' | 'loss' | 'never';
  readonly loss: 'shift' | 'pad-shift';
  readonly defaultAttention: 'eager' | 'sdpa';
  /** No cache object in training whatever use_cache says (Gemma 2/3 in 4.57: `... and not self.training`). */
  readonly noTrainingCache?: boolean;
  /** Gemma 3 in 4.57: two rotary modules, `rotary_emb` and `rotary_emb_local`, both run whatever the layer types (5.x: one table pair per type present). */
  readonly localRotaryModule?: boolean;
  /** Gemma 2/3: `causal_mask_mapping` builds the full and the sliding-window mask whatever the layer types (Qwen2/3: the sliding one only when a layer is sliding). */
  readonly everyMaskType?: boolean;
  /** Gemma's embedding scale: a 0-dim tensor in the activations' dtype made in the model's forward (`model`, 4.x), or the embedding module's 0-dim float32 buffer `embed_scale` (`embedding`, 5.x). */
  readonly embedScale: 'model' | 'embedding';
}

/** Where a Llama-family decoder computes its rotary tables, and which buffers that leaves. */
export interface RotaryRule {
  /**
   * `attention-cached`: every attention layer slices `cos_cached`/`sin_cached` buffers
   * [max_position_embeddings, head_dim] and gathers them at `position_ids`; `attention`: every
   * attention layer computes cos/sin from `inv_freq`; `model`: `model.rotary_emb` computes them
   * once per forward for all layers.
   */
  readonly placement: 'attention-cached' | 'attention' | 'model';
  /** Llama 4.40: unused `_cos_cached`/`_sin_cached` buffers [max_position_embeddings, head_dim] in every layer. */
  readonly unusedTables?: boolean;
  /** A leftover rotary module (its `inv_freq` buffer) in every attention layer beside the model's. */
  readonly layerModule?: boolean;
  /** 5.x: `original_inv_freq`, a second [head_dim/2] float32 buffer. */
  readonly originalInvFreq?: boolean;
}

/** How eager attention's float causal mask is built (see the op rule `causalMaskOp`). */
export type MaskRule = 'update-causal-mask' | 'make-causal-mask' | 'masking-utils' | 'none';

/** The memory-relevant behaviour of one transformers release, as vram-ts's decoders follow it. */
export interface HFRules {
  readonly release: string;
  readonly rotary: Readonly<Record<LlamaFamilyName, RotaryRule>>;
  /** The float mask eager attention adds (GPT-2: `none` up to 4.54, its causal mask is a buffer). */
  readonly mask: Readonly<Record<HFFamily, MaskRule>>;
  /** GPT-2's bool `bias` [1, 1, P, P] and `masked_bias` buffers in every attention, used through `torch.where`. */
  readonly gpt2MaskBuffers: boolean;
  /**
   * Llama family: `inline` attention (q, k, v and the weights are locals of the attention's
   * forward until it returns; the weights are then dropped) or `function`
   * (`eager_attention_forward`: the repeated k/v go when it returns, the weights are returned
   * and held by the decoder layer until it returns).
   */
  readonly attentionCode: 'inline' | 'function';
  /** GPT-2: the attention weights live until the attention (`attention`) or the block (`block`) returns. */
  readonly gpt2Weights: 'attention' | 'block';
  /** Where the logits are upcast to float32: every forward, only with labels, inside the loss, or never. */
  readonly logitsUpcast: Readonly<Record<HFFamily, 'always' | 'labels' | 'loss' | 'never'>>;
  /**
   * The causal-LM loss: `shift` = `logits[..., :-1, :].contiguous()` and
   * `labels[..., 1:].contiguous()` into cross-entropy; `pad-shift` = ForCausalLMLoss since 4.49
   * (labels padded with -100 and shifted, the logits only viewed).
   */
  readonly loss: Readonly<Record<HFFamily, 'shift' | 'pad-shift'>>;
  /** KV cache layer: the first update keeps the key/value tensors themselves (`alias`) or `torch.cat`s them onto an empty tensor (`copy`). */
  readonly cache: 'alias' | 'copy';
  /** sdpa with GQA: `repeat_kv` copies first (`repeat`), or `enable_gqa` without a mask (`enable-gqa`, head_dim ≤ `gqaHeadDimMax` when set). */
  readonly sdpaGqa: 'repeat' | 'enable-gqa';
  readonly gqaHeadDimMax?: number;
  /**
   * masking_utils' packed-sequence detection returns a tensor even for unpacked inputs, so sdpa's
   * causal-mask skip is off whenever the forward has no cache object (training with use_cache off
   * or gradient checkpointing; Gemma 2/3 in training): a bool [B, 1, S, S] mask is built for every
   * mask type, and sdpa repeats k/v for it.
   */
  readonly packedSequenceMask: boolean;
  /** sdpa: q, k, v made contiguous before the kernel: on CUDA with a mask, always, or never. */
  readonly sdpaContiguous: 'cuda-with-mask' | 'always' | 'never';
  /** Families whose attention reads `head_dim` from the config (others use hidden / heads). */
  readonly readsHeadDim: readonly HFFamily[];
  /** Families whose MLP reads `mlp_bias`. */
  readonly readsMlpBias: readonly HFFamily[];
  /** The attention implementation transformers picks when none is asked for (on PyTorch ≥ 2.1.1). */
  readonly defaultAttention: Readonly<Record<HFFamily, 'eager' | 'sdpa'>>;
  /** `from_pretrained` without a dtype: float32 (4.x) or the config's dtype (5.x, `dtype="auto"`). */
  readonly defaultDtype: 'float32' | 'config';
  /**
   * The rules of the Llama variations (Qwen3, Gemma 1-3, Phi-3) at this release; a family is
   * absent where its code was not read (the builders refuse it).
   */
  readonly families: Readonly<Partial<Record<VariantFamilyName, FamilyRules>>>;
}

/** One variant of a rule: the first release it holds for (until the next variant's) and where it was read. */
export interface ReleaseVariant {
  /** First release it holds for; it holds until the next variant's `from`. */
  readonly from: string;
  readonly value: unknown;
  /** File(s) of transformers it was read from, relative to src/transformers. */
  readonly source: string;
  /** What the code does, in a few words. */
  readonly says: string;
}

/** A behaviour that differs between releases: a named rule, the HFRules field it sets, its variants in release order. */
export interface ReleaseRule {
  readonly name: string;
  /** Dotted path in {@link HFRules} (`rotary.llama`). */
  readonly field: string;
  readonly variants: readonly ReleaseVariant[];
}

/**
 * The release ranges whose modeling code was read: 4.40.0 – 4.57.6 (4.40.2 from its tag, the
 * 4.41 – 4.56 release branch points of upstream's history, the 4.57.6 wheel) and 5.17.0 –
 * 5.18.0 (wheels). 5.0 – 5.16 were not readable and are refused.
 */
export const TRANSFORMERS_RANGES: readonly (readonly [string, string])[] = deepFreeze([
  ['4.40.0', '4.57.6'],
  ['5.17.0', '5.18.0'],
]);

/** Releases whose modeling code was read or measured; the last is the default. */
export const TRANSFORMERS_RELEASES = deepFreeze(['4.40.2', '4.57.6', '5.17.0', '5.18.0'] as const);

/** The release vram-ts follows when none is asked for: the newest whose code was read. */
export const DEFAULT_TRANSFORMERS = '5.18.0';

const LLAMA = 'models/llama/modeling_llama.py';
const MISTRAL = 'models/mistral/modeling_mistral.py';
const QWEN2 = 'models/qwen2/modeling_qwen2.py';
const GPT2 = 'models/gpt2/modeling_gpt2.py';
const GEMMA = 'models/gemma/modeling_gemma.py';

/** What every Llama variation of 5.x does: rotary once per forward (original_inv_freq kept), masking_utils, upcast inside ForCausalLMLoss. */
const FAMILY_5X: FamilyRules = {
  rotary: { placement: 'model', originalInvFreq: true },
  mask: 'masking-utils',
  logitsUpcast: 'loss',
  loss: 'pad-shift',
  defaultAttention: 'sdpa',
  embedScale: 'embedding',
};

/**
 * The variations of Llama as transformers 4.57 runs them (read in 4.57.6): Llama 4.5x's rotary
 * module once per forward (`original_inv_freq` an attribute, not a buffer), masking_utils,
 * ForCausalLMLoss; Gemma 1 and 2 scale the embeddings in the model by a 0-dim tensor of the
 * activations' dtype, Gemma 3 in its scaled embedding module.
 */
const FAMILY_457: FamilyRules = { ...FAMILY_5X, rotary: { placement: 'model' }, embedScale: 'model' };

const v = (from: string, value: unknown, source: string, says: string): ReleaseVariant => ({ from, value, source, says });

/**
 * Every behaviour of Hugging Face's causal LMs that changes memory and changed between the
 * releases read, with the release range of each variant and the file it was read from
 * (docs/transformers-releases.md is generated from this table). Ranges follow upstream's
 * release branch points; patch releases between 4.41 and 4.56 were not read one by one.
 */
export const TRANSFORMERS_RULES: readonly ReleaseRule[] = deepFreeze([
  {
    name: 'Llama rotary placement and buffers',
    field: 'rotary.llama',
    variants: [
      v(
        '4.40.0',
        { placement: 'attention', unusedTables: true },
        LLAMA,
        'each LlamaAttention computes cos/sin from inv_freq; its rotary module also registers _cos_cached/_sin_cached [max_position_embeddings, head_dim] (never read)',
      ),
      v('4.41.0', { placement: 'attention' }, LLAMA, 'per-layer rotary, the cached tables removed'),
      v(
        '4.43.0',
        { placement: 'model', layerModule: true },
        LLAMA,
        'LlamaModel.rotary_emb once per forward; every attention still builds a rotary module (inv_freq) for backward compatibility',
      ),
      v('4.48.0', { placement: 'model' }, LLAMA, 'once per forward in the model only'),
      v('5.17.0', { placement: 'model', originalInvFreq: true }, LLAMA, 'once per forward; the module also keeps original_inv_freq'),
    ],
  },
  {
    name: 'Qwen2 rotary placement and buffers',
    field: 'rotary.qwen2',
    variants: [
      v(
        '4.40.0',
        { placement: 'attention-cached' },
        QWEN2,
        'every attention slices cos_cached/sin_cached [max_position_embeddings, head_dim] and gathers them at position_ids',
      ),
      v('4.45.0', { placement: 'model', layerModule: true }, QWEN2, 'Qwen2Model.rotary_emb once per forward; a leftover rotary module per attention'),
      v('4.48.0', { placement: 'model' }, QWEN2, 'once per forward in the model only'),
      v('5.17.0', { placement: 'model', originalInvFreq: true }, QWEN2, 'once per forward; original_inv_freq kept'),
    ],
  },
  {
    name: 'Mistral rotary placement and buffers',
    field: 'rotary.mistral',
    variants: [
      v('4.40.0', { placement: 'attention-cached' }, MISTRAL, 'every attention slices cos_cached/sin_cached and gathers them at position_ids'),
      v('4.42.0', { placement: 'attention' }, MISTRAL, 'every attention computes cos/sin from inv_freq'),
      v('4.48.0', { placement: 'model' }, MISTRAL, 'once per forward in the model'),
      v('5.17.0', { placement: 'model', originalInvFreq: true }, MISTRAL, 'once per forward; original_inv_freq kept'),
    ],
  },
  {
    name: 'Llama eager causal mask',
    field: 'mask.llama',
    variants: [
      v(
        '4.40.0',
        'update-causal-mask',
        `${LLAMA} (_update_causal_mask)`,
        'one [S, S+1] mask in the activations dtype (torch.full, triu, *=), expanded over the batch',
      ),
      v('4.53.0', 'masking-utils', 'masking_utils.py (create_causal_mask, eager_mask)', 'torch.where materialises a float [B, 1, S, S]'),
    ],
  },
  {
    name: 'Qwen2 eager causal mask',
    field: 'mask.qwen2',
    variants: [
      v(
        '4.40.0',
        'make-causal-mask',
        'modeling_attn_mask_utils.py (_make_causal_mask)',
        'a float32 [S, S] mask (sliding window applied in place) cast to the dtype, expanded',
      ),
      v('4.42.0', 'update-causal-mask', `${QWEN2} (_update_causal_mask)`, 'Llama-style [S, S+1] mask, expanded'),
      v('4.53.0', 'masking-utils', 'masking_utils.py', 'a float [B, 1, S, S]'),
    ],
  },
  {
    name: 'Mistral eager causal mask',
    field: 'mask.mistral',
    variants: [
      v(
        '4.40.0',
        'make-causal-mask',
        'modeling_attn_mask_utils.py (_make_causal_mask)',
        'a float32 [S, S] mask with the sliding window, cast to the dtype, expanded',
      ),
      v('4.42.0', 'update-causal-mask', `${MISTRAL} (_update_causal_mask)`, 'Llama-style [S, S+1] mask, expanded'),
      v('4.53.0', 'masking-utils', 'masking_utils.py (create_sliding_window_causal_mask)', 'a float [B, 1, S, S]'),
    ],
  },
  {
    name: 'GPT-2 causal mask',
    field: 'mask.gpt2',
    variants: [
      v('4.40.0', 'none', GPT2, 'the bool bias buffer and torch.where only'),
      v('4.55.0', 'masking-utils', `${GPT2}, masking_utils.py`, 'create_causal_mask adds a float [B, 1, S, S] in eager attention'),
    ],
  },
  {
    name: 'GPT-2 mask buffers',
    field: 'gpt2MaskBuffers',
    variants: [
      v('4.40.0', true, GPT2, 'every GPT2Attention registers bool bias [1, 1, n_positions, n_positions] and masked_bias (non-persistent)'),
      v('5.17.0', false, GPT2, 'no bias/masked_bias buffers; scaling precomputed'),
    ],
  },
  {
    name: 'Attention code and the lifetime of its tensors',
    field: 'attentionCode',
    variants: [
      v(
        '4.40.0',
        'inline',
        LLAMA,
        'attention computed in LlamaAttention.forward: q, k, v (repeated) and the weights are locals until it returns; attn_weights = None after o_proj',
      ),
      v(
        '4.48.0',
        'function',
        `${LLAMA} (eager_attention_forward)`,
        'the repeated k/v are locals of eager_attention_forward; the weights are returned and held by the decoder layer until it returns',
      ),
    ],
  },
  {
    name: 'GPT-2 attention weights',
    field: 'gpt2Weights',
    variants: [
      v('4.40.0', 'attention', GPT2, 'attn_weights is a local of GPT2Attention.forward'),
      v('4.52.0', 'block', GPT2, 'attn_output, self_attn_weights = self.attn(...): held until the block returns'),
    ],
  },
  {
    name: 'Logits upcast to float32',
    field: 'logitsUpcast',
    variants: [
      v(
        '4.40.0',
        { llama: 'always', qwen2: 'always', mistral: 'always', gpt2: 'never' },
        `${LLAMA}, ${GPT2}`,
        'logits = logits.float() on every forward (Llama family); GPT-2 never',
      ),
      v(
        '4.46.0',
        { llama: 'loss', qwen2: 'loss', mistral: 'labels', gpt2: 'never' },
        `${LLAMA}, ${MISTRAL}, loss/loss_utils.py`,
        'Llama/Qwen2: inside ForCausalLMLoss; Mistral: in the model when labels are given',
      ),
      v('4.48.0', { llama: 'loss', qwen2: 'loss', mistral: 'loss', gpt2: 'never' }, 'loss/loss_utils.py', 'inside ForCausalLMLoss; GPT-2 never'),
      v(
        '4.49.0',
        { llama: 'loss', qwen2: 'loss', mistral: 'loss', gpt2: 'loss' },
        `loss/loss_utils.py, ${GPT2}`,
        'inside ForCausalLMLoss, GPT-2 too (self.loss_function)',
      ),
    ],
  },
  {
    name: 'Causal-LM loss',
    field: 'loss',
    variants: [
      v(
        '4.40.0',
        { llama: 'shift', qwen2: 'shift', mistral: 'shift', gpt2: 'shift' },
        'models/*/modeling_*.py, loss/loss_utils.py (4.46+)',
        'shift_logits = logits[..., :-1, :].contiguous(); shift_labels = labels[..., 1:].contiguous(); cross-entropy',
      ),
      v(
        '4.49.0',
        { llama: 'pad-shift', qwen2: 'pad-shift', mistral: 'pad-shift', gpt2: 'pad-shift' },
        'loss/loss_utils.py (ForCausalLMLoss)',
        'labels = F.pad(labels, (0, 1), value=-100); shift_labels = labels[..., 1:].contiguous(); logits.view(-1, V): no copy of the logits',
      ),
    ],
  },
  {
    name: 'KV cache update',
    field: 'cache',
    variants: [
      v(
        '4.40.0',
        'alias',
        'cache_utils.py (DynamicCache.update)',
        "the first update appends the key/value tensors themselves (GPT-2: views of c_attn's output)",
      ),
      v('4.56.0', 'copy', 'cache_utils.py (DynamicLayer.update)', 'torch.cat onto an empty tensor: the cache holds copies'),
    ],
  },
  {
    name: 'sdpa with grouped-query attention',
    field: 'sdpaGqa',
    variants: [
      v('4.40.0', 'repeat', `${LLAMA}, integrations/sdpa_attention.py`, 'repeat_kv materialises k/v for every head before SDPA'),
      v('4.54.0', 'enable-gqa', 'integrations/sdpa_attention.py (use_gqa_in_sdpa)', 'enable_gqa=True without a mask (PyTorch ≥ 2.5): no repeat'),
    ],
  },
  {
    name: 'sdpa mask without a cache object',
    field: 'packedSequenceMask',
    variants: [
      v('4.40.0', false, 'modeling_attn_mask_utils.py', 'no packed-sequence detection'),
      v(
        '4.57.0',
        true,
        'masking_utils.py (_preprocess_mask_arguments, find_packed_sequence_indices; 4.57.6)',
        'without past_key_values the packed-sequence mask is a tensor even when nothing is packed: allow_is_causal_skip=False, the bool mask built (4.53 – 4.56 not read)',
      ),
      v('5.0.0', false, 'masking_utils.py (find_packed_sequence_indices returns None when unpacked; 5.18.0)', 'the skip holds without a cache object'),
    ],
  },
  {
    name: 'sdpa GQA head_dim limit',
    field: 'gqaHeadDimMax',
    variants: [
      v('4.40.0', undefined, 'integrations/sdpa_attention.py', 'no head_dim condition'),
      v('5.17.0', 256, 'integrations/sdpa_attention.py', 'enable_gqa only when head_dim ≤ 256'),
    ],
  },
  {
    name: 'sdpa contiguous inputs',
    field: 'sdpaContiguous',
    variants: [
      v('4.40.0', 'cuda-with-mask', LLAMA, 'q/k/v.contiguous() only on CUDA with a mask'),
      v('4.48.0', 'always', 'integrations/sdpa_attention.py', 'q/k/v.contiguous() always'),
      v('4.56.0', 'never', 'integrations/sdpa_attention.py', 'no .contiguous()'),
    ],
  },
  {
    name: 'head_dim read from the config',
    field: 'readsHeadDim',
    variants: [
      v('4.40.0', [], 'models/*/modeling_*.py', 'head_dim = hidden_size // num_attention_heads'),
      v('4.43.0', ['mistral'], MISTRAL, 'Mistral reads head_dim'),
      v('4.45.0', ['llama', 'mistral'], LLAMA, 'Llama reads head_dim too'),
      v('4.48.0', ['llama', 'mistral', 'qwen2'], QWEN2, 'Qwen2 reads head_dim too'),
    ],
  },
  {
    name: 'mlp_bias read from the config',
    field: 'readsMlpBias',
    variants: [v('4.40.0', [], LLAMA, 'LlamaMLP without bias whatever the config says'), v('4.41.0', ['llama'], LLAMA, 'bias=config.mlp_bias')],
  },
  {
    name: 'Default attention implementation',
    field: 'defaultAttention',
    variants: [
      v(
        '4.40.0',
        { llama: 'sdpa', qwen2: 'sdpa', mistral: 'sdpa', gpt2: 'eager' },
        'modeling_utils.py (_check_and_enable_sdpa)',
        'sdpa when PyTorch ≥ 2.1.1 and the class supports it; GPT-2 has no sdpa class',
      ),
      v('4.42.0', { llama: 'sdpa', qwen2: 'sdpa', mistral: 'sdpa', gpt2: 'sdpa' }, 'modeling_utils.py', 'sdpa for all four'),
    ],
  },
  {
    name: 'Default dtype of from_pretrained',
    field: 'defaultDtype',
    variants: [
      v('4.40.0', 'float32', 'modeling_utils.py', 'float32 unless torch_dtype (4.56+: dtype) is given; "auto" reads the config'),
      v('5.17.0', 'config', 'modeling_utils.py', 'dtype="auto" by default: the config\'s dtype'),
    ],
  },
  {
    name: 'Gemma rules',
    field: 'families.gemma',
    variants: [
      v(
        '4.40.0',
        {
          rotary: { placement: 'attention' },
          mask: 'update-causal-mask',
          logitsUpcast: 'always',
          loss: 'shift',
          defaultAttention: 'sdpa',
          embedScale: 'model',
        },
        `${GEMMA} (GemmaRotaryEmbedding, _update_causal_mask, GemmaForCausalLM)`,
        'rotary per attention (inv_freq made at the first forward); Llama-style mask; logits.float() on every forward; shifted copies into the loss; embeddings scaled in GemmaModel by torch.tensor(sqrt(H)) in the activations dtype',
      ),
      v('4.41.0', undefined, GEMMA, 'not read from 4.41 to 4.56: refused'),
      v(
        '4.57.0',
        FAMILY_457,
        `${GEMMA} (4.57.6), masking_utils.py`,
        'rotary once per forward; embeddings scaled in GemmaModel by torch.tensor(sqrt(H)); masking_utils; ForCausalLMLoss',
      ),
      v('5.0.0', undefined, GEMMA, '5.0 – 5.16 not read: refused'),
      v(
        '5.17.0',
        FAMILY_5X,
        `${GEMMA} (GemmaTextScaledWordEmbedding, GemmaRotaryEmbedding), masking_utils.py, loss/loss_utils.py`,
        'rotary once per forward; embeddings scaled inside embed_tokens by the 0-dim buffer embed_scale; masking_utils; ForCausalLMLoss',
      ),
    ],
  },
  {
    name: 'Qwen3 rules',
    field: 'families.qwen3',
    variants: [
      v('4.40.0', undefined, 'models/qwen3/modeling_qwen3.py', 'Qwen3 arrived in 4.51; 4.51 – 4.56 not read: refused'),
      v('4.57.0', FAMILY_457, 'models/qwen3/modeling_qwen3.py (4.57.6)', 'Llama 4.5x with q_norm/k_norm on the projections before the transpose'),
      v('5.0.0', undefined, 'models/qwen3/modeling_qwen3.py', '5.0 – 5.16 not read: refused'),
      v('5.17.0', FAMILY_5X, 'models/qwen3/modeling_qwen3.py', 'Llama 5.x with q_norm/k_norm (RMSNorm over head_dim) on the projections before the transpose'),
    ],
  },
  {
    name: 'Gemma 2 rules',
    field: 'families.gemma2',
    variants: [
      v('4.40.0', undefined, 'models/gemma2/modeling_gemma2.py', 'Gemma 2 arrived in 4.42; 4.42 – 4.56 not read: refused'),
      v(
        '4.57.0',
        { ...FAMILY_457, noTrainingCache: true, everyMaskType: true },
        'models/gemma2/modeling_gemma2.py (4.57.6), masking_utils.py',
        'as 5.x, the embeddings scaled in the model (normalizer); no DynamicCache in training',
      ),
      v('5.0.0', undefined, 'models/gemma2/modeling_gemma2.py', '5.0 – 5.16 not read: refused'),
      v(
        '5.17.0',
        { ...FAMILY_5X, everyMaskType: true },
        'models/gemma2/modeling_gemma2.py, masking_utils.py',
        'Gemma norms and scaled embedding, four norms per layer, attention-logit and final-logit soft-capping (tanh), one causal and one sliding-window mask per forward for the layer_types',
      ),
    ],
  },
  {
    name: 'Gemma 3 (text) rules',
    field: 'families.gemma3_text',
    variants: [
      v('4.40.0', undefined, 'models/gemma3/modeling_gemma3.py', 'Gemma 3 arrived in 4.50; 4.50 – 4.56 not read: refused'),
      v(
        '4.57.0',
        { ...FAMILY_457, embedScale: 'embedding', noTrainingCache: true, localRotaryModule: true, everyMaskType: true },
        'models/gemma3/modeling_gemma3.py (4.57.6), masking_utils.py',
        "as 5.x (Gemma3TextScaledWordEmbedding's embed_scale buffer), the rotary inv_freq without original_inv_freq; no DynamicCache in training; rotary_emb and rotary_emb_local both run, the full and the sliding mask both built, whatever the layer types",
      ),
      v('5.0.0', undefined, 'models/gemma3/modeling_gemma3.py', '5.0 – 5.16 not read: refused'),
      v(
        '5.17.0',
        { ...FAMILY_5X, everyMaskType: true },
        'models/gemma3/modeling_gemma3.py, masking_utils.py',
        'Gemma 2 layers with q_norm/k_norm after the transpose; one rotary table pair per layer type present (local rope base for sliding layers); the full and the sliding mask both built',
      ),
    ],
  },
  {
    name: 'Phi-3 rules',
    field: 'families.phi3',
    variants: [
      v('4.40.0', undefined, 'models/phi3/modeling_phi3.py', 'Phi-3 is not in 4.40.2 (4.41 – 4.56 not read): refused'),
      v('4.57.0', FAMILY_457, 'models/phi3/modeling_phi3.py (4.57.6)', 'as 5.x: fused qkv_proj and gate_up_proj, partial rotary by cat'),
      v('5.0.0', undefined, 'models/phi3/modeling_phi3.py', '5.0 – 5.16 not read: refused'),
      v(
        '5.17.0',
        FAMILY_5X,
        'models/phi3/modeling_phi3.py',
        'fused qkv_proj (registered after o_proj) and gate_up_proj (chunked views), rotary on a slice [..., :rot] then cat with the rest, residual dropouts',
      ),
    ],
  },
]);

/** A release as [major, minor, patch]. */
function parse(version: string): [number, number, number] | null {
  const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(version);
  return m === null ? null : [Number(m[1]), Number(m[2]), Number(m[3])];
}

function compare(a: string, b: string): number {
  const x = parse(a)!;
  const y = parse(b)!;
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
}

function within(version: string, from: string, to: string | undefined): boolean {
  return compare(version, from) >= 0 && (to === undefined || compare(version, to) <= 0);
}

/**
 * The rules of one transformers release (`'4.40.2'`), each variant picked by its release
 * range; a VramError for a release whose code was not read (the readable ranges are listed).
 *
 * @example
 * ```ts
 * import { transformersRules } from 'vram-ts';
 * console.log(transformersRules('4.40.2').rotary.llama.placement, transformersRules('5.18.0').cache); // attention copy
 * ```
 */
export function transformersRules(version: string = DEFAULT_TRANSFORMERS, path: readonly (string | number)[] = ['transformers']): HFRules {
  validate(path, arrayOf(anyOf([string, number(-Number.MAX_VALUE)], 'a name or an index'), { max: 64 }), ['transformersRules', 'path']);
  const readable = typeof version === 'string' && parse(version) !== null && TRANSFORMERS_RANGES.some(([from, to]) => within(version, from, to));
  if (!readable) {
    fail('unsupported-release', 'transformers release whose code was not read', {
      path,
      expected: TRANSFORMERS_RANGES.map(([a, b]) => `${a} – ${b}`).join(' or '),
      received: show(version),
    });
  }
  const rules: Record<string, unknown> = { release: version };
  for (const rule of TRANSFORMERS_RULES) {
    const variant = [...rule.variants].reverse().find((x) => compare(version, x.from) >= 0);
    if (variant === undefined) fail('internal', `no variant of ${rule.name} for ${version}`, { path });
    const [head, key] = rule.field.split('.') as [string, string | undefined];
    if (key === undefined) {
      if (variant.value !== undefined) rules[head] = variant.value;
    } else rules[head] = { ...(rules[head] as object | undefined), [key]: variant.value };
  }
  return rules as unknown as HFRules;
}
