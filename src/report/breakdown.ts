import { estimateResult } from '../estimate.js';
import type { Estimate } from '../estimate-types.js';
import { validate } from '../validate.js';
import { formatDim } from '../sym/format.js';
import { add } from '../sym/ops.js';
import type { IR } from '../trace/ir.js';
import { ljust, pyFixed, pyThousands, rjust } from './pyformat.js';
import { torchsummaryModules } from './torchsummary.js';
import { formatBytes, formatCount } from './units.js';
import { CATEGORIES } from '../memory/ledger.js';

/** What torchsummary's "Forward/backward pass size" is made of, in bytes (4 B per element). */
export interface TorchsummaryDecomposition {
  /** Σ of every printed row's output. */
  readonly rowOutputs: number;
  /** Rows of leaf modules writing a new tensor. */
  readonly leafOutputs: number;
  /** Rows of containers (InvertedResidual, SqueezeExcitation, the model) that repeat a child's output. */
  readonly containerRepeats: number;
  /** Rows of in-place leaves (ReLU/Hardswish with inplace=True) whose output is their input's storage. */
  readonly inplaceRepeats: number;
  /** torchsummary's figure: 2 × rowOutputs ("× 2 for gradients"). */
  readonly forwardBackward: number;
}

/**
 * Splits torchsummary's "Forward/backward pass size" into what it adds up.
 *
 * @example
 * ```ts
 * import { mobilenetV3Small, traceModel } from 'vram-ts';
 * import { torchsummaryDecomposition } from 'vram-ts/internals';
 * const ir = traceModel(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] });
 * console.log(torchsummaryDecomposition(ir).forwardBackward); // 36283248
 * ```
 */
export function torchsummaryDecomposition(ir: IR, wrapped = true): TorchsummaryDecomposition {
  let leafOutputs = 0;
  let containerRepeats = 0;
  let inplaceRepeats = 0;
  const seenStorages = new Set<number>();
  for (const module of torchsummaryModules(ir, wrapped)) {
    const id = module.outputs[0];
    if (id === undefined) continue;
    const tensor = ir.tensors[id]!;
    const bytes = tensor.spec.shape.reduce<number>((a, d) => a * (typeof d === 'number' ? d : NaN), 4);
    if (module.children.length > 0) containerRepeats += bytes;
    else if (seenStorages.has(tensor.storage)) inplaceRepeats += bytes;
    else leafOutputs += bytes;
    seenStorages.add(tensor.storage);
  }
  const rowOutputs = leafOutputs + containerRepeats + inplaceRepeats;
  return { rowOutputs, leafOutputs, containerRepeats, inplaceRepeats, forwardBackward: 2 * rowOutputs };
}

function row(label: string, detail: string, bytes: number | string): string {
  const value = typeof bytes === 'number' ? pyThousands(bytes) : bytes;
  return `  ${ljust(label, 42)} ${ljust(detail, 22)}${rjust(value, 16)}  ${rjust(typeof bytes === 'number' ? formatBytes(bytes) : '', 11)}`;
}

const BREAKDOWN = ['formatBreakdown', 'result'];
const MARKDOWN = ['formatBreakdownMarkdown', 'result'];

/**
 * The default report: what is really held, by category and by module, and why
 * torchsummary's figure differs. Anything but a result of estimate() (a copy too) is a VramError.
 *
 * @example
 * ```ts
 * import { estimate, formatBreakdown, mobilenetV3Small } from 'vram-ts';
 * console.log(formatBreakdown(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] })));
 * ```
 */
export function formatBreakdown(result: Estimate): string {
  validate(result, estimateResult, BREAKDOWN);
  const { ir, bytes, params } = result;
  const input = ir.tensors[ir.inputs[0]!]!.spec;
  const root = result.modules[0]!;
  const lines: string[] = [];
  const mode = ir.settings.gradEnabled ? `training step (model.${ir.settings.training ? 'train' : 'eval'}())` : 'inference (no_grad)';
  const plan = result.parallel;
  const pipeline =
    plan === null || (plan.pp ?? 1) === 1
      ? ''
      : ` · pipeline stage ${plan.stage ?? 0} of ${plan.pp} (${plan.schedule ?? '1f1b'}${plan.schedule === 'interleaved-1f1b' ? `, ${plan.virtualStages ?? 2} stages per rank` : ''})`;
  // Context-parallel ranks are in the engine's group: dp · cp ranks.
  const ranks = plan === null ? 1 : plan.dp * (plan.cp ?? 1);
  const dataParallel =
    plan === null || (plan.engine === undefined && plan.dp === 1)
      ? ''
      : ` · rank ${plan.rank ?? 0} of ${ranks} (${plan.engine ?? 'no engine'}${plan.zero !== undefined ? ` ZeRO-${plan.zero}` : ''})`;
  const tp =
    (plan !== null && (plan.tp ?? 1) > 1 ? ` · tensor parallel ${plan.tp}` : '') +
    (plan !== null && (plan.cp ?? 1) > 1 ? ` · context parallel ${plan.cp}` : '') +
    (plan !== null && (plan.ep ?? 1) > 1 ? ` · expert parallel ${plan.ep}` : '');
  const rank = tp + pipeline + dataParallel;
  lines.push(`${root.className} · input [${input.shape.map(formatDim).join(', ')}] ${input.dtype} · ${mode} · ${ir.settings.device}${rank}`);
  lines.push('');
  lines.push('What is held');
  const symbolic = [bytes.parameters, bytes.buffers, bytes.input, bytes.activations].some((b) => typeof b !== 'number');
  const show = (value: typeof bytes.parameters) => (typeof value === 'number' ? value : `${formatDim(value)}`);
  lines.push(row('parameters', `${pyThousands(params.total)} elements`, show(bytes.parameters)));
  lines.push(row('buffers', 'running statistics, masks', show(bytes.buffers)));
  lines.push(row('input', '', show(bytes.input)));
  lines.push(row('activations saved for backward', 'distinct storages', show(bytes.activations)));
  if (ir.settings.gradEnabled) {
    lines.push(row('gradients', `${pyThousands(params.trainable)} trainable`, show(bytes.gradients)));
    lines.push(row('optimizer state', result.optimizer === null ? 'none' : result.optimizer.name, show(bytes.optimizer)));
  }
  if (result.host !== undefined) {
    // Offloaded: what the rank keeps in host memory instead (not part of the GPU figures above).
    const host = result.host;
    lines.push(row('host memory (offloaded)', '', show(add(add(host.parameters, host.gradients), add(host.optimizer, host.staging)))));
  }
  const at = result.peak;
  lines.push('');
  lines.push(
    `Peak: ${typeof at.bytes === 'number' ? `${pyThousands(at.bytes)} B (${formatBytes(at.bytes)})` : `${formatDim(at.bytes)} B`}${typeof at.bytes === 'number' ? ` at ${at.phase}, ${at.label}` : ''}`,
  );
  if (typeof at.bytes === 'number') {
    lines.push(
      `  ${at.step === 'inference' ? 'inference forward' : `${at.step} step`}${ir.settings.device === 'cuda' ? ', counted in 512-byte CUDA blocks' : ''}; live then:`,
    );
    for (const category of CATEGORIES) {
      const value = at.byCategory[category];
      if (value !== 0) lines.push(row(`  ${category}`, '', show(value)));
    }
  }
  lines.push('');
  lines.push('Saved for backward, by module');
  for (const module of result.modules.filter((m) => m.depth >= 1 && m.depth <= 2)) {
    const name = `${'  '.repeat(module.depth - 1)}${module.path.join('.')} ${module.className}`;
    lines.push(row(name, `${pyThousands(module.params)} params`, show(module.activations)));
  }
  // torchsummary's figure is about image models (a 4-D float input).
  if (!symbolic && ir.settings.gradEnabled && input.shape.length === 4 && input.dtype.startsWith('float')) {
    const ts = torchsummaryDecomposition(ir);
    const mb = (n: number) => pyFixed(n / 2 ** 20, 2);
    lines.push('');
    lines.push(`Why torchsummary says ${mb(ts.forwardBackward)} MB for "Forward/backward pass size"`);
    lines.push(`  It adds the output of every module it hooks: ${mb(ts.rowOutputs)} MB, of which`);
    lines.push(`    ${mb(ts.leafOutputs)} MB new tensors of leaf modules,`);
    lines.push(`    ${mb(ts.containerRepeats)} MB containers repeating a child's output (InvertedResidual, SqueezeExcitation, the model),`);
    lines.push(`    ${mb(ts.inplaceRepeats)} MB in-place activations counting their input's storage again;`);
    lines.push(`  then doubles it "for gradients". Autograd really keeps ${formatBytes(bytes.activations as number)} (${formatCount(bytes.activations)} B):`);
    lines.push('  only what backward needs, each storage once, including the input image where the first conv saves it.');
    lines.push('  Gradients of activations never all exist at once; parameter gradients and optimizer state,');
    lines.push('  which torchsummary leaves out, are sized by the parameters, not by the input. The peak above');
    lines.push('  is the largest total live at one moment of the whole step, simulated op by op.');
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The breakdown as a Markdown table (for issues, READMEs, notebooks), of a result of estimate().
 *
 * @example
 * ```ts
 * import { estimate, formatBreakdownMarkdown, mobilenetV3Small } from 'vram-ts';
 * const md = formatBreakdownMarkdown(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(md.split('\n')[1]); // "| --- | ---: | ---: |"
 * ```
 */
export function formatBreakdownMarkdown(result: Estimate): string {
  validate(result, estimateResult, MARKDOWN);
  const { bytes, ir } = result;
  const cell = (value: typeof bytes.parameters) => (typeof value === 'number' ? pyThousands(value) : `\`${formatDim(value)}\``);
  const human = (value: typeof bytes.parameters) => (typeof value === 'number' ? formatBytes(value) : '');
  const rows: [string, typeof bytes.parameters][] = [
    ['parameters', bytes.parameters],
    ['buffers', bytes.buffers],
    ['input', bytes.input],
    ['activations saved for backward', bytes.activations],
  ];
  if (ir.settings.gradEnabled) rows.push(['gradients', bytes.gradients], [`optimizer state (${result.optimizer?.name ?? 'none'})`, bytes.optimizer]);
  rows.push([`**peak** (${result.peak.step}, ${result.peak.phase})`, bytes.peak]);
  const head = [`| ${result.modules[0]!.className} | bytes | size |`, '| --- | ---: | ---: |'];
  return `${[...head, ...rows.map(([k, v]) => `| ${k} | ${cell(v)} | ${human(v)} |`)].join('\n')}\n`;
}
