/*
 * `distributed_type: FSDP`: the `fsdp_config` section checked as accelerate 1.15.0 reads it into its
 * FullyShardedDataParallelPlugin and `fsdp2_prepare_model` (accelerate.ts makes the fsdp2 plan of it). Sources (accelerate 1.15.0): cl
 * commands/launch.py, ul utils/launch.py, dc utils/dataclasses.py, fu utils/fsdp_utils.py, acc
 * accelerator.py.
 */
import type { Path } from '../validate.js';
import { NEUTRAL_FSDP2, STATE_DICT_TYPES, WRAP_POLICIES } from './accelerate-keys.js';
import { truthy, type AccelerateReader } from './accelerate-reader.js';
import type { Dict } from './deepspeed-reader.js';

/** The keys this file reads (the rest go by NEUTRAL_FSDP2). */
const HANDLED = [
  'fsdp_version',
  'fsdp_reshard_after_forward',
  'fsdp_offload_params',
  'fsdp_auto_wrap_policy',
  'fsdp_transformer_layer_cls_to_wrap',
  'fsdp_min_num_params',
  'fsdp_activation_checkpointing',
  'fsdp_activation_checkpointing_offload',
  'fsdp_ignored_modules',
];

/** accelerate reads `fsdp_config.x` as `fsdp_x` when the key lacks the prefix (cl:1270-1271). */
export const fsdpName = (key: string): string => (key.startsWith('fsdp') ? key : `fsdp_${key}`);

/** The section with accelerate's names: value and the path it was written at. */
function named(section: Dict): ReadonlyMap<string, { readonly value: unknown; readonly path: Path }> {
  return new Map(Object.keys(section).map((key) => [fsdpName(key), { value: section[key], path: ['fsdp_config', key] }]));
}

/** `fsdp_version`: the launcher's default "1" (cl:514-516, ul:309); FSDP1 (FullyShardedDataParallel) is not modelled. */
function readVersion(r: AccelerateReader, got: ReturnType<typeof named>): 2 | undefined {
  const given = got.get('fsdp_version');
  const path: Path = given?.path ?? ['fsdp_config', 'fsdp_version'];
  const version = given === undefined || given.value === null ? 1 : r.int(given.value, path, 1);
  if (version === undefined) return undefined;
  if (version === 2) return 2;
  if (version !== 1) return r.issue('bad-option', path, 'FSDP versions are 1 and 2 (dc:1830-1834)', '1 | 2', given?.value);
  return r.issue(
    'not-modelled',
    path,
    `FSDP1 (torch FullyShardedDataParallel: flat parameters, sharding strategies) is not modelled; vram-ts models FSDP2 (fully_shard)${given === undefined ? ' — absent, accelerate’s default is 1' : ''}`,
    '2',
    given?.value ?? 'absent (1)',
  );
}

/**
 * The wrap policy: TRANSFORMER_BASED_WRAP wraps the model's decoder layers (fu fsdp2_prepare_model);
 * the others are not modelled. Returns the class names given to wrap (the launcher's string, split
 * on commas by dc:1925-1926), if any.
 */
function readWrap(r: AccelerateReader, got: ReturnType<typeof named>): { readonly names: readonly string[]; readonly path: Path } | undefined {
  const given = got.get('fsdp_auto_wrap_policy');
  const path: Path = given?.path ?? ['fsdp_config', 'fsdp_auto_wrap_policy'];
  const value = given?.value ?? 'NO_WRAP'; // dc:1910: FSDP_AUTO_WRAP_POLICY, default NO_WRAP
  const policy = typeof value === 'string' ? value.toUpperCase() : undefined;
  if (policy === undefined || !WRAP_POLICIES.includes(policy)) {
    r.issue('bad-option', path, 'an auto wrap policy accelerate knows (dc:1910-1915)', WRAP_POLICIES.join(' | '), value);
    return undefined;
  }
  const minParams = got.get('fsdp_min_num_params');
  if (minParams !== undefined && policy !== 'SIZE_BASED_WRAP') r.ignore(minParams.path, 'read only under SIZE_BASED_WRAP (dc:1927-1934)');
  const classes = got.get('fsdp_transformer_layer_cls_to_wrap');
  if (policy === 'TRANSFORMER_BASED_WRAP') {
    if (classes === undefined || classes.value === null) return undefined;
    // The launcher passes str(value) (ul:320-321): only a string names classes get_module_class_from_name can find.
    if (typeof classes.value !== 'string')
      return r.issue(
        'bad-option',
        classes.path,
        'the launcher passes str(value): give the class names as one comma-separated string',
        'LlamaDecoderLayer',
        classes.value,
      );
    return { names: classes.value.split(','), path: classes.path };
  }
  if (classes !== undefined) r.ignore(classes.path, 'read only under TRANSFORMER_BASED_WRAP (dc:1921-1926)');
  return r.issue(
    'not-modelled',
    path,
    policy === 'SIZE_BASED_WRAP'
      ? 'units by parameter count (size_based_auto_wrap_policy) are not modelled'
      : 'NO_WRAP (the embedding, the norm-and-head group and the root as the only units, fu fsdp2_prepare_model) is not measured',
    'TRANSFORMER_BASED_WRAP',
    given?.value ?? 'absent (NO_WRAP)',
  );
}

/**
 * Activation checkpointing (acc:1697-1698, fu fsdp2_apply_ac: checkpoint_wrapper, non-reentrant,
 * around each wrapped layer): under FSDP2 its recomputation inside the units' gathers is not
 * measured, so it is refused.
 */
function readCheckpoint(r: AccelerateReader, got: ReturnType<typeof named>): void {
  const ac = got.get('fsdp_activation_checkpointing');
  const on = ac === undefined ? false : (r.flag(ac.value, ac.path) ?? false);
  const offload = got.get('fsdp_activation_checkpointing_offload');
  const off = offload === undefined ? false : (r.flag(offload.value, offload.path) ?? false);
  if (off && !on) r.issue('bad-option', offload!.path, 'activation_checkpointing_offload requires activation_checkpointing (dc:1967-1968)', 'false', true);
  else if (off)
    r.issue('not-modelled', offload!.path, 'offload_wrapper (the checkpoints’ inputs kept on the host, save_on_cpu) is not modelled', 'false', true);
  if (on)
    r.issue(
      'not-modelled',
      ac!.path,
      'checkpoint_wrapper around each FSDP2 unit (recomputation between its gathers) is not measured: estimate with parallel { engine: fsdp2 } and checkpoint { modules } to see its figure',
      'false',
      ac!.value,
    );
}

/** The keys FSDP2 checks though it does not read them into memory: the state dict type, the loading flags, ignored modules. */
function readChecks(r: AccelerateReader, got: ReturnType<typeof named>): void {
  const sdt = got.get('fsdp_state_dict_type');
  if (sdt !== undefined && sdt.value !== null) {
    const name = typeof sdt.value === 'string' ? sdt.value.toUpperCase() : String(sdt.value);
    const type = /^\d+$/.test(name) ? STATE_DICT_TYPES[Number(name) - 1] : name;
    if (type === undefined || !STATE_DICT_TYPES.includes(type))
      r.issue('bad-option', sdt.path, 'a StateDictType (dc set_state_dict_type)', STATE_DICT_TYPES.join(' | '), sdt.value);
    else if (type === 'LOCAL_STATE_DICT')
      r.issue('bad-option', sdt.path, 'FSDP2 does not support LOCAL_STATE_DICT (dc:2070-2073)', 'FULL_STATE_DICT | SHARDED_STATE_DICT', sdt.value);
  }
  // ul:306: `if args.fsdp_cpu_ram_efficient_loading and not args.fsdp_sync_module_states` (launcher defaults "true", cl:585-594).
  const loading = got.get('fsdp_cpu_ram_efficient_loading');
  const sync = got.get('fsdp_sync_module_states');
  if ((loading === undefined || truthy(loading.value)) && sync !== undefined && !truthy(sync.value))
    r.issue('bad-option', sync.path, 'accelerate launch refuses cpu_ram_efficient_loading without sync_module_states (ul:306-307)', 'true', sync.value);
  const ignoredModules = got.get('fsdp_ignored_modules');
  if (ignoredModules !== undefined && ignoredModules.value !== null)
    r.issue('not-modelled', ignoredModules.path, 'modules left out of FSDP sharding (ignored_params) are not modelled', 'null', ignoredModules.value);
}

/** What an FSDP2 `fsdp_config` decides: the plugin's reshard_after_forward and CPUOffloadPolicy, the classes named to wrap. */
export interface FsdpSection {
  readonly reshardAfterForward: boolean;
  readonly offload: boolean;
  /** fsdp_transformer_layer_cls_to_wrap, when given (else the model's `_no_split_modules`). */
  readonly layerClasses?: { readonly names: readonly string[]; readonly path: Path };
}

/**
 * `fsdp_config` under `distributed_type: FSDP`, read key by key as accelerate reads it (FSDP1,
 * the wrap policies other than TRANSFORMER_BASED_WRAP, activation checkpointing and ignored
 * modules not modelled; the values accelerate refuses): its issues go to the reader.
 */
export function readFsdp(r: AccelerateReader, section: Dict): FsdpSection | undefined {
  r.keys(section, ['fsdp_config'], HANDLED, NEUTRAL_FSDP2, fsdpName);
  const got = named(section);
  if (readVersion(r, got) === undefined) return undefined;
  // dc:1865-1867: a string goes through str_to_bool (FULL_SHARD and the other FSDP1 names are refused); the launcher's defaults "true" and "false" (cl:520-544).
  const reshard = got.get('fsdp_reshard_after_forward');
  const offload = got.get('fsdp_offload_params');
  const reshardAfterForward = reshard === undefined ? true : (r.flag(reshard.value, reshard.path) ?? true);
  const offloaded = offload === undefined ? false : (r.flag(offload.value, offload.path) ?? false);
  const layerClasses = readWrap(r, got);
  readCheckpoint(r, got);
  readChecks(r, got);
  return { reshardAfterForward, offload: offloaded, ...(layerClasses !== undefined ? { layerClasses } : {}) };
}
