/**
 * What each key of a tool's config file means for GPU memory, from the reading the other
 * commands estimate with: the value read (and where it came from: the file, DeepSpeed's default,
 * an "auto" the Trainer fills, a flag), what it decides, and the keys accepted that move none.
 */
import { formatCount, type DeepSpeedReading } from '../index.js';

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
  if (typeof value === 'number') return formatCount(value);
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
