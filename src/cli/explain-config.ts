/**
 * What each key of a tool's config file means for GPU memory, from the reading the other
 * commands estimate with: the value read (and where it came from: the file, DeepSpeed's default,
 * an "auto" the Trainer fills, a flag), what it decides, and the keys accepted that move none.
 */
import {
  formatCount,
  type AccelerateReading,
  type DeepSpeedReading,
  type ResolvedTrainerArgs,
  type TrainerFields,
  type TrainingArgumentsReading,
  type TrlScriptConfig,
} from '../index.js';
import { kebab } from './fields.js';
import { FIELD_NOTES, helpText } from './help.js';
import { RESOLVED } from './trainer.js';
import { MODELLED, type VllmConfig } from './vllm-config.js';

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

/** A value in words: counts with separators, the optimizer spec by its name and implementation, other objects as JSON. */
function shown(value: unknown): string {
  if (value === Number.MAX_SAFE_INTEGER) return 'unlimited';
  if (typeof value === 'number') return Number.isInteger(value) ? formatCount(value) : String(value);
  if (typeof value === 'object' && value !== null) {
    if (!('name' in value)) return JSON.stringify(value);
    const spec = value as { name: string; impl?: string };
    return spec.impl !== undefined ? `${spec.name} (${spec.impl})` : spec.name;
  }
  return value === null ? 'none' : String(value);
}

const FROM: Readonly<Record<string, string>> = { config: 'file', default: 'default', auto: 'auto', context: 'flag', derived: 'derived' };

type Rows = readonly (readonly string[])[];

/** Rows as fixed-width columns (the last column free). */
function columns(rows: Rows): string[] {
  const widths = rows[0]!.slice(0, -1).map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => `  ${r.map((cell, i) => (i < widths.length ? cell.padEnd(widths[i]!) : cell)).join('  ')}`.trimEnd());
}

/** Every kind's explanation: the title, the summary, each part (a heading over its rows, left out when none; or a text), the same estimate's command. */
function explanation(title: string, summary: string, parts: readonly (readonly [string, Rows] | string)[], same: string): string {
  return [
    title,
    `  ${summary}`,
    ...parts.flatMap((p) => (typeof p === 'string' ? ['', p] : p[1].length > 0 ? ['', p[0], ...columns(p[1])] : [])),
    '',
    `The same estimate: ${same}`,
    '',
  ].join('\n');
}

/** The header of a table of values. */
const HEAD = ['key', 'value', 'from', 'what it means for memory'];
const ACCEPTED = 'Accepted, moving no memory';
const DECIDES = 'What it decides (from: file, default =';
const NO_GPU = 'decides nothing on the GPU (logging, saving, schedules, data loading)';

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
  return explanation(
    `${file}: a DeepSpeed config, read as DeepSpeed reads it (fromDeepSpeedConfig)`,
    summary.join('; '),
    [
      ['What it decides (from: file, default = DeepSpeed’s, auto = filled as the HF Trainer fills it, flag, derived)', [HEAD, ...read]],
      [`${ACCEPTED} vram-ts models (or at the default it models)`, ignored],
    ],
    `vram-ts <model> --deepspeed ${[file, ...flags].join(' ')}`,
  );
}

/** What a modelled trainer field decides (the GRPO fields' help notes where none is written here). */
const TRAINER_MEANINGS: Readonly<Record<string, string>> = {
  per_device_train_batch_size: 'the batch of each forward and backward on each GPU: activations scale with it',
  gradient_accumulation_steps: 'micro-batches per optimizer step: gradients held across them; the Trainer fetches their batches up front',
  gradient_checkpointing: 'every decoder layer recomputed in backward: only its inputs are kept',
  gradient_checkpointing_kwargs: "the checkpoint's use_reentrant (vram-ts models the non-reentrant one)",
  bf16: "autocast in bf16 over the model's dtype (an fp32 model keeps fp32 weights: cast copies per forward)",
  fp16: 'under DeepSpeed: its fp16 engine (fp16 parameters, gradients and activations; the fp32 master in the optimizer)',
  optim: "the optimizer's state: AdamW two fp32 moments per parameter (fused: no temporaries; else foreach's), SGD none",
  max_grad_norm: 'clip_grad_norm_: one norm per gradient and their stack (0: no clipping)',
  use_liger_kernel: "Liger's fused linear cross-entropy: no full logits in training",
  loss_type: "the loss's own tensors (SFT's chunked_nll: no full logits)",
  use_vllm: 'generation by a vLLM engine instead of model.generate',
  vllm_mode: 'colocate: the engine in the trainer, on its GPU; server: on another GPU',
  vllm_gpu_memory_utilization: "the colocated engine's share of the GPU's total memory, held from start-up",
  vllm_max_model_length: "the colocated engine's max_model_len",
  vllm_enable_sleep_mode: 'the colocated engine keeps only its non-torch memory and CUDA graphs between generations',
  vllm_importance_sampling_correction: "vLLM's sampling log-probabilities and the ratio kept per sequence",
  generation_kwargs: 'min_new_tokens: EOS suppressed until then (longer completions)',
};

/** What the resolved arguments say, as TrainingArguments' and the TRL configs' summaries start. */
const trainerSummary = (r: ResolvedTrainerArgs) => [
  `batch ${r.batch} × ${r.accumulation} accumulation`,
  r.checkpointing ? 'gradient checkpointing' : 'no checkpointing',
  r.bf16 ? 'bf16 autocast' : r.fp16 ? "DeepSpeed's fp16" : 'fp32',
  `optim ${r.optim}`,
];

/** The explanation of a TrainingArguments reading: each field set, and its DeepSpeed config's. */
export function explainTrainingArgs(file: string, reading: TrainingArgumentsReading, modelled: readonly string[], flags: readonly string[]): string {
  const rows = Object.entries(reading.args).map(([field, value]) => [field, shown(value), modelled.includes(field) ? (TRAINER_MEANINGS[field] ?? '') : NO_GPU]);
  const heading = "The fields set (the others at TrainingArguments' defaults, or what __post_init__ writes for them)";
  const ds = reading.deepspeed;
  return explanation(
    `${file}: transformers ${reading.resolved.transformers} TrainingArguments, read as the Trainer reads them (fromTrainingArguments)`,
    [...trainerSummary(reading.resolved), ...(ds !== undefined ? [`under DeepSpeed ZeRO-${ds.options.parallel.zero} (below)`] : [])].join('; '),
    [
      rows.length > 0 ? [heading, [['field', 'value', 'what it means for memory'], ...rows]] : `${heading}\n  (none)`,
      ...(ds !== undefined ? [explainDeepSpeed(`${file}: deepspeed`, ds, flags).trimEnd()] : []),
    ],
    `vram-ts <model> --training-args ${[file, ...flags].join(' ')}`,
  );
}

/** The explanation of an accelerate config's reading. */
export function explainAccelerate(file: string, reading: AccelerateReading, flags: readonly string[]): string {
  const o = reading.options;
  const engine =
    reading.distributedType === 'NO'
      ? `one ${o.device === 'cpu' ? 'CPU' : 'GPU'}`
      : reading.distributedType === 'MULTI_GPU'
        ? `DDP over ${reading.processes} processes`
        : reading.distributedType === 'FSDP'
          ? `FSDP2 over ${reading.processes} processes, accelerate's units`
          : `DeepSpeed ZeRO-${reading.deepspeed?.options.parallel.zero} over ${reading.processes} processes (below)`;
  const precision =
    o.precision === 'amp-bf16'
      ? 'bf16 autocast over fp32 parameters'
      : o.precision !== undefined
        ? `DeepSpeed's ${o.precision}`
        : o.dtype !== undefined
          ? 'bf16 FSDP2 policy over fp32 parameters'
          : "the model's dtype";
  const notes = (list: AccelerateReading['ignored']) => list.map((n) => [n.path.join('.'), n.why]);
  return explanation(
    `${file}: an accelerate config, read as accelerate 1.15.0 reads it (fromAccelerateConfig)`,
    `${reading.distributedType}: ${engine} on ${reading.machines} machine${reading.machines === 1 ? '' : 's'}; ${precision}`,
    [
      ['Read approximately', notes(reading.approximations)],
      [ACCEPTED, notes(reading.ignored)],
      ...(reading.deepspeed !== undefined ? [explainDeepSpeed(`${file}: deepspeed_config`, reading.deepspeed, flags).trimEnd()] : []),
    ],
    `vram-ts <model> --accelerate-config ${[file, ...flags].join(' ')}`,
  );
}

/** Why a key a TRL reading accepts moves no memory, by its name. */
const TRL_NEUTRAL: readonly (readonly [RegExp, string])[] = [
  [/^model_/, 'the model: <model> is the one estimated'],
  [/^(lora|use_|load_|bnb)/, 'ModelConfig, unused (no use_peft, no load_in_4bit/8bit) or at its default'],
  [/./, 'on the host: the data, the rewards, env, one process'],
];

/** The explanation of a TRL script config: TrlParser's split and the trainer's resolved arguments. */
export function explainTrl(
  file: string,
  mapping: Readonly<Record<string, unknown>>,
  s: TrlScriptConfig,
  r: ResolvedTrainerArgs,
  fields: TrainerFields,
): string {
  const trainer = r.trainer as 'grpo' | 'sft';
  const json = (v: unknown) => JSON.stringify(v ?? null);
  const inFile = (k: string) => Object.hasOwn(mapping, k);
  const row = (key: string, value: unknown, fallback: unknown, meaning: string) => [
    key,
    shown(value),
    json(inFile(key) ? mapping[key] : fallback) === json(value) ? (inFile(key) ? 'file' : 'default') : 'derived',
    meaning,
  ];
  const decides = fields.modelled
    .map((f) => [f, f in RESOLVED ? RESOLVED[f]!(r) : mapping[f]] as const)
    .filter(([, v]) => v !== undefined)
    .map(([f, v]) => row(f, v, fields.defaults[f], TRAINER_MEANINGS[f] ?? FIELD_NOTES[f] ?? ''));
  const dtypeKey = s.keys.dtype ?? 'dtype';
  // [key, value, meaning]: ModelConfig's keys and the LoraConfig use_peft builds; one not in the file is at ModelConfig's default (fromTrlConfig fills it).
  const model: [string, unknown, string][] = [
    [dtypeKey, s.dtype ?? mapping[dtypeKey], helpText('dtype', trainer)],
    ['attn_implementation', s.attention ?? mapping.attn_implementation, helpText('attention', trainer)],
    ['use_peft', mapping.use_peft, 'LoRA adapters from the lora_* fields, the base frozen'],
    ...Object.entries(s.peft ?? {}).map(([f, v]): [string, unknown, string] => [
      s.keys[`peft_config.${f}`]!,
      v,
      (f === 'r' ? "the adapters' rank: their weights, gradients and optimizer state" : helpText(`lora-${kebab(f.replace('lora_', ''))}`, trainer)) ||
        'scales values only',
    ]),
  ];
  const told = new Set([...fields.modelled, ...model.map((m) => m[0])]);
  const accepted = Object.keys(mapping)
    .filter((k) => !told.has(k))
    .map((k) => [k, k in fields.defaults ? NO_GPU : /dtype/.test(k) ? 'the dtype above' : TRL_NEUTRAL.find(([re]) => re.test(k))![1]]);
  return explanation(
    `${file}: a trl ${trainer} config, read as TRL ${r.trl} reads it (fromTrlConfig, resolveTrainerArgs)`,
    [...trainerSummary(r), ...(r.lora !== undefined ? [`LoRA r ${r.lora.rank}`] : []), `the model in ${s.dtype ?? "the checkpoint's dtype"}`].join('; '),
    [
      [
        `${DECIDES} ${fields.className}’s or ModelConfig’s, derived = resolved from others)`,
        [HEAD, ...decides, ...model.filter((m) => m[1] !== undefined).map(([key, v, meaning]) => row(key, v, v, meaning))],
      ],
      [ACCEPTED, accepted],
    ],
    `vram-ts ${trainer} <model> --config ${file}`,
  );
}

/** The explanation of vLLM's config.yaml: the flags it sets, each under the key that set it, the others at vLLM's default, and the keys that move no memory. */
export function explainVllm(c: VllmConfig): string {
  const set = c.keys.filter((k) => k.flag !== undefined);
  const rows = [
    ...set.map((k) => [
      k.key,
      shown(k.text ?? k.value),
      k.text === undefined || String(k.value) === String(k.text) ? 'file' : 'derived',
      helpText(k.flag!, 'vllm'),
    ]),
    ...Object.entries(MODELLED)
      .filter(([name]) => !set.some((k) => k.name === name))
      .map(([name, flag]) => [name, "vLLM's", 'default', helpText(flag, 'vllm')]),
  ];
  const accepted = c.keys
    .filter((k) => k.flag === undefined)
    .map((k) => [
      k.key,
      k.unmodelled !== undefined
        ? `vLLM's default (another value: ${k.unmodelled})`
        : /^(model|rev)/.test(k.name)
          ? 'the model: <model> wins'
          : 'the server, logging, parsing or scheduling order',
    ]);
  const flags = Object.entries(c.values).map(([f, v]) => (v === true ? `--${f}` : `--${f} ${v}`));
  return explanation(
    `${c.file}: a vLLM config, read as \`vllm serve --config\` reads it`,
    `as the flags: ${flags.join(' ') || 'none'}`,
    [
      [`${DECIDES} vLLM’s, derived = its reading of 1k, half …)`, [HEAD, ...rows]],
      [ACCEPTED, accepted],
    ],
    `vram-ts vllm <model> --gpu GPU --config ${c.file}`,
  );
}
