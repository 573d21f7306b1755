/** `vram-ts <model> [options]`: the estimate of one configuration, in the asked format. */
import { writeFileSync } from 'node:fs';
import {
  activeParams,
  breakdownSvg,
  estimate,
  estimateRanks,
  estimateToJSON,
  explain,
  fits,
  formatBreakdown,
  formatBreakdownMarkdown,
  formatBytes,
  formatCount,
  formatExplain,
  kvCache,
  summary,
  timelineSvg,
  wholeParams,
  VramError,
  type Estimate,
  type EstimateOptions,
  type FitResult,
  type HubModel,
  type Layer,
  type ModelMeta,
  type RankFigures,
} from '../lib.js';
import { fsReason, usage } from '../errors.js';
import { decoderSizes } from '../accelerate-config.js';
import { readTrainingArgs, trainingArgsOptions, trainingArgsOutcome } from '../training-args.js';
import { DEFAULTS, type Values } from '../flags.js';
import { HELP } from '../help.js';
import { buildModel, type ModelRef } from '../model.js';
import { estimateOptions, tensorParallelOf } from '../options.js';
import { choice, formatOf } from '../values.js';
import type { ModelCommand, Outcome } from './command.js';
import { CAPACITY_NOTE, sumLines, type SumRow } from '../verdict.js';

/** Formats with no room for a fit verdict: there --gpu only makes sense with --check. */
const NO_VERDICT_FORMATS = ['torchsummary', 'torchinfo', 'explain', 'svg'];

/**
 * The fit verdict under a table: a line that says whether it fits, then every line of the sum
 * (capacity, − each runtime line, = usable, − reserved or the allocated peak, = headroom).
 */
export function fitVerdictLine(gpu: string, verdict: FitResult): string {
  const reservedVerdict = verdict.verdict === 'reserved';
  const compared = reservedVerdict ? verdict.reserved : verdict.allocated;
  const short = verdict.headroom < 0;
  const head =
    verdict.fits && short
      ? `Fits ${gpu} (${formatBytes(verdict.capacity)}): needs ${formatBytes(verdict.needed)} with the cache kept, ${formatBytes(-verdict.headroom)} past it, but every allocation is placed once the caching allocator frees its cached blocks and retries, as PyTorch does before an out-of-memory error.`
      : `${verdict.fits ? 'Fits' : 'Does not fit'} ${gpu} (${formatBytes(verdict.capacity)}): needs ${formatBytes(verdict.needed)}, ${verdict.fits ? 'leaves' : 'short by'} ${formatBytes(Math.abs(verdict.headroom))}.`;
  const oom = verdict.oom !== undefined ? `  PyTorch would raise: OutOfMemoryError: ${verdict.oom}\n` : '';
  const what = !reservedVerdict
    ? 'allocated peak'
    : verdict.reservedFrom === 'allocator'
      ? 'reserved (caching allocator)'
      : 'allocated peak (no allocator replay)';
  const note = !reservedVerdict
    ? 'the allocated-only verdict'
    : verdict.reservedFrom === 'allocator'
      ? `allocated ${formatBytes(verdict.allocated)} + fragmentation ${formatBytes(verdict.fragmentation)} at the peak`
      : verdict.estimate.ir.settings.device === 'cpu'
        ? 'cpu: no caching allocator'
        : 'the step is too long to replay';
  const rows: SumRow[] = [
    [reservedVerdict ? 'capacity' : 'memory', verdict.capacity, CAPACITY_NOTE[verdict.capacityFrom]],
    ...verdict.runtime.map((line): SumRow => [`- ${line.label}`, line.bytes, line.source]),
    ['= usable', verdict.usable, ''],
    [`- ${what}`, compared, note],
    ['= headroom', verdict.headroom, ''],
  ];
  return `${head}\n${sumLines(rows)}\n${oom}`;
}

/** What one estimate prints besides its breakdown. */
interface Step {
  readonly ref: ModelRef;
  readonly values: Values;
  readonly model: Layer;
  readonly options: EstimateOptions;
  readonly gpu: string | undefined;
  readonly verdict: FitResult | undefined;
  /** --all-ranks: every rank's figures. */
  readonly ranks: readonly RankFigures[] | undefined;
}

function runEstimate(ref: ModelRef, values: Values): Outcome {
  const format = formatOf(values, 'estimate', DEFAULTS.format);
  if (values.gpu !== undefined && !values.check && NO_VERDICT_FORMATS.includes(format)) {
    usage('--gpu', `--format ${format} has no room for a fit verdict: add --check (exit 1 when it does not fit) or use --format table, markdown or json`);
  }
  const model = buildModel(ref, values, tensorParallelOf(values));
  const trainer = values['training-args'] !== undefined ? readTrainingArgs(values, values['training-args'], decoderSizes(model), model) : undefined;
  if (trainer !== undefined && trainer.options === undefined) return trainingArgsOutcome(values, ref.name, model, trainer, format);
  const options = trainer !== undefined ? trainingArgsOptions(values, trainer) : estimateOptions(values, ref, model);
  // Listed first: a job of too many ranks is refused before any estimate.
  const ranks = values['all-ranks'] ? allRanks(model, options) : undefined;
  const gpu = values.gpu;
  const how = choice(values, 'verdict');
  if (how !== undefined && gpu === undefined) usage('--verdict', 'picks what the fit verdict compares: give --gpu');
  const verdict = gpu !== undefined ? fits(model, { ...options, gpu, ...(how !== undefined ? { verdict: how } : {}) }) : undefined;
  const code = values.check && verdict !== undefined && !verdict.fits ? 1 : 0;
  const needsEstimate = (format !== 'torchsummary' && format !== 'torchinfo') || values.svg !== undefined;
  if (values.chart !== undefined && values.svg === undefined) usage('--chart', 'picks the chart --svg FILE writes: give --svg');
  const chart = choice(values, 'chart') ?? 'timeline';
  // With --gpu the charts draw the card's memory: the verdict's capacity.
  const chartOptions = verdict !== undefined ? { capacity: verdict.capacity } : {};
  const result = needsEstimate ? estimate(model, options) : undefined;
  const step: Step = { ref, values, model, options, gpu, verdict, ranks };
  const text = format === 'torchsummary' || format === 'torchinfo' ? summary(model, { ...options, format }) : formatted(format, result!, step, chartOptions);
  if (values.svg !== undefined) {
    try {
      writeFileSync(values.svg, chart === 'breakdown' ? breakdownSvg(result!, chartOptions) : timelineSvg(result!, chartOptions));
    } catch (error) {
      usage('--svg', `cannot write ${values.svg} (${fsReason(error)})`);
    }
  }
  return { stdout: text, code };
}

/** The KV cache an LLM's inference forward keeps. */
interface KvCache {
  readonly batch: number;
  readonly seq: number;
  readonly dtype: string;
  readonly bytes: number;
  readonly inPeak: boolean;
}

/** The estimate in a format of its own (not the torchsummary/torchinfo tables). */
function formatted(format: 'table' | 'json' | 'markdown' | 'explain' | 'svg', r: Estimate, step: Step, chartOptions: { capacity?: number }): string {
  const { ref, values, model, options, gpu, verdict } = step;
  let kv: KvCache | undefined;
  if (ref.kind === 'llm' && options.mode === 'inference') {
    const [batch, seq] = options.input as [number, number];
    const dtype = r.ir.settings.paramDtype;
    kv = { batch, seq, dtype, bytes: kvCache(model, { batch, seq, dtype }), inPeak: !values['no-cache'] };
  }
  const notes =
    (kv !== undefined
      ? `\nKV cache for ${kv.batch} × ${kv.seq} tokens (${kv.dtype}): ${formatCount(kv.bytes)} B (${formatBytes(kv.bytes)}), ${kv.inPeak ? "included in the peak above (use_cache: the forward keeps every layer's keys and values)" : 'not included (--no-cache)'}.\n`
      : '') +
    moeNote(model, r.params.total) +
    hubNote(ref) +
    (verdict !== undefined && gpu !== undefined ? `\n${fitVerdictLine(gpu, verdict)}` : '');
  const ranks = step.ranks;
  const rankText = ranks === undefined ? '' : `\n${formatRanks(ranks, format === 'markdown')}`;
  switch (format) {
    case 'table':
      return formatBreakdown(r) + rankText + notes;
    case 'markdown':
      return formatBreakdownMarkdown(r) + rankText + notes;
    case 'json': {
      const json = {
        ...estimateToJSON(r),
        ...(ranks !== undefined
          ? {
              ranks: ranks.map(({ rank, stage, dpRank, peak, parameters, gradients, optimizer }) => ({
                rank,
                stage,
                dpRank,
                peak,
                parameters,
                gradients,
                optimizer,
              })),
            }
          : {}),
        ...(kv !== undefined ? { kvCache: kv } : {}),
        ...(ref.hub !== undefined ? { hub: hubJSON(ref.hub) } : {}),
        ...(verdict !== undefined ? { fit: fitJSON(gpu!, verdict) } : {}),
      };
      return `${JSON.stringify(json, null, 2)}\n`;
    }
    case 'explain':
      return formatExplain(explain(r));
    case 'svg':
      return breakdownSvg(r, chartOptions);
  }
}

/** The verdict's lines in --format json (the estimate is the document's own). */
function fitJSON(gpu: string, v: FitResult): Record<string, unknown> {
  return {
    gpu,
    fits: v.fits,
    verdict: v.verdict,
    capacity: v.capacity,
    capacityFrom: v.capacityFrom,
    runtime: v.runtime,
    usable: v.usable,
    reserved: v.reserved,
    reservedFrom: v.reservedFrom,
    allocated: v.allocated,
    fragmentation: v.fragmentation,
    needed: v.needed,
    budget: v.budget,
    headroom: v.headroom,
    ...(v.oom !== undefined ? { oom: v.oom } : {}),
  };
}

/** --all-ranks: every rank of the job (its plan less the rank one estimate names); too many ranks is --gpus's error. */
function allRanks(model: Layer, options: EstimateOptions): readonly RankFigures[] {
  const { rank: _rank, ...plan } = options.parallel!;
  try {
    return estimateRanks(model, { ...options, timeline: false, parallel: plan });
  } catch (error) {
    const issue = error instanceof VramError ? error.issues[0] : undefined;
    if (issue?.code === 'too-many-ranks')
      usage('--gpus', 'is more ranks than --all-ranks lists: estimate the ones you need with --rank R', { expected: issue.expected, received: issue.received });
    throw error;
  }
}

/** Every rank's peak and states, runs of equal ranks on one line (`0-6`). */
function formatRanks(ranks: readonly RankFigures[], markdown: boolean): string {
  const staged = ranks.some((r) => r.stage > 0);
  // With pipeline stages each rank's stage is a column (ranks of one stage merge into runs).
  const cells = (r: RankFigures) => [
    ...(staged ? [String(r.stage)] : []),
    ...[r.peak, r.parameters, r.gradients, r.optimizer].map((b) => formatBytes(b as number)),
  ];
  const runs: { first: number; last: number; cells: string[] }[] = [];
  for (const r of ranks) {
    const row = cells(r);
    const prev = runs.at(-1);
    if (prev !== undefined && prev.cells.join() === row.join()) prev.last = r.rank;
    else runs.push({ first: r.rank, last: r.rank, cells: row });
  }
  const head = ['rank', ...(staged ? ['stage'] : []), 'peak', 'parameters', 'gradients', 'optimizer'];
  const rows = runs.map((run) => [run.first === run.last ? String(run.first) : `${run.first}-${run.last}`, ...run.cells]);
  if (markdown)
    return [
      `| ${head.join(' | ')} |`,
      `| --- | ${head
        .slice(1)
        .map(() => '---:')
        .join(' | ')} |`,
      ...rows.map((row) => `| ${row.join(' | ')} |`),
      '',
    ].join('\n');
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  return [`Every rank (${ranks.length}):`, line(head), ...rows.map(line), ''].join('\n');
}

/** The checkpoint's line under an estimate of a Hub model. */
function hubNote(ref: ModelRef): string {
  const hub = ref.hub;
  if (hub === undefined) return '';
  const at = `${hub.repo}@${hub.revision}${hub.commit !== undefined && hub.commit !== hub.revision ? ` (${hub.commit.slice(0, 12)})` : ''}`;
  const c = hub.checkpoint;
  if (c === undefined)
    return `\nHub ${at}: no safetensors checkpoint to check the ${hub.parameters.toLocaleString('en-US')} parameters of config.json against.\n`;
  const dtypes = Object.entries(c.byDtype)
    .map(([d, v]) => `${d} ${v.parameters.toLocaleString('en-US')}`)
    .join(', ');
  const files = `${c.files.length} safetensors file${c.files.length === 1 ? '' : 's'}`;
  return `\nHub ${at}: ${files}, ${c.parameters.toLocaleString('en-US')} parameters (${dtypes}), ${formatBytes(c.bytes)} of weights; ${hub.mismatch ?? 'the model built from config.json has as many'}.\n`;
}

/** The Hub lookup in --format json. */
function hubJSON(hub: HubModel): Record<string, unknown> {
  return {
    repo: hub.repo,
    revision: hub.revision,
    commit: hub.commit ?? null,
    parameters: hub.parameters,
    checkpoint: hub.checkpoint ?? null,
    mismatch: hub.mismatch ?? null,
  };
}

/** Mixture-of-experts models: the active parameters per token next to the total; MLA: what its cache holds. */
function moeNote(model: Layer, total: number): string {
  const meta = model.kind === 'module' ? model.meta : undefined;
  const moe = meta?.moe;
  let note = '';
  if (moe !== undefined) {
    const ep = meta?.expertParallel;
    const whole = wholeParams(model as { meta?: ModelMeta }, total);
    const rank =
      ep === undefined
        ? ''
        : ` Expert parallel ${ep.size}: rank ${ep.rank} holds ${moe.experts / ep.size} of the ${moe.experts} routed experts of each MoE layer, ${formatCount(total)} parameters.`;
    note += `\nMixture of experts: ${formatCount(whole)} parameters, ${formatCount(activeParams(model as { meta?: ModelMeta }, total))} active per token (${moe.k} of ${moe.experts} routed experts in ${moe.moeLayers} MoE layers${moe.sharedExperts > 0 ? `, ${moe.sharedExperts} shared` : ''}).${rank}\n`;
  }
  if (meta?.mla !== undefined)
    note += `Multi-head latent attention: the cache holds the latent, ${meta.mla.latentPerToken} elements per token and layer (kv_lora_rank + qk_rope_head_dim).\n`;
  return note;
}

/** The estimate of one configuration. */
export const estimateCommand: ModelCommand<'estimate'> = {
  name: 'estimate',
  summary: 'estimate one configuration',
  named: 'an estimate',
  help: HELP,
  words: 0,
  model: true,
  run: runEstimate,
};
