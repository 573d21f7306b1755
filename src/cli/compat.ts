/**
 * `vram-ts compat zero-paper|deepspeed|megatron <model>`: a published closed form, evaluated
 * exactly as its authors' code does, next to vram-ts's per-rank simulation of the same job, and
 * why the two differ.
 */
import {
  deepspeedZero2,
  deepspeedZero3,
  estimate,
  formatBytes,
  formatCount,
  megatronPaddedVocab,
  megatronTheoretical,
  zeroPaper,
  CLOSED_FORM_SOURCES,
  type Estimate,
  type EstimateOptions,
  type Layer,
  type ModelMeta,
  type ParallelPlan,
} from '../index.js';

export const COMPATS = ['zero-paper', 'deepspeed', 'megatron'] as const;
export type Compat = (typeof COMPATS)[number];

/** The job both sides describe. */
export interface CompatJob {
  readonly name: string;
  readonly gpus: number;
  readonly nodes: number;
  readonly seq: number;
  readonly batch: number;
  readonly tp: number;
  readonly pp: number;
}

/** The same decoder built as one tensor-parallel rank (undefined: the model cannot be). */
export type Rebuild = (tensorParallel: { readonly size: number; readonly sequenceParallel: boolean }) => Layer | undefined;

/** What vram-ts's rank holds: the states between steps and the step's peak. */
interface Ours {
  readonly parameters: number;
  readonly gradients: number;
  readonly optimizer: number;
  readonly peak: number;
}

function ours(model: Layer, job: CompatJob, options: Partial<EstimateOptions>, parallel: ParallelPlan | undefined): Ours {
  const r = estimate(model, {
    input: [job.batch, job.seq],
    optimizer: 'adam',
    timeline: false,
    ...options,
    ...(parallel !== undefined ? { parallel } : {}),
  }) as Estimate<number>;
  return { parameters: r.bytes.parameters, gradients: r.bytes.gradients, optimizer: r.bytes.optimizer, peak: r.bytes.peak };
}

/** Rows of cells, left-aligned first column, right-aligned numbers. */
function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}

const size = (bytes: number) => formatBytes(bytes);
const states = (o: Ours) => o.parameters + o.gradients + o.optimizer;

function zeroPaperText(model: Layer, meta: ModelMeta, params: number, job: CompatJob): string {
  const n = job.gpus;
  const paper = zeroPaper({ params, gpus: n });
  const bf16 = { precision: 'bf16' as const };
  const stages = [
    {
      stage: 'baseline DP',
      formula: '(2+2+K)Ψ',
      paper: paper.baseline,
      ours: ours(model, job, { precision: 'amp-bf16' }, { engine: 'ddp', dp: n }),
      engine: 'torch DDP, AMP bf16',
    },
    {
      stage: 'P_os',
      formula: '4Ψ + KΨ/N',
      paper: paper.stage1,
      ours: ours(model, job, bf16, { engine: 'deepspeed', dp: n, zero: 1 }),
      engine: 'DeepSpeed ZeRO-1, bf16',
    },
    {
      stage: 'P_os+g',
      formula: '2Ψ + (2+K)Ψ/N',
      paper: paper.stage2,
      ours: ours(model, job, bf16, { engine: 'deepspeed', dp: n, zero: 2 }),
      engine: 'DeepSpeed ZeRO-2, bf16',
    },
    {
      stage: 'P_os+g+p',
      formula: '(2+2+K)Ψ/N',
      paper: paper.stage3,
      ours: ours(model, job, bf16, { engine: 'deepspeed', dp: n, zero: 3 }),
      engine: 'DeepSpeed ZeRO-3, bf16',
    },
  ];
  return [
    `The ZeRO paper's model states per GPU (${CLOSED_FORM_SOURCES.zeroPaper}): 2Ψ 16-bit parameters,`,
    `2Ψ 16-bit gradients, KΨ optimizer state (K = 12: fp32 master, momentum, variance).`,
    `${job.name}: Ψ = ${formatCount(params)} parameters, N = ${n} GPUs; vram-ts: rank 0, Adam, ${job.batch} × ${job.seq} tokens.`,
    '',
    table(
      ['stage', 'formula', 'paper', 'vram-ts states', 'parameters', 'gradients', 'optimizer', 'peak', 'vram-ts engine'],
      stages.map((s) => [
        s.stage,
        s.formula,
        size(s.paper),
        size(states(s.ours)),
        size(s.ours.parameters),
        size(s.ours.gradients),
        size(s.ours.optimizer),
        size(s.ours.peak),
        s.engine,
      ]),
    ),
    '',
    'Why they differ:',
    "- vram-ts's gradients are what the rank holds when its optimizer step runs. DeepSpeed stages 1",
    "  and 2 keep grads_in_partition: the whole gradient of every parameter touching the rank's",
    '  partition (a 16-bit embedding straddling it counts whole), not 2Ψ/N; stage 1 also holds every',
    '  gradient until the boundary (in the peak).',
    "- The baseline is torch DDP under AMP: fp32 parameters (4Ψ) and gradients (4Ψ), Adam's 8Ψ: the",
    "  paper's 16Ψ split differently; DDP's gradient buckets (another 4Ψ) are communication, not states.",
    '- DeepSpeed pads its flat partitions to 2N elements and partitions by parameter, not exactly Ψ/N;',
    '  ZeRO-3 keeps parameters under its persistence threshold gathered on every rank.',
    `- The peak adds what no closed form has: activations, logits, ${meta.family === 'gpt2' ? 'the loss,' : 'the loss,'} reduce buckets, gathered layers.`,
    '',
  ].join('\n');
}

function largestModuleParams(model: Layer): { params: number; module: string } {
  const r = estimate(model, { input: [1, 1], optimizer: null, timeline: false }) as Estimate<number>;
  let best = { params: 0, module: '' };
  for (const m of r.ir.modules) {
    const own = m.params.reduce((s, p) => s + (r.ir.tensors[p]!.spec.shape as number[]).reduce((a, b) => a * b, 1), 0);
    if (own > best.params) best = { params: own, module: m.key };
  }
  return best;
}

function deepspeedText(model: Layer, params: number, job: CompatJob): string {
  const perNode = job.gpus;
  const total = perNode * job.nodes;
  const largest = largestModuleParams(model);
  const zero2 = [false, true].map((offload) => ({
    offload,
    ...deepspeedZero2({ totalParams: params, gpusPerNode: perNode, nodes: job.nodes, cpuOffload: offload }),
  }));
  const zero3 = [
    [false, false, true],
    [true, false, true],
    [true, true, true],
    [true, true, false],
    [true, false, false],
  ].map(([offload, offloadParams, zeroInit]) => ({
    offload: offload!,
    offloadParams: offloadParams!,
    zeroInit: zeroInit!,
    ...deepspeedZero3({
      totalParams: params,
      largestLayerParams: largest.params,
      gpusPerNode: perNode,
      nodes: job.nodes,
      cpuOffload: offload!,
      cpuOffloadParams: offloadParams!,
      zeroInit: zeroInit!,
    }),
  }));
  const yes = (b: boolean) => (b ? 'yes' : 'no');
  const stage = (zero: 2 | 3) => ours(model, job, { precision: 'bf16' }, { engine: 'deepspeed', dp: total, zero });
  const ours2 = stage(2);
  const ours3 = stage(3);
  return [
    `DeepSpeed's estimators (${CLOSED_FORM_SOURCES.deepspeed}), as their code computes them:`,
    `${job.name}: ${formatCount(params)} parameters, largest layer ${formatCount(largest.params)} (${largest.module || 'the root'}), ${perNode} GPUs per node × ${job.nodes} node${job.nodes === 1 ? '' : 's'}.`,
    '',
    'estimate_zero2_model_states_mem_needs',
    table(
      ['offload_optimizer', 'per GPU', 'per CPU'],
      zero2.map((r) => [r.offload ? 'cpu' : 'none', size(r.gpu), size(r.cpu)]),
    ),
    '',
    'estimate_zero3_model_states_mem_needs',
    table(
      ['offload_optimizer', 'offload_param', 'zero_init', 'per GPU', 'per CPU'],
      zero3.map((r) => [r.offload ? 'cpu' : 'none', r.offloadParams ? 'cpu' : 'none', yes(r.zeroInit), size(r.gpu), size(r.cpu)]),
    ),
    '',
    `vram-ts, rank 0 of ${total} (bf16 model, Adam, no offload, ${job.batch} × ${job.seq} tokens):`,
    table(
      ['stage', 'parameters', 'gradients', 'optimizer', 'states', 'peak'],
      [
        ['ZeRO-2', size(ours2.parameters), size(ours2.gradients), size(ours2.optimizer), size(states(ours2)), size(ours2.peak)],
        ['ZeRO-3', size(ours3.parameters), size(ours3.gradients), size(ours3.optimizer), size(states(ours3)), size(ours3.peak)],
      ],
    ),
    '',
    'Why they differ:',
    '- The estimators count model states only: no activations, logits, reduce buckets, gathered',
    "  layers or the step's temporaries, which vram-ts counts in the peak.",
    "- ZeRO-2's 2Ψ is the 16-bit parameters; its gradients are partitioned (grads_in_partition: the",
    "  whole gradient of each parameter touching the rank's partition, freed in the step), the",
    "  optimizer's fp32 master and moments are 12Ψ/N.",
    "- ZeRO-3's largest-layer term is 4 bytes per parameter of the largest module's own parameters",
    '  (gathered with its gradients); vram-ts follows what DeepSpeed gathers, prefetches and keeps.',
    "- vram-ts's DeepSpeed rules are read from DeepSpeed's sources and checked against DeepSpeed run",
    '  on CPU (gloo), not yet on a GPU.',
    '',
  ].join('\n');
}

/** Megatron-LM's arguments for the same decoder and layout (distributed optimizer, selective recompute). */
function megatronArgs(meta: ModelMeta, job: CompatJob, dp: number) {
  return {
    numLayers: meta.layers,
    hiddenSize: meta.hidden,
    numAttentionHeads: meta.heads,
    kvChannels: meta.headDim,
    ffnHiddenSize: meta.intermediate,
    ...(meta.kvHeads !== meta.heads ? { numQueryGroups: meta.kvHeads } : {}),
    swiglu: meta.gatedMlp,
    normalization: meta.family === 'gpt2' ? ('LayerNorm' as const) : ('RMSNorm' as const),
    untieEmbeddingsAndOutputWeights: !meta.tied,
    paddedVocabSize: megatronPaddedVocab(meta.vocab, job.tp),
    tensorModelParallelSize: job.tp,
    pipelineModelParallelSize: job.pp,
    dataParallelSize: dp,
    useDistributedOptimizer: true,
    seqLength: job.seq,
    microBatchSize: job.batch,
    sequenceParallel: job.tp > 1,
    recomputeGranularity: 'selective' as const,
  };
}

function megatronText(model: Layer, meta: ModelMeta, params: number, job: CompatJob, rebuild?: Rebuild): string {
  const dp = Math.max(1, Math.floor(job.gpus / (job.tp * job.pp)));
  const args = megatronArgs(meta, job, dp);
  const theirs = megatronTheoretical(args, 1);
  const lines = [
    `Megatron-LM's theoretical memory (${CLOSED_FORM_SOURCES.megatron}) for ${job.name} as a Megatron GPT:`,
    `${meta.layers} layers, hidden ${meta.hidden}, ${meta.heads} heads${meta.kvHeads !== meta.heads ? ` (${meta.kvHeads} query groups)` : ''}, FFN ${meta.intermediate}${meta.gatedMlp ? ' (SwiGLU)' : ''}, vocabulary ${meta.vocab} padded to ${args.paddedVocabSize};`,
    `TP ${job.tp}, PP ${job.pp}, DP ${dp}, distributed optimizer, ${job.tp > 1 ? 'sequence parallel, ' : ''}selective recompute, micro-batch ${job.batch} × ${job.seq}.`,
    '',
    table(
      ['', 'bytes', 'size'],
      [
        ['weights and optimizer', formatCount(theirs.weightAndOptimizer), size(theirs.weightAndOptimizer)],
        [`activations (${theirs.path === 'sp' ? 'TP + SP + selective recompute' : 'without SP'})`, formatCount(theirs.activation), size(theirs.activation)],
        ['total', formatCount(theirs.weightAndOptimizer + theirs.activation), size(theirs.weightAndOptimizer + theirs.activation)],
      ],
    ),
    '',
  ];
  if (job.tp > 1 && job.pp > 1) {
    lines.push('vram-ts: a pipeline stage of a tensor-parallel decoder is not modelled yet; give --tp or --pp alone to set one beside it.', '');
    return lines.join('\n');
  }
  // TP: the rank's model as DTensor's plan builds it, sequence parallel as Megatron's args say;
  // PP: the first stage under 1F1B with pp micro-batches (its most in flight), as Megatron counts it.
  const rankModel = job.tp > 1 ? rebuild?.({ size: job.tp, sequenceParallel: true }) : model;
  if (rankModel === undefined) {
    lines.push(`vram-ts: ${meta.family} is not built tensor-parallel (its fused attention projection); nothing to set beside it.`, '');
    return lines.join('\n');
  }
  // Megatron's own DDP with the distributed optimizer and fp32 gradient reduction (what its bf16
  // training runs, and what the formula's 6 + 12/d bytes count); tensor-parallel ranks under it
  // are not modelled, so a TP rank stands alone.
  const megatronDp =
    dp > 1 && job.tp === 1 ? ({ engine: 'megatron', dp, megatron: { distributedOptimizer: true, gradReduceInFp32: true } } as const) : undefined;
  const pipeline = job.pp > 1 ? { dp, pp: job.pp, stage: 0 } : undefined;
  const bf16 =
    job.pp > 1
      ? ours(rankModel, job, { precision: 'bf16', microBatches: job.pp }, dp > 1 ? { engine: 'ddp', ...pipeline! } : pipeline)
      : ours(rankModel, job, { precision: 'bf16' }, megatronDp);
  const how =
    [
      job.tp > 1
        ? `tensor parallel ${job.tp} with sequence parallel (PyTorch DTensor's plan${dp > 1 ? "; one replica: TP under Megatron's DDP is not modelled" : ''})`
        : '',
      job.pp > 1 ? `pipeline stage 0 of ${job.pp} (1F1B, ${job.pp} micro-batches${dp > 1 ? ', DDP' : ''})` : '',
      megatronDp !== undefined ? "Megatron's DDP and distributed optimizer, fp32 gradient buffer" : '',
    ]
      .filter((x) => x !== '')
      .join(', ') || 'one GPU';
  lines.push(
    `vram-ts, rank 0 (${how}, bf16, Adam; full activations, no recompute):`,
    table(
      ['', 'bytes', 'size'],
      [
        ['parameters + gradients + optimizer', formatCount(states(bf16)), size(states(bf16))],
        ['peak', formatCount(bf16.peak), size(bf16.peak)],
      ],
    ),
    '',
    'Why they differ:',
    `- Megatron counts ${formatCount(theirs.parametersOnShard)} parameters as its GPT builds them (no attention biases, its own`,
    `  vocabulary padding) against the checkpoint's ${formatCount(params)}; its 6 + 12/d bytes per parameter are what`,
    "  vram-ts's Megatron engine holds too (bf16 weights, the fp32 gradient buffer, the fp32 master and",
    '  Adam shard), with the padding its buffer adds (each parameter on 64 elements, each bucket on lcm(d, 128)).',
    "- Its activations are Korthikanti et al.'s per-layer formula (selective recompute drops the",
    "  attention scores); vram-ts counts every tensor Hugging Face's code keeps, op by op, and the",
    '  logits and the loss, and peaks where the step does.',
    ...(job.tp > 1
      ? ["- PyTorch's sequence parallel saves the all-gathered inputs of the column-parallel matmuls at", "  full length (Megatron's 34/t saves them sharded)."]
      : []),
    ...(job.pp > 1 ? ["- A pipeline stage also holds torch.distributed.pipelining's receive buffers, one per micro-batch."] : []),
    '',
  );
  return lines.join('\n');
}

/** The text of one compat subcommand. */
export function compatText(which: Compat, model: Layer, meta: ModelMeta, job: CompatJob, rebuild?: Rebuild): string {
  const params = (estimate(model, { input: [1, 1], optimizer: null, timeline: false }) as Estimate<number>).params.total;
  switch (which) {
    case 'zero-paper':
      return zeroPaperText(model, meta, params, job);
    case 'deepspeed':
      return deepspeedText(model, params, job);
    case 'megatron':
      return megatronText(model, meta, params, job, rebuild);
  }
}
