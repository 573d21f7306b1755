/*
 * The keys of a DeepSpeed config that vram-ts accepts without modelling them: each with what
 * DeepSpeed does with it and why the GPU's memory does not move, or with the one value (DeepSpeed's
 * default) that vram-ts's engine models. Sources: deepspeedai/DeepSpeed edaa7221,
 * rc = deepspeed/runtime/config.py, rcst = deepspeed/runtime/constants.py,
 * zc = deepspeed/runtime/zero/config.py, oc = deepspeed/runtime/zero/offload_config.py,
 * pc = deepspeed/runtime/precision_config.py.
 */

/** How a key vram-ts does not read into the plan is taken. */
export type KeyRule =
  /** Accepted at any value: it moves no GPU memory. */
  | { readonly kind: 'ignore'; readonly why: string }
  /** Accepted at DeepSpeed's default (the behaviour vram-ts models); any other value is not modelled. */
  | { readonly kind: 'default'; readonly value: unknown; readonly why: string }
  /** A section accepted while its `enabled` is false (its default); enabled, it is not modelled. */
  | { readonly kind: 'enabled'; readonly why: string }
  /** Accepted only absent (or null): present, it is not modelled. */
  | { readonly kind: 'absent'; readonly why: string };

// The tables' calls are marked pure so that a bundle which never reads a config drops them (tsup emits one chunk).
const ignore = (why: string): KeyRule => ({ kind: 'ignore', why });
const byDefault = (value: unknown, why: string): KeyRule => ({ kind: 'default', value, why });
const enabled = (why: string): KeyRule => ({ kind: 'enabled', why });
const absent = (why: string): KeyRule => ({ kind: 'absent', why });

/** The top-level keys DeepSpeed reads (rc `_initialize_params`, rcst) other than the ones the reader maps. */
export const TOP_LEVEL: Readonly<Record<string, KeyRule>> = {
  steps_per_print: /* @__PURE__ */ ignore('logging cadence (rc get_steps_per_print)'),
  wall_clock_breakdown: /* @__PURE__ */ ignore('timers on the host'),
  dump_state: /* @__PURE__ */ ignore('prints the engine state once'),
  memory_breakdown: /* @__PURE__ */ ignore('prints memory use'),
  scheduler: /* @__PURE__ */ ignore('the learning-rate schedule: host scalars'),
  gradient_clipping: /* @__PURE__ */ ignore(
    'the ZeRO optimizers compute the gradient norm every step either way (the norm copies vram-ts models); clipping scales in place',
  ),
  gradient_predivide_factor: /* @__PURE__ */ ignore('a scalar the gradients are divided by, in place'),
  gradient_allreduce_op: /* @__PURE__ */ ignore('mean or sum: the same buffers'),
  prescale_gradients: /* @__PURE__ */ byDefault(false, 'prescaled reductions (false by default, rcst PRESCALE_GRADIENTS_DEFAULT)'),
  zero_allow_untested_optimizer: /* @__PURE__ */ ignore('a permission: lets ZeRO wrap a torch.optim optimizer'),
  zero_force_ds_cpu_optimizer: /* @__PURE__ */ ignore('a permission: whether offload insists on DeepSpeedCPUAdam'),
  communication_data_type: /* @__PURE__ */ byDefault(null, 'the gradient reductions in another dtype (none by default: the gradients own)'),
  seq_parallel_communication_data_type: /* @__PURE__ */ ignore('sequence-parallel collectives (no DeepSpeed sequence parallelism in the plan)'),
  disable_allgather: /* @__PURE__ */ ignore('read into the config (rc:804) and used by nothing else at this commit'),
  sparse_gradients: /* @__PURE__ */ byDefault(false, 'sparse embedding gradients (false by default)'),
  graph_harvesting: /* @__PURE__ */ byDefault(false, 'CUDA-graph harvesting (false by default)'),
  managed_gradient_accumulation: /* @__PURE__ */ byDefault(true, 'the engine dividing the loss by the accumulation steps (true by default)'),
  use_data_before_expert_parallelism: /* @__PURE__ */ ignore('the order of process groups'),
  allgather_size: /* @__PURE__ */ ignore('the deprecated boolean zero_optimization format’s all-gather bucket (stages 1/2 gather in place)'),
  tensorboard: /* @__PURE__ */ ignore('a monitor: logs scalars'),
  wandb: /* @__PURE__ */ ignore('a monitor: logs scalars'),
  csv_monitor: /* @__PURE__ */ ignore('a monitor: logs scalars'),
  comet: /* @__PURE__ */ ignore('a monitor: logs scalars'),
  comms_logger: /* @__PURE__ */ ignore('logs collective calls'),
  flops_profiler: /* @__PURE__ */ ignore('counts FLOPs with module hooks, no tensors'),
  checkpoint: /* @__PURE__ */ ignore('how checkpoints are written (outside the training step)'),
  nebula: /* @__PURE__ */ ignore('a checkpoint engine (outside the training step)'),
  datastates: /* @__PURE__ */ ignore('a checkpoint engine (outside the training step)'),
  dataloader_drop_last: /* @__PURE__ */ ignore('the data loader'),
  log_level: /* @__PURE__ */ ignore('logging'),
  timers: /* @__PURE__ */ ignore('timers on the host'),
  autotuning: /* @__PURE__ */ ignore('read by the autotuner launcher, not by the engine'),
  aio: /* @__PURE__ */ ignore('NVMe I/O (offload to NVMe is refused where it is asked for)'),
  pipeline: /* @__PURE__ */ ignore('the PipelineEngine’s settings, read only for a PipelineModule'),
  amp: /* @__PURE__ */ enabled('NVIDIA apex AMP'),
  torch_autocast: /* @__PURE__ */ enabled('DeepSpeed’s own torch.autocast'),
  elasticity: /* @__PURE__ */ enabled('elastic training rewrites the batch sizes'),
  eigenvalue: /* @__PURE__ */ enabled('eigenvalue computation'),
  progressive_layer_drop: /* @__PURE__ */ enabled('progressive layer dropping'),
  curriculum_learning: /* @__PURE__ */ enabled('legacy curriculum learning (changes the sequence length)'),
  data_efficiency: /* @__PURE__ */ enabled('data efficiency (curriculum and random-LTD)'),
  hybrid_engine: /* @__PURE__ */ enabled('the RLHF hybrid engine'),
  compile: /* @__PURE__ */ enabled('torch.compile through DeepSpeed'),
  compression_training: /* @__PURE__ */ absent('compression training (quantisation, pruning)'),
  sparse_attention: /* @__PURE__ */ absent('DeepSpeed sparse attention kernels'),
  weight_quantization: /* @__PURE__ */ absent('weight quantisation'),
  tensor_parallel: /* @__PURE__ */ absent('AutoTP tensor parallelism'),
  expert_parallel: /* @__PURE__ */ absent('DeepSpeed expert parallelism'),
};

/** `zero_optimization` keys (zc DeepSpeedZeroConfig) other than the ones the reader maps; aliases both ways (populate_by_name). */
export const ZERO: Readonly<Record<string, KeyRule>> = {
  contiguous_gradients: /* @__PURE__ */ byDefault(true, 'gradients copied into the contiguous IPG bucket (true by default, zc:100)'),
  reduce_scatter: /* @__PURE__ */ byDefault(true, 'reduce-scatter instead of all-reduce (true by default, zc:106)'),
  use_multi_rank_bucket_allreduce: /* @__PURE__ */ byDefault(true, 'a bucket spanning several ranks all-reduced at once (true by default, zc:118)'),
  allgather_partitions: /* @__PURE__ */ byDefault(true, 'all-gather instead of broadcasts (true by default, zc:126)'),
  allgather_bucket_size: /* @__PURE__ */ ignore(
    'stages 1/2 gather the updated partitions in place (runtime/utils.py all_gather_dp_groups: views of the flat buffer); ZeRO-3 does not read it',
  ),
  load_from_fp32_weights: /* @__PURE__ */ ignore('checkpoint loading'),
  elastic_checkpoint: /* @__PURE__ */ ignore('checkpoint loading'),
  ignore_unused_parameters: /* @__PURE__ */ ignore('an error check'),
  legacy_stage1: /* @__PURE__ */ byDefault(false, 'the legacy stage-1 implementation (false by default)'),
  round_robin_gradients: /* @__PURE__ */ byDefault(false, 'round-robin gradient copies under offload (false by default)'),
  gather_16bit_weights_on_model_save: /* @__PURE__ */ ignore('gathers the weights when the model is saved, outside the training step'),
  stage3_gather_16bit_weights_on_model_save: /* @__PURE__ */ ignore('gathers the weights when the model is saved, outside the training step'),
  stage3_gather_fp16_weights_on_model_save: /* @__PURE__ */ ignore('deprecated name of gather_16bit_weights_on_model_save: the model save'),
  module_granularity_threshold: /* @__PURE__ */ byDefault(0, 'fine-grained modules fetched as one unit (0 by default: off)'),
  stage3_module_granularity_threshold: /* @__PURE__ */ byDefault(0, 'fine-grained modules fetched as one unit (0 by default: off)'),
  use_all_reduce_for_fetch_params: /* @__PURE__ */ byDefault(false, 'parameters fetched by all-reduce (false by default)'),
  stage3_use_all_reduce_for_fetch_params: /* @__PURE__ */ byDefault(false, 'parameters fetched by all-reduce (false by default)'),
  allgather_sequential: /* @__PURE__ */ byDefault(false, 'parameters gathered one by one without the flat buffer (false by default)'),
  stage3_allgather_sequential: /* @__PURE__ */ byDefault(false, 'parameters gathered one by one without the flat buffer (false by default)'),
  zero_hpz_partition_size: /* @__PURE__ */ byDefault(1, 'ZeRO++ hierarchical partitioning, a secondary parameter copy (1 by default: off)'),
  zero_quantized_weights: /* @__PURE__ */ byDefault(false, 'ZeRO++ quantised weight gathers (false by default)'),
  zero_quantized_nontrainable_weights: /* @__PURE__ */ byDefault(false, 'frozen weights stored quantised (false by default)'),
  zero_quantized_gradients: /* @__PURE__ */ byDefault(false, 'ZeRO++ quantised gradient reductions (false by default)'),
  zeropp_loco_param: /* @__PURE__ */ byDefault(null, 'LoCo-ZeRO++ error buffers (none by default)'),
  mics_shard_size: /* @__PURE__ */ byDefault(-1, 'MiCS sharding groups (-1 by default: off)'),
  mics_hierarchical_params_gather: /* @__PURE__ */ byDefault(false, 'MiCS hierarchical gathers (false by default)'),
  memory_efficient_linear: /* @__PURE__ */ byDefault(true, 'ZeRO-3’s LinearFunctionForZeroStage3 (true by default)'),
  pipeline_loading_checkpoint: /* @__PURE__ */ ignore('checkpoint loading'),
  override_module_apply: /* @__PURE__ */ ignore('patches nn.Module.apply (no tensors)'),
  log_trace_cache_warnings: /* @__PURE__ */ ignore('logging'),
  enable_sanity_checks: /* @__PURE__ */ ignore('debug checks'),
  save_muon_momentum_buffer_in_memory: /* @__PURE__ */ ignore('NVMe offload of Muon only'),
  cpu_offload_use_pin_memory: /* @__PURE__ */ ignore('deprecated: page-locked host memory, the same bytes'),
  zenflow: /* @__PURE__ */ byDefault(null, 'ZenFlow (none by default)'),
  leaf_module: /* @__PURE__ */ absent('ZeRO-3 leaf modules (fetched whole)'),
};

/** `offload_optimizer` keys (oc DeepSpeedZeroOffloadOptimizerConfig) besides `device`. */
export const OFFLOAD_OPTIMIZER: Readonly<Record<string, KeyRule>> = {
  nvme_path: /* @__PURE__ */ ignore('NVMe only'),
  buffer_count: /* @__PURE__ */ ignore('NVMe swap buffers only'),
  pin_memory: /* @__PURE__ */ ignore('page-locked host memory: the same bytes'),
  pipeline_read: /* @__PURE__ */ ignore('NVMe tile reads only'),
  pipeline_write: /* @__PURE__ */ ignore('NVMe tile writes only'),
  fast_init: /* @__PURE__ */ ignore('NVMe initialisation only'),
  ratio: /* @__PURE__ */ byDefault(1, 'partial offload (1.0 by default: all of it)'),
  super_offload: /* @__PURE__ */ byDefault(false, 'SuperOffload for superchips (false by default)'),
  cpuadam_cores_perc: /* @__PURE__ */ ignore('host cores for SuperOffload'),
};

/** `offload_param` keys (oc DeepSpeedZeroOffloadParamConfig) besides `device`. */
export const OFFLOAD_PARAM: Readonly<Record<string, KeyRule>> = {
  nvme_path: /* @__PURE__ */ ignore('NVMe only'),
  buffer_count: /* @__PURE__ */ ignore('NVMe buffers only'),
  buffer_size: /* @__PURE__ */ ignore('NVMe buffers only'),
  max_in_cpu: /* @__PURE__ */ ignore('NVMe only'),
  pin_memory: /* @__PURE__ */ ignore('page-locked host memory: the same bytes'),
};

/** `bf16` (or its old name `bfloat16`) keys besides `enabled` (pc DeepSpeedBF16Config). */
export const BF16: Readonly<Record<string, KeyRule>> = {
  immediate_grad_update: /* @__PURE__ */ ignore('when the bf16 gradients are applied (BF16_Optimizer, stage 0)'),
  check_grad_overflow: /* @__PURE__ */ ignore('an overflow check on the norm'),
  bf16_master_weights_and_grads: /* @__PURE__ */ byDefault(false, 'a bf16 master and bf16 gradients in ZeRO (false by default: fp32)'),
  bf16_optimizer_states: /* @__PURE__ */ byDefault(false, 'bf16 optimizer states (false by default: fp32)'),
};

/** `fp16` keys besides `enabled` (pc DeepSpeedFP16Config). */
export const FP16: Readonly<Record<string, KeyRule>> = {
  auto_cast: /* @__PURE__ */ byDefault(false, 'inputs cast to fp16 (false by default)'),
  loss_scale: /* @__PURE__ */ ignore('the loss scale: a scalar'),
  initial_scale_power: /* @__PURE__ */ ignore('the loss scale: a scalar'),
  loss_scale_window: /* @__PURE__ */ ignore('the loss scale: a scalar'),
  hysteresis: /* @__PURE__ */ ignore('the loss scale: a scalar'),
  consecutive_hysteresis: /* @__PURE__ */ ignore('the loss scale: a scalar'),
  min_loss_scale: /* @__PURE__ */ ignore('the loss scale: a scalar'),
  fp16_master_weights_and_grads: /* @__PURE__ */ byDefault(false, 'an fp16 master (false by default: fp32)'),
};

/** `activation_checkpointing` keys (runtime/activation_checkpointing/config.py): read only by models checkpointing through deepspeed.checkpointing. */
export const ACTIVATION_CHECKPOINTING: Readonly<Record<string, KeyRule>> = {
  partition_activations: /* @__PURE__ */ byDefault(false, 'deepspeed.checkpointing partitions the saved activations over model-parallel ranks'),
  contiguous_memory_optimization: /* @__PURE__ */ byDefault(false, 'deepspeed.checkpointing copies the saved activations into one buffer'),
  cpu_checkpointing: /* @__PURE__ */ byDefault(false, 'deepspeed.checkpointing keeps the saved activations on the host'),
  number_checkpoints: /* @__PURE__ */ ignore('sizes the contiguous buffer, used only with contiguous_memory_optimization'),
  synchronize_checkpoint_boundary: /* @__PURE__ */ ignore('a CUDA synchronize'),
  profile: /* @__PURE__ */ ignore('timers'),
};

/** `data_types` keys (rc get_data_types_params). */
export const DATA_TYPES: Readonly<Record<string, KeyRule>> = {
  grad_accum_dtype: /* @__PURE__ */ byDefault(null, 'the gradient accumulation dtype (none by default: the parameters’)'),
  param_dtype: /* @__PURE__ */ byDefault(null, 'a parameter dtype of its own (none by default)'),
  buffer_dtype: /* @__PURE__ */ byDefault(null, 'a buffer dtype of its own (none by default)'),
};

/** DeepSpeed's built-in optimizers (rc DEEPSPEED_OPTIMIZERS, matched lower-cased) that vram-ts does not model. */
export const UNMODELLED_OPTIMIZERS: readonly string[] = ['adagrad', 'lamb', 'onebitadam', 'zerooneadam', 'onebitlamb', 'muadam', 'muadamw', 'musgd', 'muon'];

/** torch.optim's optimizers (DeepSpeed builds any other type as `getattr(torch.optim, type)`, eng:2237) that vram-ts does not model. */
export const UNMODELLED_TORCH_OPTIMIZERS: readonly string[] = [
  'Adadelta',
  'Adafactor',
  'Adagrad',
  'Adamax',
  'ASGD',
  'LBFGS',
  'NAdam',
  'RAdam',
  'RMSprop',
  'Rprop',
  'SparseAdam',
];
