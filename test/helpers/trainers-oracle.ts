/**
 * Reading tools/oracle/trainers_cpu.py's fixtures (the real transformers 5.18 Trainer, TRL 1.13
 * SFTTrainer and GRPOTrainer, PEFT 0.21, accelerate 1.15 on PyTorch 2.13 CPU) and estimating each
 * case with trainerStep / sftStep / grpoStep from the same arguments — the case's own and every
 * field the harness set (tools/oracle/TRAINERS.md). Shared by the fidelity test and `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { fromHFConfig, grpoStep, sftStep, trainerStep, type HFConfig, type TrainerStepEstimate } from '../../src/index.js';

export interface TrainerPhaseRecord {
  readonly name: string;
  readonly micro: number | null;
  readonly start: number;
  readonly peak: number;
  readonly end: number;
}

export interface TrainerFixture {
  readonly id: string;
  readonly case: {
    readonly trainer: 'trainer' | 'sft' | 'grpo';
    readonly config: HFConfig;
    readonly attention?: 'eager' | 'sdpa';
    readonly lora: Readonly<Record<string, unknown>> | null;
    readonly args: Readonly<Record<string, unknown>>;
    readonly data: { readonly sequence?: number; readonly prompt?: number };
  };
  readonly harness: { readonly args: Readonly<Record<string, unknown>> };
  readonly params: { readonly total: number; readonly trainable: number };
  readonly optimizerStateBytes: number;
  readonly between: number;
  readonly steps: readonly { readonly index: number; readonly peak: number; readonly generated: boolean; readonly phases: readonly TrainerPhaseRecord[] }[];
}

/**
 * Holdout cases outside 3%, as measured after the last change (reported on the accuracy page and
 * in the issue): test/fidelity/trainers.test.ts holds each figure within its recorded miss, and
 * fails once it comes within 3%, so that a fix removes the entry.
 */
export const KNOWN_MISSES: Readonly<Record<string, { readonly figure: string; readonly within: number; readonly why: string }>> = {
  // Holdout 5: a one-layer model of hidden 32 whose prefill peaks in the MLP, where the profiler shows
  // a 62,464-byte temporary inside a bf16 aten::mm (cause not identified, not modelled) and another
  // ~50 KB that is not accounted for.
  ho22_grpo_llama_h32_l1_v904: { figure: 'prefill', within: 0.09, why: 'a temporary inside a bf16 aten::mm in a tiny MLP, not modelled' },
};

/** Windows the oracle records around others (not phases of their own). */
const NESTING = new Set(['training_step', 'prepare_inputs', 'rollout', 'generate', 'score']);

export function loadTrainerFixtures(folder = 'trainers'): TrainerFixture[] {
  return loadJsonFixtures<TrainerFixture>(folder);
}

/** One compared figure of a case. */
export interface TrainerComparison {
  readonly id: string;
  readonly trainer: string;
  readonly figure: string;
  readonly measured: number;
  readonly estimated: number;
  readonly error: number;
}

/** The case's estimate, from exactly the arguments the real trainer got. */
export function estimateTrainerFixture(f: TrainerFixture): TrainerStepEstimate {
  const model = fromHFConfig(f.case.config, { attention: f.case.attention ?? 'eager', transformers: '5.18.0' });
  const config = { ...f.case.args, ...f.harness.args };
  const options = { device: 'cpu' as const, peft: f.case.lora };
  if (f.case.trainer === 'trainer') return trainerStep(model, config, { ...options, sequence: f.case.data.sequence! });
  if (f.case.trainer === 'sft')
    return sftStep(model, config, { ...options, ...(f.case.data.sequence !== undefined ? { sequence: f.case.data.sequence } : {}) });
  return grpoStep(model, config, { ...options, prompt: f.case.data.prompt! });
}

/**
 * The step compared (GRPO: the last step with generation; the others: the last, a steady step)
 * and its phases' peaks (a phase of several micro-steps: the highest), beside ours.
 */
export function compareTrainerFixture(f: TrainerFixture, t: TrainerStepEstimate = estimateTrainerFixture(f)): TrainerComparison[] {
  const step = f.case.trainer === 'grpo' ? [...f.steps].reverse().find((s) => s.generated)! : f.steps[f.steps.length - 1]!;
  const measured = new Map<string, number>();
  for (const p of step.phases) if (!NESTING.has(p.name)) measured.set(p.name, Math.max(measured.get(p.name) ?? 0, p.peak));
  const row = (figure: string, m: number, e: number): TrainerComparison => ({
    id: f.id,
    trainer: f.case.trainer,
    figure,
    measured: m,
    estimated: e,
    error: e / m - 1,
  });
  const rows = [row('step peak', step.peak, t.peak), row('between steps', f.between, t.between)];
  for (const [name, peak] of measured) {
    const ours = t.phases.find((p) => p.name === name);
    rows.push(row(name, peak, ours === undefined ? Number.NaN : ours.peak));
  }
  for (const p of t.phases) if (!measured.has(p.name)) rows.push(row(p.name, Number.NaN, p.peak));
  return rows;
}
