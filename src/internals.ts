/**
 * `vram-ts/internals`: the pieces the library is built from, for tests, tools and advanced users.
 * Every op rule beyond the few `graph()` needs (those are in `vram-ts`), the op-rule contract,
 * the tracer and the IR's analysis helpers, and the helpers of the catalogs, of the engines and
 * of the memory model. No compatibility promise beyond the package's version.
 *
 * It re-exports `vram-ts` too, so a tool imports everything from one place, and so that the build
 * puts the whole library in one chunk under both entries: one copy (a VramError from either passes
 * the other's `instanceof`), and `vram-ts` bundles as it would alone.
 *
 * @packageDocumentation
 * @module vram-ts/internals
 */
export * from './index.js';

// The op-rule contract.
export type { BackwardPlan, GradKind, GradNeeds, KernelStep, OpContext, OpResult, OpRule, OwnedTensor, SavedRef } from './ops/types.js';
export { opLayer } from './nn/op.js';

// Op rules (graph()'s own set is public, in vram-ts).
export { activationOp, type ActivationKind } from './ops/activation.js';
export { batchNorm2dOp } from './ops/batchnorm2d.js';
export {
  allGatherOp,
  allReduceOp,
  globalViewOp,
  parallelLogSoftmaxOp,
  parallelNllLossOp,
  reduceScatterOp,
  tpCopyOp,
  vocabEmbeddingOp,
  type CollectiveAttrs,
  type GlobalViewAttrs,
  type VocabEmbeddingAttrs,
} from './ops/collective.js';
export { conv1dOp } from './ops/conv1d.js';
export { conv2dOp } from './ops/conv2d.js';
export { convTranspose2dOp } from './ops/convTranspose2d.js';
export { dropoutOp } from './ops/dropout.js';
export { groupNormOp } from './ops/groupNorm.js';
export { layerNormOp } from './ops/layerNorm.js';
export { layerNorm2dOp } from './ops/layerNorm2d.js';
export { linearOp } from './ops/linear.js';
export {
  balancedCounts,
  capacityCounts,
  expertMaskOp,
  expertOp,
  expertParallelRouterOp,
  gluOp,
  groupedDownOp,
  groupedGateUpOp,
  routerOp,
  type ExpertAttrs,
  type ExpertMaskAttrs,
  type ExpertParallelRouterAttrs,
  type GroupedExpertsAttrs,
  type RouterAttrs,
} from './ops/moe/index.js';
export { parameterOp } from './ops/parameter.js';
export { adaptiveAvgPool2dOp, adaptiveMaxPool2dOp, avgPool2dOp, maxPool2dOp, poolOutput } from './ops/pool2d.js';
export { BNB4_BLOCK, BNB4_NESTED_BLOCK, quantizedWeight, type QuantizedWeight } from './ops/quant.js';
export { contextShardOp, ringSdpaOp, type ContextShardAttrs, type RingAttentionAttrs } from './ops/ring-attention.js';
export { flattenOp, identityOp } from './ops/shape.js';
export { stochasticDepthOp } from './ops/stochasticDepth.js';
export { upsampleOp } from './ops/upsample.js';
export { copyUnlessOne } from './ops/view.js';

// The tracer and the IR's analysis helpers.
export { trace, type TraceOptions } from './trace/trace.js';
export { parameterOrder, tensorUses, type TensorUses } from './trace/uses.js';
export { savedStorages, type SavedStorages } from './memory/saved.js';

// Catalog helpers.
export { makeDivisible } from './catalog/mobilenetv3.js';
export { builtTensorParallel, chunkRows, localDecoderSizes, type LocalDecoderSizes } from './catalog/tensor-parallel.js';
export { builtContextParallel, contextParallelBuild } from './catalog/context-parallel.js';
export { builtExpertParallel } from './catalog/moe.js';
export { mlaCachePerToken } from './catalog/deepseek.js';
export { TRANSFORMERS_RULES } from './catalog/transformers.js';
export { HF_ACTIVATIONS } from './nn/hfActivation.js';

// Engines and the memory model.
export { ENGINES, type EngineEnv, type EngineRecord } from './parallel/engines/index.js';
export type { DdpPlan } from './parallel/engines/ddp.js';
export type { DeepSpeedPlan } from './parallel/engines/deepspeed/index.js';
export type { Fsdp2Plan } from './parallel/engines/fsdp2.js';
export type { MegatronPlan } from './parallel/engines/megatron.js';
export type { EngineHooks, RankContext, Residency } from './memory/residency/types.js';
export type { Check, Path } from './validate.js';
export type { Ledger, RankFamily } from './memory/ledger.js';
export type { Plan as StepPlan } from './memory/step-plan.js';
export { megatronBuffers, megatronShard, type MegatronBuffer, type MegatronPlacement, type MegatronSettings } from './parallel/engines/megatron.js';
export { inFlight, pipelineActions, type PipelineAction } from './parallel/pipeline/schedules.js';
export { pipelineRankModel, type PipelineCut, type PipelineRankModel, type RankStage } from './parallel/pipeline/stages.js';
export { BNB_BLOCK_SIZE, BNB_MIN_8BIT_SIZE, paramUpdate, type OptimizedParam, type ParamUpdate, type StateTensor } from './memory/optimizers.js';
export { cublasWorkspace } from './memory/runtime.js';

// Report helpers.
export { torchsummaryDecomposition, type TorchsummaryDecomposition } from './report/breakdown.js';
export { safetensorsHeaderLength } from './report/safetensors.js';

// Rollout engines' pieces: vLLM's weights and profiling run.
export { offloadedBytes, vllmModelWeights, vllmWeights, type VllmWeights } from './rollout/vllm-weights.js';
export { vllmProfilePeak, type VllmProfile, type VllmProfileInput } from './rollout/vllm-profile.js';
export { trlEngine } from './trainers/grpo.js';
