/**
 * The `vram-ts` command: a thin shell over the library. Exit codes: 0 fine, 1 does not fit
 * (with --check), 2 bad input (with a one-line reason on stderr).
 */
import { closeSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  VramError,
  breakdownSvg,
  estimate,
  estimateToJSON,
  explain,
  fits,
  formatBreakdown,
  formatBreakdownMarkdown,
  formatBytes,
  formatCount,
  formatExplain,
  korthikanti,
  decoderMeta,
  kvCache,
  fromHFConfig,
  grpoStep,
  llm,
  LLMS,
  maxFitting,
  memoryBudget,
  mobilenetV3Large,
  mobilenetV3Small,
  safetensorsHeaderLength,
  safetensorsSummary,
  summary,
  sym,
  timelineSvg,
  type Dim,
  type EstimateOptions,
  type HFConfigOptions,
  isDType,
  DEFAULT_TRANSFORMERS,
  type Framework,
  type Layer,
  type OptimizerName,
  type Precision,
} from '../index.js';

const HELP = `vram-ts — how much GPU memory a model needs to train or run, and where it goes.

Usage
  vram-ts <model> [options]             estimate one configuration
  vram-ts fit <model> --gpu <gpu> --solve batch|seq|resolution [options]
                                        the largest batch / context / resolution that fits
  vram-ts grpo <model> --group G --prompt P --completion L [--prompts N] [--micro-batch M]
                                        a GRPO step: generation, reference scoring, training
  vram-ts korthikanti --seq S --batch B --hidden H --heads A
                                        Korthikanti et al.'s per-layer activations next to
                                        vram-ts's op-level count for a GPT-2 layer of that shape
  vram-ts --safetensors FILE            parameters and dtypes from a checkpoint's header

<model>: a catalog name (mobilenet_v3_small, mobilenet_v3_large, ${LLMS.map((e) => e.id).join(', ')})
         or the path of a Hugging Face config.json (llama, qwen2, mistral, gpt2)

Options
  --input CxHxW          image size for CNNs (default 3x224x224)
  --batch N              batch size (default 1)
  --seq N                sequence length for LLMs (default 512)
  --classes N            classifier outputs for the CNN catalog (default 1000)
  --train | --infer      a training step (default) or an inference forward
  --optimizer NAME       sgd, sgd_momentum, adam (default), adamw, adafactor, lion, adam8bit
  --precision P          fp32 (default), bf16, fp16, amp-bf16, amp-fp16
  --checkpointing        activation checkpointing of every block (decoder layers, CNN feature blocks)
  --lora-rank R          LoRA adapters of rank R on the attention projections (--qlora: 4-bit base)
  --attention A          eager, sdpa, flash (LLMs; default: what transformers picks, sdpa)
  --transformers X.Y.Z   the Hugging Face transformers release whose code to follow
                         (default ${DEFAULT_TRANSFORMERS}; 4.40.0 – 4.57.6 and 5.17.0 – 5.18.0 were read)
  --dtype D              parameter dtype of an LLM (default: the config's torch_dtype)
  --no-cache             forward with use_cache=False (default: the config's use_cache, true)
  --device D             cuda (default) or cpu
  --framework F          torch-2 (default) or torch-1.13: autograd rules where versions differ
  --gpu NAME|SIZE        A800-80GB, H100, RTX-4090, 24GB, … : says whether it fits
  --check                exit 1 when it does not fit the --gpu
  --format F             table (default), json, markdown, torchsummary, torchinfo, explain
  --svg FILE             write the timeline chart (SVG) of the step to FILE
  -h, --help             this help

Examples
  vram-ts mobilenet_v3_small --input 3x4000x2672 --classes 3 --train
  vram-ts qwen2.5-0.5b --seq 4096 --batch 8 --precision bf16 --gpu A800-80GB
  vram-ts fit qwen2.5-0.5b --gpu A800-80GB --train --solve seq --precision bf16
  vram-ts grpo qwen2.5-0.5b --group 8 --prompt 512 --completion 4096 --precision bf16 --attention sdpa --micro-batch 1
  vram-ts ./config.json --infer --seq 8192 --format json
  vram-ts --safetensors model.safetensors
`;

class UsageError extends Error {}

function intOption(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}

function loadModel(name: string, values: Record<string, unknown>): { model: Layer; kind: 'cnn' | 'llm' } {
  const key = name.toLowerCase().replace(/-/g, '_');
  const classes = intOption(values.classes as string | undefined, 'classes', 1000);
  if (key === 'mobilenet_v3_small') return { model: mobilenetV3Small({ numClasses: classes }), kind: 'cnn' };
  if (key === 'mobilenet_v3_large') return { model: mobilenetV3Large({ numClasses: classes }), kind: 'cnn' };
  const attention = values.attention as 'eager' | 'sdpa' | 'flash' | undefined;
  if (attention !== undefined && !['eager', 'sdpa', 'flash'].includes(attention)) throw new UsageError(`--attention must be eager, sdpa or flash, got ${attention}`);
  const dtype = values.dtype as string | undefined;
  if (dtype !== undefined && !isDType(dtype)) throw new UsageError(`--dtype must be a dtype (float32, bfloat16, float16), got ${JSON.stringify(dtype)}`);
  const decoder: HFConfigOptions = {
    ...(attention !== undefined ? { attention } : {}),
    ...(values.transformers !== undefined ? { transformers: values.transformers as string } : {}),
    ...(dtype !== undefined && isDType(dtype) ? { dtype } : {}),
    ...(values['no-cache'] ? { useCache: false } : {}),
  };
  if (LLMS.some((e) => e.id === name.toLowerCase() || e.repo.toLowerCase() === name.toLowerCase())) return { model: llm(name, decoder), kind: 'llm' };
  if (name.endsWith('.json') || name.includes('/')) {
    let text: string;
    try {
      text = readFileSync(name, 'utf8');
    } catch {
      throw new UsageError(`cannot read ${name}`);
    }
    let config: unknown;
    try {
      config = JSON.parse(text);
    } catch {
      throw new UsageError(`${name} is not valid JSON`);
    }
    return { model: fromHFConfig(config as Record<string, unknown>, decoder), kind: 'llm' };
  }
  throw new UsageError(`unknown model ${JSON.stringify(name)}: use a catalog name (see --help) or a config.json path`);
}

function estimateOptions(values: Record<string, unknown>, kind: 'cnn' | 'llm', model: Layer, solve?: string): EstimateOptions {
  const batch: Dim = solve === 'batch' ? sym('B') : intOption(values.batch as string | undefined, 'batch', 1);
  let input: Dim[];
  if (kind === 'llm') {
    const seq: Dim = solve === 'seq' ? sym('S') : intOption(values.seq as string | undefined, 'seq', 512);
    input = [batch, seq];
  } else {
    const text = (values.input as string | undefined) ?? '3x224x224';
    const parts = text.split(/[x×,]/).map((p) => Number(p));
    if (parts.length !== 3 || parts.some((p) => !Number.isSafeInteger(p) || p < 1)) throw new UsageError(`--input must look like 3x224x224, got ${JSON.stringify(text)}`);
    const side = sym('R');
    input = solve === 'resolution' ? [batch, parts[0]!, side, side] : [batch, ...parts];
  }
  const train = !values.infer;
  const precision = values.precision as Precision | undefined;
  const rank = values['lora-rank'] === undefined ? undefined : intOption(values['lora-rank'] as string, 'lora-rank', 8);
  return {
    input,
    mode: train ? 'train' : 'inference',
    ...(precision !== undefined ? { precision } : {}),
    ...(values.optimizer !== undefined ? { optimizer: values.optimizer as OptimizerName } : {}),
    ...(values.device !== undefined ? { device: values.device as 'cuda' | 'cpu' } : {}),
    ...(values.framework !== undefined ? { framework: frameworkOption(values.framework as string) } : {}),
    ...(values.checkpointing ? { checkpoint: kind === 'llm' ? decoderLayers(model) : { within: 'features', every: 1 } } : {}),
    ...(rank !== undefined ? { lora: { rank, quantizeBase: Boolean(values.qlora) } } : {}),
  };
}

/** Gradient checkpointing as transformers applies it: every decoder layer is one region. */
function decoderLayers(model: Layer): { modules: string[] } {
  const meta = decoderMeta(model);
  return { modules: Array.from({ length: meta.layers }, (_, i) => (meta.family === 'gpt2' ? `transformer.h.${i}` : `model.layers.${i}`)) };
}

function frameworkOption(value: string): Framework {
  if (value !== 'torch-2' && value !== 'torch-1.13') throw new UsageError(`--framework must be torch-2 or torch-1.13, got ${JSON.stringify(value)}`);
  return value;
}

/** Korthikanti et al.'s formula beside vram-ts's count for one GPT-2 layer (16-bit, dropout 0.1). */
function korthikantiReport(values: Record<string, unknown>): string {
  const seq = intOption(values.seq as string | undefined, 'seq', 2048);
  const batch = intOption(values.batch as string | undefined, 'batch', 1);
  const hidden = intOption(values.hidden as string | undefined, 'hidden', 1024);
  const heads = intOption(values.heads as string | undefined, 'heads', 16);
  const paper = korthikanti({ seq, batch, hidden, heads }) as number;
  const layer = (layers: number) =>
    estimate(fromHFConfig({ model_type: 'gpt2', n_embd: hidden, n_head: heads, n_layer: layers, n_positions: seq, vocab_size: 1024, attn_pdrop: 0.1, resid_pdrop: 0.1, embd_pdrop: 0.1 }, { attention: 'eager' }), { input: [batch, seq], precision: 'bf16', timeline: false }).bytes.activations as number;
  const ours = layer(2) - layer(1);
  const sbh = seq * batch * hidden;
  return [
    `One transformer layer, s=${seq} b=${batch} h=${hidden} a=${heads}, 16-bit activations:`,
    `  Korthikanti et al. 2022, sbh(34 + 5as/h):      ${formatCount(paper)} B (${formatBytes(paper)}) = sbh × ${(paper / sbh).toFixed(2)}`,
    `  vram-ts, Hugging Face GPT-2 layer op by op:  ${formatCount(ours)} B (${formatBytes(ours)}) = sbh × ${(ours / sbh).toFixed(2)}`,
    '',
  ].join('\n');
}

function readSafetensors(file: string): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    throw new UsageError(`cannot read ${file}`);
  }
  try {
    const first = new Uint8Array(8);
    readSync(fd, first, 0, 8, 0);
    const length = safetensorsHeaderLength(first);
    const header = new Uint8Array(length);
    readSync(fd, header, 0, length, 8);
    const s = safetensorsSummary(JSON.parse(new TextDecoder().decode(header)));
    const dtypes = Object.entries(s.byDtype).map(([d, n]) => `${d} ${n.toLocaleString('en-US')}`).join(', ');
    return `${file}: ${s.tensors} tensors, ${s.params.toLocaleString('en-US')} parameters (${dtypes}), ${formatBytes(s.bytes)} of weights\n`;
  } finally {
    closeSync(fd);
  }
}

/** Runs the command; returns the exit code. Output goes to the given writers. */
export function run(argv: readonly string[], out: (text: string) => void, err: (text: string) => void): number {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        input: { type: 'string' },
        batch: { type: 'string' },
        seq: { type: 'string' },
        classes: { type: 'string' },
        train: { type: 'boolean' },
        infer: { type: 'boolean' },
        optimizer: { type: 'string' },
        precision: { type: 'string' },
        checkpointing: { type: 'boolean' },
        'lora-rank': { type: 'string' },
        qlora: { type: 'boolean' },
        attention: { type: 'string' },
        device: { type: 'string' },
        framework: { type: 'string' },
        transformers: { type: 'string' },
        dtype: { type: 'string' },
        'no-cache': { type: 'boolean' },
        gpu: { type: 'string' },
        check: { type: 'boolean' },
        format: { type: 'string' },
        svg: { type: 'string' },
        solve: { type: 'string' },
        safetensors: { type: 'string' },
        group: { type: 'string' },
        prompt: { type: 'string' },
        completion: { type: 'string' },
        prompts: { type: 'string' },
        'micro-batch': { type: 'string' },
        hidden: { type: 'string' },
        heads: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      out(HELP);
      return 0;
    }
    if (values.safetensors !== undefined) {
      out(readSafetensors(values.safetensors));
      return 0;
    }
    if (positionals[0] === 'korthikanti') {
      out(korthikantiReport(values));
      return 0;
    }
    const fit = positionals[0] === 'fit';
    const grpo = positionals[0] === 'grpo';
    const name = fit || grpo ? positionals[1] : positionals[0];
    if (name === undefined) throw new UsageError('no model given (see --help)');
    const { model, kind } = loadModel(name, values);
    if (fit) {
      if (values.gpu === undefined) throw new UsageError('fit needs --gpu');
      const solve = values.solve ?? 'batch';
      if (!['batch', 'seq', 'resolution'].includes(solve)) throw new UsageError(`--solve must be batch, seq or resolution, got ${solve}`);
      if (solve === 'seq' && kind !== 'llm') throw new UsageError('--solve seq needs an LLM');
      if (solve === 'resolution' && kind !== 'cnn') throw new UsageError('--solve resolution needs a CNN');
      const symbol = solve === 'batch' ? 'B' : solve === 'seq' ? 'S' : 'R';
      const best = maxFitting(model, symbol, { ...estimateOptions(values, kind, model, solve), gpu: values.gpu });
      out(`${best}\n`);
      return best > 0 ? 0 : 1;
    }
    if (grpo) {
      if (kind !== 'llm') throw new UsageError('grpo needs an LLM');
      const { input, mode, ...common } = estimateOptions(values, kind, model);
      const g = grpoStep(model, {
        ...common,
        prompts: intOption(values.prompts, 'prompts', 1),
        group: intOption(values.group, 'group', 8),
        prompt: intOption(values.prompt, 'prompt', 512),
        completion: intOption(values.completion, 'completion', 1024),
        ...(values['micro-batch'] !== undefined ? { microBatch: intOption(values['micro-batch'], 'micro-batch', 1) } : {}),
      });
      const line = (label: string, phase: { peak: number; detail: string }) => `  ${label.padEnd(11)} ${formatBytes(phase.peak).padStart(11)}  ${phase.detail}\n`;
      out(`GRPO step: ${g.sequences} sequences\n${line('generation', g.generation)}${line('reference', g.reference)}${line('training', g.training)}  peak        ${formatBytes(g.peak).padStart(11)}\n`);
      if (values.gpu !== undefined) {
        const budget = memoryBudget(values.gpu);
        out(`${g.peak <= budget ? 'Fits' : 'Does not fit'} ${values.gpu} (${formatBytes(budget)}).\n`);
        if (values.check && g.peak > budget) return 1;
      }
      return 0;
    }
    const options = estimateOptions(values, kind, model);
    const format = values.format ?? 'table';
    if (format === 'torchsummary' || format === 'torchinfo') {
      out(summary(model, { ...options, format }));
      return 0;
    }
    const result = estimate(model, options);
    if (values.svg !== undefined) writeFileSync(values.svg, timelineSvg(result));
    switch (format) {
      case 'table':
        out(formatBreakdown(result));
        break;
      case 'markdown':
        out(formatBreakdownMarkdown(result));
        break;
      case 'json':
        out(`${JSON.stringify(estimateToJSON(result), null, 2)}\n`);
        break;
      case 'explain':
        out(formatExplain(explain(result)));
        break;
      case 'svg':
        out(breakdownSvg(result));
        break;
      default:
        throw new UsageError(`--format must be table, json, markdown, torchsummary, torchinfo or explain, got ${format}`);
    }
    if (kind === 'llm' && options.mode === 'inference') {
      const [batch, seq] = options.input as number[];
      const cache = kvCache(model, { batch: batch!, seq: seq!, dtype: result.ir.settings.paramDtype });
      const held = !values['no-cache'];
      out(`\nKV cache for ${batch} × ${seq} tokens (${result.ir.settings.paramDtype}): ${formatCount(cache)} B (${formatBytes(cache)}), ${held ? 'included in the peak above (use_cache: the forward keeps every layer\'s keys and values)' : 'not included (--no-cache)'}.\n`);
    }
    if (values.gpu !== undefined) {
      const verdict = fits(model, { ...options, gpu: values.gpu });
      const budget = memoryBudget(values.gpu);
      out(`\n${verdict.fits ? 'Fits' : 'Does not fit'} ${values.gpu} (${formatBytes(budget)}): needs ${formatBytes(verdict.needed)}, ${verdict.fits ? 'leaves' : 'short by'} ${formatBytes(Math.abs(verdict.headroom))} (CUDA context and library workspaces not included).\n`);
      if (values.check && !verdict.fits) return 1;
    }
    return 0;
  } catch (error) {
    if (error instanceof UsageError) err(`vram-ts: ${error.message}\n`);
    else if (error instanceof VramError) {
      const issue = error.issues[0]!;
      err(`vram-ts: ${issue.path.length > 0 ? `${issue.path.join('.')}: ` : ''}${issue.message}${issue.received !== undefined ? ` (got ${issue.received})` : ''}\n`);
    } else if (error instanceof TypeError && 'code' in error && String((error as { code: unknown }).code).startsWith('ERR_PARSE_ARGS')) err(`vram-ts: ${error.message}\n`);
    else throw error;
    return 2;
  }
}
