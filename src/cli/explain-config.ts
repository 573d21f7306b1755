/**
 * What each key of a tool's config file means for GPU memory, from the reading the other
 * commands estimate with: the value read (and where it came from: the file, DeepSpeed's default,
 * an "auto" the Trainer fills, a flag), what it decides, and the keys accepted that move none.
 */
import { formatCount, type AccelerateReading, type DeepSpeedReading, type TrainingArgumentsReading } from '../index.js';

type Path = readonly (string | number)[];

/** What a DeepSpeed key decides, by its path (the last key for the zero_optimization knobs). */
const DEEPSPEED_MEANINGS: Readonly<Record<string, string>> = {
  train_batch_size: 'micro × accumulation × world, asserted by DeepSpeed: with the other two it gives the world',
  train_micro_batch_size_per_gpu: 'the batch of each forward and backward on each GPU: activations scale with it',
  gradient_accumulation_steps: 'micro-batches per optimizer step: gradients are held across them, activations do not grow',
  'zero_optimization.stage': 'what is partitioned over the ranks: 1 optimizer state, 2 + gradients, 3 + parameters',
  zero_optimization: 'the deprecated boolean form: true is stage 1',
  reduce_bucket_size: 'elements per gradient-reduction bucket (the IPG buffer; stage 3: the reduce buffer)',
  overlap_comm: 'a second gradient bucket so that reduction overlaps backward (stages 1/2)',
  stage3_prefetch_bucket_size: 'parameters gathered ahead of their use (stage 3)',
  prefetch_bucket_size: 'parameters gathered ahead of their use (stage 3)',
  stage3_max_live_parameters: 'caps how many gathered parameters prefetch may add (stage 3)',
  max_live_parameters: 'caps how many gathered parameters prefetch may add (stage 3)',
  stage3_max_reuse_distance: 'a parameter used again within this many elements stays gathered (stage 3)',
  max_reuse_distance: 'a parameter used again within this many elements stays gathered (stage 3)',
  stage3_param_persistence_threshold: 'parameters this small stay gathered on every rank (stage 3)',
  param_persistence_threshold: 'parameters this small stay gathered on every rank (stage 3)',
  stage3_model_persistence_threshold: 'caps the persistent parameters in total (stage 3)',
  model_persistence_threshold: 'caps the persistent parameters in total (stage 3)',
  sub_group_size: "stage 3's tile of fp32 gradients and optimizer state stepped at once",
  offload_optimizer: 'cpu: the fp32 master, optimizer state and fp32 gradient partition live in host memory',
  cpu_offload: 'deprecated: offload_optimizer to the cpu',
  offload_param: "cpu: the parameters' partitions live in host memory between gathers (stage 3)",
  cpu_offload_param: 'deprecated: offload_param to the cpu',
  'bf16.enabled': 'the parameters, gradients and activations in bf16 (the fp32 master in the optimizer)',
  'bfloat16.enabled': 'the parameters, gradients and activations in bf16 (the fp32 master in the optimizer)',
  'fp16.enabled': 'the parameters, gradients and activations in fp16 (the fp32 master in the optimizer)',
  optimizer: "no optimizer section: the client's optimizer (the Trainer's own)",
  'optimizer.type': "the optimizer's state per parameter: Adam/AdamW two fp32 moments, Lion one, SGD with momentum one",
  'context.worldSize': 'the data-parallel world: every partition divides by it',
};

/** The meaning of a path: its full name, else its last key (the zero_optimization knobs). */
function meaningOf(path: Path): string {
  const full = path.join('.');
  return DEEPSPEED_MEANINGS[full] ?? DEEPSPEED_MEANINGS[String(path.at(-1))] ?? DEEPSPEED_MEANINGS[String(path[path.length - 2])] ?? '';
}

/** A value in words: counts with separators, the optimizer spec by its name and implementation. */
function shown(value: unknown): string {
  if (value === Number.MAX_SAFE_INTEGER) return 'unlimited';
  if (typeof value === 'number') return Number.isInteger(value) ? formatCount(value) : String(value);
  if (typeof value === 'object' && value !== null && 'name' in value) {
    const spec = value as { name: string; impl?: string };
    return spec.impl !== undefined ? `${spec.name} (${spec.impl})` : spec.name;
  }
  return value === null ? 'none' : String(value);
}

const FROM: Readonly<Record<string, string>> = { config: 'file', default: 'default', auto: 'auto', context: 'flag', derived: 'derived' };

/** Rows as fixed-width columns (the last column free). */
function columns(rows: readonly (readonly string[])[]): string[] {
  const widths = rows[0]!.slice(0, -1).map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => `  ${r.map((cell, i) => (i < widths.length ? cell.padEnd(widths[i]!) : cell)).join('  ')}`.trimEnd());
}

/** The explanation of a DeepSpeed config's reading; `flags`, those it was read with. */
export function explainDeepSpeed(file: string, reading: DeepSpeedReading, flags: readonly string[]): string {
  const { parallel, microBatches, precision, optimizer } = reading.options;
  // ZeRO-3's knobs at their defaults say nothing under stages 1/2.
  const said = reading.sources.filter((s) => parallel.zero === 3 || s.from !== 'default' || !meaningOf(s.path).endsWith('(stage 3)'));
  const read = said.map((s) => [s.path.join('.'), shown(s.value), FROM[s.from]!, [meaningOf(s.path), s.why].filter((t) => t).join('; ')]);
  const ignored = reading.ignored.map((i) => [i.path.join('.'), i.why]);
  const summary = [
    `ZeRO-${parallel.zero} over ${parallel.dp} data-parallel GPUs`,
    `micro-batch ${reading.microBatchSize} × ${microBatches} accumulation × ${parallel.dp} GPUs = ${reading.trainBatchSize} samples per step`,
    precision !== undefined ? `${precision} parameters (fp32 master)` : "the model's dtype (neither bf16 nor fp16)",
    optimizer !== undefined ? `optimizer ${shown(optimizer)}` : "the client's optimizer",
    ...(parallel.offload.optimizer ? ['optimizer offloaded to the cpu'] : []),
    ...(parallel.offload.parameters ? ['parameters offloaded to the cpu'] : []),
  ];
  return [
    `${file}: a DeepSpeed config, read as DeepSpeed reads it (fromDeepSpeedConfig)`,
    `  ${summary.join('; ')}`,
    '',
    'What it decides (from: file, default = DeepSpeed’s, auto = filled as the HF Trainer fills it, flag, derived)',
    ...columns([['key', 'value', 'from', 'what it means for memory'], ...read]),
    '',
    ...(ignored.length > 0 ? ['Accepted, moving no memory vram-ts models (or at the default it models)', ...columns(ignored), ''] : []),
    `The same estimate: vram-ts <model> --deepspeed ${[file, ...flags].join(' ')}`,
    '',
  ].join('\n');
}

/** What a modelled TrainingArguments field decides. */
const TRAINER_MEANINGS: Readonly<Record<string, string>> = {
  per_device_train_batch_size: 'the batch of each forward and backward on each GPU: activations scale with it',
  gradient_accumulation_steps: 'micro-batches per optimizer step: gradients held across them; the Trainer fetches their batches up front',
  gradient_checkpointing: 'every decoder layer recomputed in backward: only its inputs are kept',
  gradient_checkpointing_kwargs: "the checkpoint's use_reentrant (vram-ts models the non-reentrant one)",
  bf16: "autocast in bf16 over the model's dtype (an fp32 model keeps fp32 weights: cast copies per forward)",
  optim: "the optimizer's state: AdamW two fp32 moments per parameter (fused: no temporaries; else foreach's), SGD none",
  max_grad_norm: 'clip_grad_norm_: one norm per gradient and their stack (0: no clipping)',
  use_liger_kernel: "Liger's fused linear cross-entropy: no full logits in training",
};

/** The explanation of a TrainingArguments reading: each field set, and its DeepSpeed config's. */
export function explainTrainingArgs(file: string, reading: TrainingArgumentsReading, modelled: readonly string[], flags: readonly string[]): string {
  const r = reading.resolved;
  const rows = Object.entries(reading.args).map(([field, value]) => [
    field,
    typeof value === 'object' && value !== null ? JSON.stringify(value) : shown(value),
    modelled.includes(field) ? (TRAINER_MEANINGS[field] ?? '') : 'decides nothing on the GPU (logging, saving, schedules, data loading)',
  ]);
  const summary = [
    `batch ${r.batch} × ${r.accumulation} accumulation`,
    r.checkpointing ? 'gradient checkpointing' : 'no checkpointing',
    r.bf16 ? 'bf16 autocast' : 'fp32',
    `optim ${r.optim}`,
    ...(reading.deepspeed !== undefined ? [`under DeepSpeed ZeRO-${reading.deepspeed.options.parallel.zero} (below)`] : []),
  ];
  const ds = reading.deepspeed === undefined ? [] : ['', explainDeepSpeed(`${file}: deepspeed`, reading.deepspeed, flags).trimEnd()];
  return [
    `${file}: transformers ${r.transformers} TrainingArguments, read as the Trainer reads them (fromTrainingArguments)`,
    `  ${summary.join('; ')}`,
    '',
    "The fields set (the others at TrainingArguments' defaults, or what __post_init__ writes for them)",
    ...(rows.length > 0 ? columns([['field', 'value', 'what it means for memory'], ...rows]) : ['  (none)']),
    ...ds,
    '',
    `The same estimate: vram-ts <model> --training-args ${[file, ...flags].join(' ')}`,
    '',
  ].join('\n');
}

/** The explanation of an accelerate config's reading. */
export function explainAccelerate(file: string, reading: AccelerateReading, flags: readonly string[]): string {
  const o = reading.options;
  const engine =
    reading.distributedType === 'NO'
      ? `one ${o.device === 'cpu' ? 'CPU' : 'GPU'}`
      : reading.distributedType === 'MULTI_GPU'
        ? `DDP over ${reading.processes} processes`
        : `DeepSpeed ZeRO-${reading.deepspeed?.options.parallel.zero} over ${reading.processes} processes (below)`;
  const precision =
    o.precision === 'amp-bf16' ? 'bf16 autocast over fp32 parameters' : o.precision !== undefined ? `DeepSpeed's ${o.precision}` : "the model's dtype";
  const notes = (list: AccelerateReading['ignored']) => columns(list.map((n) => [n.path.join('.'), n.why]));
  return [
    `${file}: an accelerate config, read as accelerate 1.15.0 reads it (fromAccelerateConfig)`,
    `  ${reading.distributedType}: ${engine} on ${reading.machines} machine${reading.machines === 1 ? '' : 's'}; ${precision}`,
    ...(reading.approximations.length > 0 ? ['', 'Read approximately', ...notes(reading.approximations)] : []),
    ...(reading.ignored.length > 0 ? ['', 'Accepted, moving no memory', ...notes(reading.ignored)] : []),
    ...(reading.deepspeed !== undefined ? ['', explainDeepSpeed(`${file}: deepspeed_config`, reading.deepspeed, flags).trimEnd()] : []),
    '',
    `The same estimate: vram-ts <model> --accelerate-config ${[file, ...flags].join(' ')}`,
    '',
  ].join('\n');
}
