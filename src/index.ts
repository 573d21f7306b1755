/**
 * `vram-ts`: what a user calls. Build a model (the nn builders) or take one from a catalog, then
 * estimate, fit and plan it, and report the result. The op rules and simulation pieces the
 * library is built from live in `vram-ts/internals`.
 *
 * @packageDocumentation
 * @module vram-ts
 */
export { VramError, type VramIssue } from './errors.js';
export * from './sym/index.js';
export { DTYPE_BITS, bytesOf, isDType, isFloating, type DType } from './tensor/dtype.js';
export { numel, specBytes, tensor, type TensorSpec } from './tensor/spec.js';

// Estimate, fit, plan.
export { estimate, traceModel } from './estimate.js';
export type { ByteCounts, Estimate, EstimateOptions, ModuleRow, ParamCounts, PeakDetails, Precision, StepSummary } from './estimate-types.js';
export {
  fits,
  gpuCapacity,
  maxFitting,
  usableMemory,
  type FitOptions,
  type FitResult,
  type FitVerdict,
  type UsableMemory,
  type UsableMemoryOptions,
} from './fit.js';
export { estimateRanks, type RankFigures } from './ranks.js';
export {
  advise,
  type AdviseBaseline,
  type AdviseFigures,
  type AdviseOptions,
  type AdviseResult,
  type LeverCost,
  type LeverCostKind,
  type LeverResult,
} from './advise.js';
export { gpusOf, plan, type Layout, type PlanOptions, type PlanResult } from './plan.js';
export type { Device, Framework } from './ops/types.js';
export type { CheckpointPlan, LoraPlan } from './trace/trace.js';
export type { IR, IRModule, IROp, IRRegion, IRStorage, IRTensor, TensorRole, TraceSettings } from './trace/ir.js';

// Build a model.
export type {
  BranchLayer,
  ContextParallelBuild,
  DecoderRoles,
  GraphBuilder,
  GraphLayer,
  Layer,
  LayerOptions,
  LmHead,
  Merge,
  ModelMeta,
  ModuleLayer,
  OpLayer,
  QuantizationPlan,
  RepeatedBlocks,
  ResidualLayer,
  SeqLayer,
  TensorParallelBuild,
  TensorRef,
} from './nn/types.js';
export { adaptiveAvgPool2d } from './nn/adaptiveAvgPool2d.js';
export { adaptiveMaxPool2d } from './nn/adaptiveMaxPool2d.js';
export { attention, type AttentionImpl, type AttentionOptions } from './nn/attention.js';
export { avgPool2d } from './nn/avgPool2d.js';
export { bn, type BatchNorm2dOptions } from './nn/bn.js';
export { branch, type BranchOptions } from './nn/branch.js';
export { conv1d, type Conv1dOptions } from './nn/conv1d.js';
export { conv2d, type Conv2dOptions } from './nn/conv2d.js';
export { convTranspose2d, type ConvTranspose2dOptions } from './nn/convTranspose2d.js';
export { dropout } from './nn/dropout.js';
export { embedding } from './nn/embedding.js';
export { flatten } from './nn/flatten.js';
export { functional } from './nn/functional.js';
export { gelu } from './nn/gelu.js';
export { graph } from './nn/graph.js';
export { groupNorm } from './nn/groupNorm.js';
export { hardsigmoid } from './nn/hardsigmoid.js';
export { hardswish } from './nn/hardswish.js';
export { hfActivation, type HFActivation } from './nn/hfActivation.js';
export { identity } from './nn/identity.js';
export { interpolate, upsample } from './nn/upsample.js';
export { layerNorm } from './nn/layerNorm.js';
export { layerNorm2d } from './nn/layerNorm2d.js';
export { linear, type LinearOptions } from './nn/linear.js';
export { maxPool2d } from './nn/maxPool2d.js';
export { gatedMlp, mlp, type GatedMlpOptions, type MlpOptions } from './nn/mlp.js';
export { mlaAttention, type MlaOptions } from './nn/mla.js';
export { module } from './nn/module.js';
export { moeBlock, type MoeBlockOptions, type MoeRouting } from './nn/moe.js';
export { multiheadAttention, type MultiheadAttentionOptions } from './nn/multiheadAttention.js';
export { parameter } from './nn/parameter.js';
export { relu } from './nn/relu.js';
export { relu6 } from './nn/relu6.js';
export { repeat } from './nn/repeat.js';
export { repeatedBlocks } from './nn/repeated.js';
export { residual, type ResidualOptions } from './nn/residual.js';
export { rmsNorm, type RmsNormOptions } from './nn/rmsNorm.js';
export { seq, type SeqOptions } from './nn/seq.js';
export { sigmoid } from './nn/sigmoid.js';
export { silu } from './nn/silu.js';
export { squeezeExcitation, type SqueezeExcitationOptions } from './nn/squeezeExcitation.js';
export { stochasticDepth } from './nn/stochasticDepth.js';
export { tanh } from './nn/tanh.js';
// The attributes the builders' options carry (a builder's options are its op's attributes and a name).
export type { ActivationAttrs } from './ops/activation.js';
export type { BatchNorm2dAttrs } from './ops/batchnorm2d.js';
export type { Conv1dAttrs } from './ops/conv1d.js';
export type { Conv2dAttrs } from './ops/conv2d.js';
export type { ConvTranspose2dAttrs } from './ops/convTranspose2d.js';
export type { DropoutAttrs } from './ops/dropout.js';
export type { EmbeddingAttrs } from './ops/embedding.js';
export type { GroupNormAttrs } from './ops/groupNorm.js';
export type { LayerNormAttrs } from './ops/layerNorm.js';
export type { LayerNorm2dAttrs } from './ops/layerNorm2d.js';
export type { LinearAttrs } from './ops/linear.js';
export type { ExpertsImpl } from './ops/moe/index.js';
export type { ParameterAttrs } from './ops/parameter.js';
export type { AdaptiveAvgPool2dAttrs, AdaptiveMaxPool2dAttrs, Pool2dAttrs } from './ops/pool2d.js';
export type { QuantScheme } from './ops/quant.js';
export type { FlattenAttrs } from './ops/shape.js';
export type { StochasticDepthAttrs } from './ops/stochasticDepth.js';
export type { UpsampleAttrs } from './ops/upsample.js';

// The op rules graph()'s builder calls (`g.call(rule, inputs, attrs)`) for data flow a module cannot
// express: views, matmul, softmax, scalar and elementwise arithmetic, concatenation.
export {
  copyOp,
  expandOp,
  permuteOp,
  selectOp,
  sliceOp,
  transposeOp,
  viewOp,
  type CopyAttrs,
  type PermuteAttrs,
  type SelectAttrs,
  type SliceAttrs,
  type TransposeAttrs,
  type ViewAttrs,
} from './ops/view.js';
export { matmulOp } from './ops/matmul.js';
export { addScalarOp, mulScalarOp, softmaxOp, type ScalarAttrs, type SoftmaxAttrs } from './ops/pointwise.js';
export { addOp, catOp, mulOp, type CatAttrs, type ElementwiseAttrs } from './ops/merge.js';

// Catalogs.
export { mobilenetV3Large, mobilenetV3Small, type MobileNetV3Options } from './catalog/mobilenetv3.js';
export { VISION_MODELS, vision } from './catalog/vision.js';
export type { VisionOptions } from './catalog/vision/options.js';
export { unet, type UNetOptions } from './catalog/unet.js';
export { llamaFamily, type DecoderOptions, type LlamaShape } from './catalog/llama.js';
export type { TensorParallelOptions } from './catalog/tensor-parallel.js';
export type { ContextParallelOptions } from './catalog/context-parallel.js';
export { gpt2Model, type Gpt2Shape } from './catalog/gpt2.js';
export { fromHFConfig, HF_MODEL_TYPES, type HFConfig, type HFConfigOptions } from './catalog/hf.js';
export { activeParams, wholeParams, MOE_FAMILIES, moeFromHFConfig, type MoeFamily } from './catalog/moe.js';
export type { MoeOptions } from './catalog/experts.js';
export { deepseekFromHFConfig } from './catalog/deepseek.js';
export {
  DEFAULT_TRANSFORMERS,
  TRANSFORMERS_RANGES,
  TRANSFORMERS_RELEASES,
  transformersRules,
  type FamilyRules,
  type HFFamily,
  type HFRules,
  type LlamaFamilyName,
  type MaskRule,
  type ReleaseRule,
  type ReleaseVariant,
  type RotaryRule,
  type VariantFamilyName,
} from './catalog/transformers.js';
export { LLMS, llm, type LlmEntry } from './catalog/llms/index.js';
export { fromHub, type HubCache, type HubCacheEntry, type HubCheckpoint, type HubCheckpointFile, type HubModel, type HubOptions } from './hub/index.js';

// Many GPUs.
export type { Engine, ParallelPlan } from './parallel/plan.js';
export type { CommonPlan } from './parallel/engines/engine.js';
export type { DdpKnobs } from './parallel/engines/ddp.js';
export type { DeepSpeedKnobs } from './parallel/engines/deepspeed/index.js';
export type { Fsdp2Knobs } from './parallel/engines/fsdp2.js';
export type { Fsdp2UnitGroup, Fsdp2UnitSpec } from './parallel/engines/fsdp2-units.js';
export type { MegatronKnobs } from './parallel/engines/megatron.js';
export { DEFAULT_ENGINE, ENGINE_NAMES } from './parallel/engines/index.js';
export type { PipelineSchedule } from './parallel/pipeline/schedules.js';
export type { HostBytes } from './memory/residency/types.js';
export {
  CLOSED_FORM_SOURCES,
  deepspeedZero2,
  deepspeedZero3,
  megatronPaddedVocab,
  megatronTheoretical,
  zeroPaper,
  type DeepSpeedEstimate,
  type MegatronArgs,
  type MegatronFigures,
  type ZeroPaperFigures,
} from './parallel/closed-forms.js';
// Other tools' config files.
export {
  fromDeepSpeedConfig,
  type DeepSpeedContext,
  type DeepSpeedIgnored,
  type DeepSpeedKnobValues,
  type DeepSpeedOptions,
  type DeepSpeedReading,
  type DeepSpeedSource,
  type DeepSpeedTrainerContext,
} from './config/deepspeed.js';
export {
  fromTrainingArguments,
  type TrainingArgumentsContext,
  type TrainingArgumentsOptions,
  type TrainingArgumentsReading,
} from './config/training-args.js';
export {
  fromAccelerateConfig,
  type AccelerateContext,
  type AccelerateNote,
  type AccelerateOptions,
  type AccelerateReading,
} from './config/accelerate.js';

// LLM inference and RL.
export { decoderMeta, kvCache, type KvCacheOptions } from './scenarios/kv-cache.js';
export { generation, type GenerationEstimate, type GenerationOptions, type GenerationPhase } from './scenarios/generation.js';

// Rollout engines: vLLM's KV-cache pool at start-up.
export {
  DEFAULT_VLLM,
  VLLM_RELEASES,
  vllmEngine,
  vllmPageBytes,
  type KvCacheDtype,
  type VllmEngine,
  type VllmMeasured,
  type VllmOptions,
  type VllmSettings,
} from './rollout/vllm.js';
export { sglangEngine, type SglangEngine, type SglangOptions } from './rollout/sglang.js';

// Trainers: transformers' Trainer, TRL's SFTTrainer and GRPOTrainer, from their own arguments.
export {
  DEFAULT_TRL,
  TRL_RELEASES,
  resolveTrainerArgs,
  trainerFields,
  type LoraConfig,
  type ResolvedTrainerArgs,
  type TrainerArgs,
  type TrainerFields,
  type TrainerKind,
} from './trainers/args.js';
export { fromTrlConfig, MODEL_CONFIG_FIELDS, type TrlScriptConfig } from './trainers/model-config.js';
export type { TrainerOptions, TrainerPhase, TrainerPhaseName, TrainerResident, TrainerStepEstimate } from './trainers/step.js';
export { trainerStep, type TrainerStepOptions } from './trainers/trainer.js';
export { sftStep, type SftStepOptions } from './trainers/sft.js';
export { grpoStep, type GrpoStepEstimate, type GrpoStepOptions } from './trainers/grpo.js';

// Whole RL jobs: a trainer and its rollout engine as TRL, verl and OpenRLHF place them.
export { adviseRl, type AdviseRlFigures, type AdviseRlResult, type RlLeverResult } from './advise-rl.js';
export { rlJob, type RlEngineTrainer, type RlFramework, type RlJob, type RlJobOptions, type RlPhase, type RlRollout, type RlTrlTrainer } from './jobs/rl.js';
export { korthikanti, type KorthikantiOptions } from './scenarios/korthikanti.js';

// Reports and charts.
export { formatBreakdown, formatBreakdownMarkdown } from './report/breakdown.js';
export { formatTorchinfo, type TorchinfoColumn, type TorchinfoOptions } from './report/torchinfo.js';
export { formatTorchsummary, type TorchsummaryOptions } from './report/torchsummary.js';
export { summary, type SummaryFormat, type SummaryOptions } from './report/summary.js';
export { formatBytes, formatCount } from './report/units.js';
export { explain, formatExplain, type ExplainTerm } from './report/explain.js';
export { estimateToJSON } from './report/json.js';
export { safetensorsSummary, type SafetensorsCheck, type SafetensorsSummary } from './report/safetensors.js';
export { breakdownSvg, timelineSvg, type ChartOptions } from './report/svg.js';

// GPUs and the run time around a step.
export {
  GPUS,
  gpu,
  memoryBudget,
  torchCapacity,
  type CapacityFigure,
  type CapacityPrecision,
  type GpuFamily,
  type GpuSpec,
  type TorchCapacity,
} from './gpus/catalog.js';
export { CONTEXT_DEFAULTS, runtimeLines, type RuntimeLine, type RuntimeOptions } from './memory/runtime.js';
export { NCCL_CONSTANTS, ncclConnectionBytes, ncclLines, type NcclGroup, type NcclLine, type NcclNvlsOptions, type NcclOptions } from './memory/nccl.js';
export { formatSize, replayAllocator, roundSize, type AllocatorOom, type AllocatorOptions, type AllocatorReplay } from './memory/allocator.js';
export { parseAllocConf, type AllocConf } from './memory/alloc-conf.js';
export type { OptimizerImpl, OptimizerName, OptimizerSpec } from './memory/optimizers.js';
export { CATEGORIES, type Category, type PeakPoint, type Phase, type StepProgram, type TimelineEvent } from './memory/ledger.js';
