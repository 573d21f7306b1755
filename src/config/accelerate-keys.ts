/*
 * The keys of an `accelerate config` YAML file (accelerate 1.15.0) that move no GPU memory, each
 * with what accelerate does with it. Sources, accelerate 1.15.0 (the wheel; huggingface/accelerate):
 * ca = accelerate/commands/config/config_args.py, cl = accelerate/commands/launch.py,
 * ul = accelerate/utils/launch.py, dc = accelerate/utils/dataclasses.py, acc = accelerate/accelerator.py.
 */

/** Top-level keys (ClusterConfig, ca:178-217) accepted at any value, and why they move no memory. */
export const NEUTRAL_TOP: Readonly<Record<string, string>> = {
  debug: 'ACCELERATE_DEBUG_MODE: collective shapes checked across ranks (ul:258-259), no tensors kept',
  machine_rank: 'which machine this is (torchrun --node_rank, ul:219)',
  main_process_ip: 'the rendezvous address (ul:221-224)',
  main_process_port: 'the rendezvous port (ul:206-210)',
  rdzv_backend: 'the torchrun rendezvous backend',
  same_network: 'whether the machines share a network: master address or rendezvous endpoint (ul:220-224)',
  main_training_function: 'the function the notebook launcher calls',
  enable_cpu_affinity: 'ACCELERATE_CPU_AFFINITY: process pinning to host cores',
  downcast_bf16: 'XLA_DOWNCAST_BF16 on TPUs only (state.py:964-972)',
  tpu_name: 'TPU pods only',
  tpu_zone: 'TPU pods only',
  tpu_use_cluster: 'TPU pods only',
  tpu_use_sudo: 'TPU pods only',
  command_file: 'TPU pods only',
  commands: 'TPU pods only',
  tpu_vm: 'TPU pods only',
  tpu_env: 'TPU pods only',
};

/** `fsdp_config` keys that FSDP2 does not read (dc:1823-2000: `fsdp_version == 1` branches), or reads outside the training step. */
export const NEUTRAL_FSDP2: Readonly<Record<string, string>> = {
  fsdp_sharding_strategy: 'FSDP1 only: FSDP2 reads fsdp_reshard_after_forward (sharding_strategy is read under fsdp_version 1 only, dc:1844-1854)',
  fsdp_backward_prefetch: 'FSDP2 sets backward_prefetch to None (dc:1903-1905): it prefetches one unit itself',
  fsdp_forward_prefetch: 'read under fsdp_version 1 only (dc:1953-1954)',
  fsdp_use_orig_params: 'FSDP2 always uses the original parameters (dc:1940-1942)',
  fsdp_sync_module_states: 'FSDP2 does not sync module states (dc:1946-1951)',
  fsdp_cpu_ram_efficient_loading:
    'how the weights are loaded (rank 0 reads them, the others build on the meta device, fsdp_utils.py fsdp2_prepare_model): before the training step',
  fsdp_state_dict_type: 'how checkpoints are saved (dc set_state_dict_type): outside the training step',
};

/** `deepspeed_config` keys (cl:411-505, the DeepSpeed launch arguments) that move no memory in the step. */
export const NEUTRAL_DEEPSPEED: Readonly<Record<string, string>> = {
  deepspeed_multinode_launcher: 'which launcher starts the machines (ul:448-500)',
  deepspeed_hostfile: 'the DeepSpeed launcher’s host list (ul:454)',
  deepspeed_exclusion_filter: 'which hosts the DeepSpeed launcher leaves out (ul:461-467)',
  deepspeed_inclusion_filter: 'which hosts the DeepSpeed launcher uses (ul:468-474)',
  zero3_init_flag: 'deepspeed.zero.Init while the model is built (dc:1327-1338): the model’s construction, before the training step',
  zero3_save_16bit_model: 'zero_optimization.stage3_gather_16bit_weights_on_model_save: the model save, outside the training step',
  gradient_clipping: 'DeepSpeed’s gradient_clipping (dc:1321-1322): the ZeRO optimizers compute the norm either way; clipping scales in place',
  offload_optimizer_nvme_path: 'NVMe only (an NVMe device is refused where it is asked for)',
  offload_param_nvme_path: 'NVMe only (an NVMe device is refused where it is asked for)',
};

/** `deepspeed_config` keys accelerate refuses beside `deepspeed_config_file` (dc:1507-1532, `_deepspeed_config_checks`). */
export const REFUSED_WITH_FILE: readonly string[] = [
  'gradient_accumulation_steps',
  'gradient_clipping',
  'zero_stage',
  'offload_optimizer_device',
  'offload_param_device',
  'offload_param_nvme_path',
  'offload_optimizer_nvme_path',
  'zero3_save_16bit_model',
];

/** `dynamo_config` keys (ul:292-302; a key without the `dynamo_` prefix gets it, cl:1274-1275) besides the backend: torch.compile's settings. */
export const DYNAMO_SETTINGS: readonly string[] = ['dynamo_mode', 'dynamo_use_fullgraph', 'dynamo_use_dynamic', 'dynamo_use_regional_compilation'];

/** DistributedType (dc:602-638) values vram-ts does not model, and why. */
export const UNMODELLED_TYPES: Readonly<Record<string, string>> = {
  MULTI_CPU: 'training on CPU processes (MULTI_CPU)',
  MULTI_NPU: 'Ascend NPUs',
  MULTI_MLU: 'Cambricon MLUs',
  MULTI_SDAA: 'SDAA accelerators',
  MULTI_MUSA: 'Moore Threads GPUs',
  MULTI_XPU: 'Intel XPUs',
  MULTI_HPU: 'Gaudi HPUs',
  MULTI_NEURON: 'AWS Neuron cores',
  XLA: 'TPUs through torch_xla',
  MEGATRON_LM:
    'Megatron-LM through accelerate (its own GPT/BERT/T5 model classes; tensor and pipeline degrees from megatron_lm_config; vram-ts’s megatron engine is Megatron-core’s DDP around a vram-ts model)',
};

/** The modelled distributed types. */
export const MODELLED_TYPES: readonly string[] = ['NO', 'MULTI_GPU', 'FSDP', 'DEEPSPEED'];

/** PrecisionType (dc:773), lower-cased as the launcher reads it (ul:278-282). */
export const PRECISIONS: readonly string[] = ['no', 'fp8', 'fp16', 'bf16'];

/** `str_to_bool`'s words (accelerate/utils/environment.py:59-71). */
export const TRUE_WORDS: readonly string[] = ['y', 'yes', 't', 'true', 'on', '1'];
export const FALSE_WORDS: readonly string[] = ['n', 'no', 'f', 'false', 'off', '0'];

/** FSDP_AUTO_WRAP_POLICY and FSDP_STATE_DICT_TYPE (accelerate/utils/constants.py:39, :41). */
export const WRAP_POLICIES: readonly string[] = ['TRANSFORMER_BASED_WRAP', 'SIZE_BASED_WRAP', 'NO_WRAP'];
export const STATE_DICT_TYPES: readonly string[] = ['FULL_STATE_DICT', 'LOCAL_STATE_DICT', 'SHARDED_STATE_DICT'];
