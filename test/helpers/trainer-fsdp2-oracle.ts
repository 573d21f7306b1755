/**
 * tools/oracle/trainer_fsdp2_cpu.py's fixtures (the Hugging Face Trainer under FSDP2, PyTorch 2.13
 * CPU, test/fixtures/trainer-fsdp2-cpu) read back: the TrainingArguments of the run read by
 * fromTrainingArguments and estimated as one rank. Shared by the fidelity test and `npm run accuracy`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { estimate, fromHFConfig, fromTrainingArguments, type TrainingArgumentsReading } from '../../src/index.js';
import { optimizerOf } from '../../src/trainers/step.js';
import type { RankComparison } from './distributed-oracle.js';

export interface TrainerFsdpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Record<string, unknown>;
    readonly transformers: string;
    readonly input: readonly number[];
    readonly world: number;
    readonly rank: number;
    readonly trainer: { readonly mixedPrecision: 'no' | 'bf16'; readonly optim: string };
  };
  readonly trainer: { readonly fsdpConfigGiven: Record<string, unknown>; readonly trainingArguments: { readonly fsdp: string } };
  readonly fsdp: { readonly units: readonly (readonly string[])[] };
  readonly train: Record<string, { readonly livePeakBytes: number; readonly optimizerStateBytes: number }>;
}

const dir = new URL('../fixtures/trainer-fsdp2-cpu/', import.meta.url);

export function loadTrainerFsdpFixtures(): TrainerFsdpFixture[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as TrainerFsdpFixture);
}

/** The run's TrainingArguments (the fields it set), read with the model and the world. */
export function readTrainerFsdpFixture(f: TrainerFsdpFixture): { readonly reading: TrainingArgumentsReading; readonly model: ReturnType<typeof fromHFConfig> } {
  const c = f.case;
  const model = fromHFConfig(c.config, { transformers: c.transformers, attention: 'eager', useCache: false });
  const args = {
    output_dir: 'out',
    per_device_train_batch_size: c.input[0],
    fsdp: f.trainer.trainingArguments.fsdp,
    fsdp_config: f.trainer.fsdpConfigGiven,
    optim: c.trainer.optim,
    report_to: [],
    ...(c.trainer.mixedPrecision === 'bf16' ? { bf16: true } : {}),
  };
  return { reading: fromTrainingArguments(args, { model, worldSize: c.world }), model };
}

/** The rank's peak and optimizer state next to the Trainer's (on the CPU torch's AdamW runs one tensor at a time). */
export function compareTrainerFsdpFixture(f: TrainerFsdpFixture): RankComparison[] {
  const { reading, model } = readTrainerFsdpFixture(f);
  const options = reading.options!;
  const r = estimate(model, {
    ...options,
    optimizer: optimizerOf(reading.resolved.optim, 'cpu'),
    parallel: { ...options.parallel, rank: f.case.rank },
    input: [reading.resolved.batch, f.case.input[1]!],
    device: 'cpu',
    framework: 'torch-2',
    timeline: false,
  });
  const measured = f.train.adamw!;
  const row = (figure: string, pytorch: number, ours: number): RankComparison => ({
    id: f.id,
    torch: '2.13',
    engine: 'fsdp2',
    figure,
    pytorch,
    ours,
    error: (ours - pytorch) / pytorch,
  });
  return [
    row('train peak (adamw)', measured.livePeakBytes, r.bytes.peak as number),
    row('optimizer state (adamw)', measured.optimizerStateBytes, r.bytes.optimizer as number),
  ];
}
