/**
 * Reading tools/oracle/tp_cpu.py's fixtures (real transformers 4.40.2 Llama under DTensor
 * tensor/sequence parallelism, PyTorch 2.13 CPU, the fake process group) and estimating each
 * case's rank as vram-ts builds it. Shared by the tensor-parallel test and `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, fromHFConfig, type Estimate } from '../../src/index.js';

export interface TpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Readonly<Record<string, unknown>>;
    readonly transformers: string;
    readonly input: readonly number[];
    readonly tp: number;
    readonly rank: number;
    readonly sequenceParallel: boolean;
    readonly lossParallel: boolean;
    readonly optimizer: 'sgd' | 'adam';
    readonly retie?: boolean;
  };
  readonly params: { readonly whole: number; readonly local: number };
  readonly savedBytes: number;
  readonly train: Readonly<
    Record<string, { readonly livePeakBytes: number; readonly gradBytes: number; readonly paramBytes: number; readonly optimizerStateBytes: number }>
  >;
  readonly paramTable: readonly { readonly name: string; readonly param: readonly number[]; readonly grad: readonly number[] | null }[];
}

export function loadTpFixtures(): TpFixture[] {
  return loadJsonFixtures<TpFixture>('tp-cpu');
}

/** The case's rank, built and estimated as a user would (CPU, PyTorch 2 rules). */
export function estimateTpFixture(fx: TpFixture): Estimate<number> {
  const c = fx.case;
  const tp =
    c.tp > 1
      ? { tensorParallel: { size: c.tp, rank: c.rank, sequenceParallel: c.sequenceParallel, lossParallel: c.lossParallel, retie: c.retie ?? false } }
      : {};
  const model = fromHFConfig(c.config, { transformers: c.transformers, attention: 'eager', useCache: false, ...tp });
  return estimate(model, { input: c.input, device: 'cpu', framework: 'torch-2', optimizer: c.optimizer, timeline: false }) as Estimate<number>;
}
