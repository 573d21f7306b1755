/**
 * TRL's GRPOTrainer step without vLLM (TRL 1.13 grpo_trainer.py), phase by phase: generation
 * (`model.generate` under accelerate's autocast: the prefill with `logits_to_keep=1`, the decode
 * steps growing the DynamicCache), the old-policy and reference log-probabilities (no-grad
 * passes in chunks of `per_device_train_batch_size`), then per micro-batch the loss forward and
 * backward, clipping, the optimizer and `zero_grad`.
 */
import type { Estimate, EstimateOptions } from '../estimate-types.js';
import { blockBytes } from '../memory/ledger.js';
import type { ModuleLayer } from '../nn/types.js';
import type { Device } from '../ops/types.js';
import { kvCache } from '../scenarios/kv-cache.js';
import { vllmEngine, type VllmEngine, type VllmOptions } from '../rollout/vllm.js';
import { fail } from '../errors.js';
import { resolveTrainerArgs, type ResolvedTrainerArgs, type TrainerArgs } from './args.js';
import { anything, integer, number, object, oneOf, string } from '../validate.js';
import {
  layersOf,
  releaseOptions,
  runStep,
  stepInputs,
  stepOptions,
  withHead,
  type TrainerOptions,
  type TrainerPhase,
  type TrainerStepEstimate,
} from './step.js';
import { peakOf, residentOf, trainerPhases } from './trainer.js';

/** Options of {@link grpoStep}. */
export interface GrpoStepOptions extends TrainerOptions {
  /** Prompt tokens (every prompt this long after the chat template: the left-padded prompt batch). */
  readonly prompt: number;
  /** With `use_vllm` in colocate mode: the GPU's total memory as vLLM reads it (`torch.cuda.mem_get_info()[1]`), in bytes. */
  readonly gpuTotalBytes?: number;
  /** With `use_vllm` in colocate mode: the vLLM release and what it measured at start-up (vllmEngine's options). */
  readonly vllm?: Pick<VllmOptions, 'release' | 'measured' | 'dtype'>;
}

/** A GRPO step: the generation step's phases (a step without generation runs only the loss phases). */
export interface GrpoStepEstimate extends TrainerStepEstimate {
  /** Completions generated at once (`per_device_train_batch_size × steps_per_generation`). */
  readonly generationBatch: number;
  /** Optimizer steps between two generations (`steps_per_generation × num_iterations` micro-steps). */
  readonly generateEvery: number;
  /** The KV cache at the last decode step. */
  readonly kvCache: number;
  /** The colocated vLLM engine TRL builds (use_vllm, colocate mode). */
  readonly engine?: VllmEngine;
}

function bytes(n: number, device: Device): number {
  return blockBytes(n, device === 'cuda') as number;
}

/**
 * What a generation leaves buffered (`_buffered_inputs`, split into `steps_per_generation`
 * micro-batches): prompt and completion ids and masks (int64), the advantages, and the old-policy
 * and reference log-probabilities when they were computed.
 */
export function bufferedBytes(r: ResolvedTrainerArgs, prompt: number, device: Device, oldLogps: boolean): number {
  const g = r.grpo!;
  const n = g.generationBatchSize;
  const L = g.maxCompletionLength;
  const parts = r.grpo!.stepsPerGeneration;
  const per = (rows: number, width: number, size: number) => parts * bytes((rows / parts) * width * size, device);
  let total = 2 * per(n, prompt, 8) + 2 * per(n, L, 8) + per(n, 1, 4) + parts * bytes(8, device);
  if (oldLogps) total += per(n, L, 4);
  if (g.beta !== 0) total += per(n, L, 4);
  // vLLM's sampling log-probabilities and the importance-sampling ratio (one per sequence in the default sequence modes).
  if (g.vllm?.importanceSampling === true) total += per(n, L, 4) + per(n, 1, 4);
  return total;
}

/** The highest live bytes of a no-grad forward up to its logits' return (the forward and the first op after it), above its baseline. */
function forwardWindow(e: Estimate<number>): number {
  let peak = 0;
  for (const t of e.timeline) {
    if (t.phase === 'forward') peak = Math.max(peak, t.live as number);
    else if (t.phase === 'loss') {
      peak = Math.max(peak, t.live as number);
      break;
    }
  }
  return peak - (e.steps.inference!.baseline as number);
}

/**
 * The decode step's attention over the whole cache, which a one-token forward of the model alone
 * does not see: with fewer key/value heads than query heads, `repeat_kv` copies one layer's cached
 * keys and values to every head ([G, heads, T, head_dim] each, float32 as the cache is); eager
 * attention then holds the scores [G, heads, 1, T] and their scaled copy (measured: torch 2.13 CPU).
 */
export function decodeAttention(model: ModuleLayer, G: number, positions: number, amp: boolean, device: Device): number {
  const m = model.meta!;
  if (m.attention === 'flash') return 0;
  const scores = m.attention === 'eager' ? 2 * bytes(G * m.heads * positions * 4, device) : 0;
  // Under autocast the matmul casts its float32 operand (the repeated or cached keys, then values) to 16 bits.
  const cast = (heads: number) => (amp ? bytes(G * heads * positions * m.headDim * 2, device) : 0);
  if (m.kvHeads >= m.heads) return scores + cast(m.kvHeads);
  // One key/value head: the reshape of the expanded view is a view still, and matmul copies the keys,
  // then the values; more: repeat_kv's reshape copies both, alive together.
  const one = bytes(G * m.heads * positions * m.headDim * 4, device);
  return (m.kvHeads === 1 ? one : 2 * one) + scores + cast(m.heads);
}

/** A one-token forward's highest live bytes inside attention (its `self_attn` ops), above its baseline: what the cache's attention runs beside. */
function attentionAbove(e: Estimate<number>): number {
  const base = e.steps.inference!.baseline as number;
  let peak = base;
  for (const t of e.timeline) if (t.phase === 'forward' && t.label.includes('.self_attn')) peak = Math.max(peak, t.live as number);
  return peak - base;
}

/**
 * What sampling one token holds (transformers 5.18 generation/utils.py `_sample`, logits_process.py),
 * in float32 [G, V] tensors S: `next_token_logits` (a copy of the last position's logits), the
 * processed scores (new tensors when a processor or the temperature's division runs), the
 * softmax's probabilities — the previous step's still bound while the next forward runs (`held`).
 * With min_new_tokens, two processors each make `arange(V)` (int64), its `isin` mask, a clone of
 * the scores and `torch.where`; the peak (`sampling`) is at the second one: the previous scores and
 * probabilities, the forward's logits, the new copy, both `where` results and the second clone.
 */
export function samplingBytes(G: number, V: number, g: NonNullable<ResolvedTrainerArgs['grpo']>, device: Device): { held: number; sampling: number } {
  const S = bytes(G * V * 4, device);
  const processed = g.minNewTokens > 0 || g.temperature !== 1;
  const held = S + (processed ? S : 0) + S;
  if (g.minNewTokens > 0) return { held, sampling: 7 * S + bytes(V * 8, device) + bytes(V, device) };
  return { held, sampling: g.temperature !== 1 ? 5 * S : 4 * S };
}

/** A no-grad forward's peak above its weights and input (what the pass adds to what is resident). */
function forwardAbove(e: Estimate<number>): number {
  return e.bytes.peak - (e.steps.inference!.baseline as number);
}

/** model.generate's phases (use_vllm=False): the prefill, then the last decode step. */
function generatePhases(c: {
  readonly model: ModuleLayer;
  readonly r: ResolvedTrainerArgs;
  readonly G: number;
  readonly V: number;
  readonly prompt: number;
  readonly length: number;
  readonly layers: number;
  readonly generationBase: number;
  readonly inference: (m: ModuleLayer, input: readonly [number, number], extra?: Partial<EstimateOptions>) => Estimate<number>;
  readonly device: Device;
}): TrainerPhase[] {
  const { model, r, G, V, prompt, length, layers, generationBase, inference, device } = c;
  const g = r.grpo!;
  // A PeftModel's generate calls the base model's forward, which accelerate did not wrap in autocast: float32.
  const amp = r.bf16 && r.lora === undefined;
  const prefillModel = withHead(model, { kind: 'logits', keep: 1, autocast: amp }, 'grpoStep');
  const precision = { precision: amp ? 'amp-bf16' : 'fp32' } as const;
  const prefill = inference(prefillModel, [G, prompt], precision);
  const decode = inference(prefillModel, [G, 1], precision);
  // Under autocast the keys come out of rotary in float32 (cos/sin are the hidden states' dtype), and
  // DynamicLayer makes the value cache in the keys' dtype (cache_utils.py:124-147): float32 throughout.
  const cacheEnd = kvCache(model, { batch: G, seq: length - 1, dtype: 'float32' });
  // DynamicLayer.update: `keys = torch.cat([keys, new])`, then the values: one layer's old keys (the larger half) live beside the new ones.
  const growing = kvCache(model, { batch: G, seq: length - 2, dtype: 'float32' }) / layers / 2;
  const attention = attentionAbove(decode) + decodeAttention(model, G, length - 1, amp, device);
  const sampling = samplingBytes(G, V, g, device);
  const ids = 2 * bytes(G * length * 8, device);
  return [
    {
      name: 'prefill',
      start: generationBase,
      peak: generationBase + forwardAbove(prefill) + 2 * bytes(G * prompt * 8, device),
      detail: `model.generate's first forward over ${G} × ${prompt} prompt tokens (logits_to_keep=1), the cache filled`,
    },
    {
      name: 'decode',
      start: generationBase,
      peak: generationBase + cacheEnd + ids + Math.max(sampling.held + Math.max(growing, forwardAbove(decode), attention), sampling.sampling),
      detail: `the last decode step: the DynamicCache of ${G} × ${length - 1} positions and one layer's keys and values grown by torch.cat`,
    },
  ];
}

/**
 * The engine TRL 1.13 builds in colocate mode (trl/generation/vllm_generation.py l.347-366,
 * grpo_trainer.py l.1108-1111): `LLM(gpu_memory_utilization, max_model_len=vllm_max_model_length,
 * max_num_seqs = per_device_train_batch_size × vllm_tensor_parallel_size × steps_per_generation,
 * max_num_batched_tokens=4096, enable_sleep_mode)` in the trainer's process, on the GPU's total memory.
 *
 * @example
 * ```ts
 * import { llm, resolveTrainerArgs } from 'vram-ts';
 * import { trlEngine } from 'vram-ts/internals';
 * const r = resolveTrainerArgs('grpo', { use_vllm: true, per_device_train_batch_size: 8 });
 * console.log(trlEngine(llm('qwen2.5-0.5b'), r, { prompt: 256, gpuTotalBytes: 80 * 2 ** 30 }).settings.maxNumSeqs); // 8
 * ```
 */
export function trlEngine(model: ModuleLayer, r: ResolvedTrainerArgs, options: GrpoStepOptions): VllmEngine {
  const v = r.grpo!.vllm!;
  const total = options.gpuTotalBytes;
  if (total === undefined || !(total > 0))
    fail('bad-option', "vLLM colocated sizes itself from the GPU's total memory: give options.gpuTotalBytes (torch.cuda.mem_get_info()[1])", {
      path: ['options', 'gpuTotalBytes'],
      received: String(total),
    });
  return vllmEngine(model, {
    totalBytes: total,
    gpuMemoryUtilization: v.gpuMemoryUtilization,
    ...(v.maxModelLength !== null ? { maxModelLen: v.maxModelLength } : {}),
    maxNumSeqs: r.batch * r.grpo!.stepsPerGeneration,
    maxNumBatchedTokens: 4096,
    entrypoint: 'llm',
    ...(options.vllm ?? {}),
  });
}

/** grpoStep's own options (beside trl, peft and device). */
const GRPO_OPTIONS = {
  prompt: integer(1),
  gpuTotalBytes: number(1),
  // vllmEngine checks `measured` when the engine is built.
  vllm: object({ fields: { release: string, measured: anything, dtype: oneOf(['auto', 'bfloat16', 'float16', 'float32'], 'dtype') } }),
};

/**
 * One GRPOTrainer step with generation, from GRPOConfig's own fields (`per_device_train_batch_size`,
 * `gradient_accumulation_steps`, `num_generations`, `max_completion_length`, `beta` (default 0:
 * no reference model), `temperature`, `num_iterations`, `steps_per_generation`, `loss_type`,
 * `gradient_checkpointing` (default on), `bf16` (default on), `optim`, `max_grad_norm`) and
 * PEFT's LoraConfig as `options.peft` (the reference is then the model with its adapters
 * disabled). `options.prompt` is the prompt length.
 *
 * @example
 * ```ts
 * import { grpoStep, llm } from 'vram-ts';
 * const g = grpoStep(llm('qwen2.5-0.5b'), { per_device_train_batch_size: 8, max_completion_length: 1024 }, { prompt: 256 });
 * console.log(g.phases.map((p) => p.name).join(' ')); // prefill decode forward backward clip optimizer zero_grad
 * ```
 */
export function grpoStep(model: ModuleLayer, config: TrainerArgs, options: GrpoStepOptions): GrpoStepEstimate {
  stepInputs(model, options, GRPO_OPTIONS, ['prompt'], 'grpoStep');
  const r = resolveTrainerArgs('grpo', config, releaseOptions(options));
  const g = r.grpo!;
  const device = options.device ?? 'cuda';
  const prompt = options.prompt;
  const L = g.maxCompletionLength;
  const length = prompt + L;
  const layers = layersOf(model);
  const train = stepOptions(r, [r.batch, length], device, r.accumulation, layers);
  const { microBatches: _m, optimizer: _o, checkpoint: _c, timeline: _t, ...common } = train;
  const inference = (m: ModuleLayer, input: readonly [number, number], extra: Partial<EstimateOptions> = {}) =>
    runStep(m, { ...common, ...extra, input, mode: 'inference', timeline: true });

  const generateEvery = g.stepsPerGeneration * g.numIterations;
  // With vLLM and its importance-sampling correction (the default) the old-policy pass always runs (grpo_trainer.py:2664).
  const oldLogps = r.accumulation % generateEvery !== 0 || g.vllm?.importanceSampling === true;
  // The loss step: per-token log-probabilities of the completion, entropy, the clipped loss.
  const lossModel = withHead(
    model,
    { kind: 'token-logps', keep: L, entropy: true, loss: 'grpo', beta: g.beta !== 0, autocast: r.bf16, useCache: false },
    'grpoStep',
  );
  const e = runStep(lossModel, train);
  const buffered = bufferedBytes(r, prompt, device, oldLogps);
  // compute_loss: torch.cat of prompt and completion ids (the model's input) and of the masks.
  const extra = buffered + bytes(r.batch * length * 8, device);
  const { phases: lossPhases, between } = trainerPhases(e, r, extra, device, buffered);
  const weights = e.bytes.parameters + e.bytes.buffers;
  const reference = g.beta !== 0 && r.lora === undefined ? weights : 0;

  const G = g.generationBatchSize;
  const V = model.meta!.vocab;
  const generationBase = between + reference;
  // use_vllm: vLLM generates (colocate: on this GPU, its util × total held from start-up through the step, TRL
  // without sleep mode; server: on another GPU); otherwise model.generate (prefill, decode).
  const vllm = g.vllm;
  const colocated = vllm?.mode === 'colocate' ? trlEngine(model, r, options) : undefined;
  // Between generations the engine keeps its weights and KV tensors (or, asleep at level 2, only
  // non-torch memory and graphs); its freed activations are this process's cached blocks, which the
  // trainer reuses.
  const engine = colocated === undefined ? 0 : vllm!.sleepMode ? colocated.resident.asleep : colocated.resident.idle;
  const phases: TrainerPhase[] =
    vllm === undefined
      ? generatePhases({ model, r, G, V, prompt, length, layers, generationBase, inference, device })
      : colocated !== undefined
        ? [
            {
              name: 'weight_sync',
              start: generationBase + engine + (vllm.sleepMode ? colocated.weights : 0),
              peak: generationBase + engine + (vllm.sleepMode ? colocated.weights : 0),
              detail: `the policy's weights copied into vLLM's (load_weights, one parameter at a time)${vllm.sleepMode ? "; sleep mode: wake_up(tags=['weights']) first" : ''}`,
            },
            {
              name: 'rollout',
              start: generationBase + colocated.footprint,
              peak: generationBase + colocated.footprint + 2 * bytes(G * length * 8, device),
              detail: `vLLM colocated: ceil(${vllm.gpuMemoryUtilization} × the GPU's ${(colocated.totalBytes / 2 ** 30).toFixed(2)} GiB) while it generates (weights, KV pool, activations, non-torch memory)`,
            },
          ]
        : [];
  const logpsModel = withHead(model, { kind: 'token-logps', keep: L, autocast: r.bf16, useCache: false }, 'grpoStep');
  const pass = (name: 'old_logps' | 'ref_logps', detail: string, adapters: boolean) => {
    const { lora: _lora, ...base } = common;
    // The reference: PEFT's model with its adapters disabled (every weight frozen: autocast casts them afresh), or a second model.
    const reference = r.lora !== undefined ? { freeze: ['model', 'lm_head'] } : {};
    const est = adapters
      ? inference(logpsModel, [r.batch, length])
      : runStep(logpsModel, { ...base, ...reference, input: [r.batch, length], mode: 'inference', timeline: true });
    const results = bytes(G * L * 4, device);
    // From the second chunk on, the previous chunk's `outputs.logits` and `logits / temperature` stay
    // bound through the next forward, until its logits come back and the names are rebound.
    const previous = G > r.batch ? bytes(r.batch * (L + 1) * V * 4, device) + bytes(r.batch * L * V * 4, device) : 0;
    const above = Math.max(forwardAbove(est), previous + forwardWindow(est));
    phases.push({ name, start: generationBase + engine, peak: generationBase + engine + above + results + bytes(G * length * 8, device) * 2, detail });
  };
  if (oldLogps) pass('old_logps', `the policy's no-grad log-probabilities of the ${G} completions, ${r.batch} at a time`, true);
  if (g.beta !== 0)
    pass('ref_logps', `the reference's no-grad log-probabilities${r.lora !== undefined ? ' (adapters disabled)' : ''}, ${r.batch} at a time`, false);
  phases.push(...lossPhases.map((p) => ({ ...p, start: p.start + reference + engine, peak: p.peak + reference + engine })));
  return {
    trainer: 'grpo',
    args: r,
    params: e.params,
    resident: { ...residentOf(e, buffered, reference), rollout: engine },
    phases,
    ...peakOf(phases),
    between: between + reference + engine,
    generationBatch: G,
    generateEvery,
    kvCache: vllm === undefined ? kvCache(model, { batch: G, seq: length - 1, dtype: 'float32' }) : 0,
    ...(colocated !== undefined ? { engine: colocated } : {}),
  };
}
