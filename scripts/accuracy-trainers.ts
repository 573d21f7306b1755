/**
 * The trainers' section of docs/accuracy.md: transformers' Trainer, TRL's SFTTrainer and
 * GRPOTrainer measured by tools/oracle/trainers_cpu.py (test/fixtures/trainers and the holdout
 * sets), beside trainerStep / sftStep / grpoStep given the same arguments.
 */
import { existsSync } from 'node:fs';
import { compareTrainerFixture, loadTrainerFixtures, type TrainerComparison } from '../test/helpers/trainers-oracle.js';

const n = (x: number) => (Number.isNaN(x) ? '—' : x.toLocaleString('en-US'));
const pct = (x: number) => (Number.isNaN(x) ? '—' : `${x >= 0 ? '+' : ''}${(x * 100).toFixed(2)}%`);

/** Rows of a fixture folder; cases vram-ts refuses are listed apart with the field refused. */
function rowsOf(folder: string): { rows: TrainerComparison[]; refused: string[] } {
  const rows: TrainerComparison[] = [];
  const refused: string[] = [];
  for (const f of loadTrainerFixtures(folder)) {
    try {
      rows.push(...compareTrainerFixture(f));
    } catch (error) {
      refused.push(`| ${f.id} | ${(error as Error).message.split('\n')[0]} |`);
    }
  }
  return { rows, refused };
}

function summary(label: string, rows: readonly TrainerComparison[]): string[] {
  const groups = new Map<string, TrainerComparison[]>();
  for (const r of rows) {
    const key = `${r.trainer} | ${r.figure}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  return [...groups].map(([key, list]) => {
    const errors = list.map((r) => Math.abs(r.error));
    const max = Math.max(...errors);
    const mean = errors.reduce((a, b) => a + b, 0) / errors.length;
    return `| ${label} | ${key} | ${list.length} | ${(mean * 100).toFixed(2)}% | ${(max * 100).toFixed(2)}% | ${
      max <= 0.03
        ? 'yes'
        : `no (${list
            .filter((r) => Math.abs(r.error) > 0.03)
            .map((r) => r.id)
            .join(', ')})`
    } |`;
  });
}

function table(rows: readonly TrainerComparison[]): string {
  return `| case | figure | real trainer (bytes) | vram-ts | error |
| --- | --- | ---: | ---: | ---: |
${rows.map((r) => `| ${r.id} | ${r.figure} | ${n(r.measured)} | ${n(r.estimated)} | ${pct(r.error)} |`).join('\n')}`;
}

/** The section's Markdown. */
export function trainersSection(): string {
  const sets = [
    { label: 'development', folder: 'trainers' },
    { label: 'holdout 1 (seed 2013)', folder: 'trainers-holdout' },
    { label: 'holdout 2 (seed 2014)', folder: 'trainers-holdout2' },
    { label: 'holdout 3 (seed 2015)', folder: 'trainers-holdout3' },
    { label: 'holdout 4 (seed 2016)', folder: 'trainers-holdout4' },
    { label: 'holdout 5 (seed 2017)', folder: 'trainers-holdout5' },
    { label: 'holdout 6 (seed 2018)', folder: 'trainers-holdout6' },
  ].filter((s) => existsSync(new URL(`../test/fixtures/${s.folder}/`, import.meta.url)));
  const results = sets.map((s) => ({ ...s, ...rowsOf(s.folder) }));
  const refused = results.flatMap((r) => r.refused);
  return `Measured on the real trainers: \`tools/oracle/trainers_cpu.py\` runs transformers 5.18.0's \`Trainer\`,
TRL 1.13.0's \`SFTTrainer\` and \`GRPOTrainer\` (PEFT 0.21.0, accelerate 1.15.0) on PyTorch 2.13 CPU,
random-weight models from small configs (eager attention), and records the live allocator bytes of
every phase from the profiler's memory events (tools/oracle/TRAINERS.md). vram-ts is given exactly
the arguments the trainer got (the case's and the harness's, \`device: 'cpu'\`). The step compared is
a steady one (GRPO: the last step that generated). A phase of several micro-steps is compared at its
highest. Holdout sets were drawn at random (tools/oracle/trainers_holdout.py), measured once and
compared blind before anything was changed for them, then used to find what was missing: the first
(16 cases) had 13 within 3% on every figure, the second 23 of 24, the third 21 of 24, the fourth
23 of 24, the fifth 20 of 24; the sixth, measured and compared once after the last change, 24 of 24.
One case stays outside 3% (holdout 5's ho22_grpo_llama_h32_l1_v904, prefill: a hidden-32 model whose
prefill peaks in the MLP, where the profiler shows a 62,464-byte temporary inside a bf16 \`aten::mm\` that
vram-ts does not model, cause not identified, and ~50 KB more not accounted for).

| set | trainer \\| figure | rows | mean error | max error | all within 3% |
| --- | --- | ---: | ---: | ---: | --- |
${results.flatMap((r) => summary(r.label, r.rows)).join('\n')}

Refused (a setting vram-ts does not model: the error names it):

${refused.length === 0 ? 'None.' : `| case | error |\n| --- | --- |\n${refused.join('\n')}`}

${results.map((r) => `### ${r.label[0]!.toUpperCase()}${r.label.slice(1)}\n\n${table(r.rows)}`).join('\n\n')}

Read, not measured: Liger's fused linear cross-entropy (\`use_liger_kernel\`: refused until measured),
vLLM generation (its rules: the next section), CUDA (the same rules; the device's 512-byte blocks and kernels differ).`;
}
