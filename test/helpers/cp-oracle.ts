/**
 * Reading tools/oracle/cp_cpu.py's fixtures (real transformers 4.40.2 Llama, sdpa, under
 * PyTorch's context_parallel, torch 2.13 CPU, the fake process group) and estimating each
 * case's rank as vram-ts builds it. Shared by the context-parallel test and `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, fromHFConfig, type Estimate } from '../../src/index.js';

export interface CpEvent {
  readonly phase: string;
  readonly ring?: string | null;
  readonly op?: string;
  readonly bytes: number;
}

export interface CpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Readonly<Record<string, unknown>>;
    readonly transformers: string;
    readonly input: readonly number[];
    readonly dtype: 'float32' | 'bfloat16';
    readonly cp: number;
    readonly rank: number;
    readonly loadBalance?: boolean;
    readonly optimizer: 'sgd';
  };
  readonly params: { readonly local?: number; readonly whole?: number } | number;
  readonly savedBytes: number;
  readonly train: Readonly<
    Record<
      string,
      {
        readonly livePeakBytes: number;
        readonly gradBytes: number;
        readonly paramBytes: number;
        readonly optimizerStateBytes: number;
        readonly events?: readonly CpEvent[] | null;
      }
    >
  >;
}

export function loadCpFixtures(): CpFixture[] {
  return loadJsonFixtures<CpFixture>('cp-cpu', (f) => /^cp\d.*\.json$/.test(f));
}

/** The case's rank, built and estimated as a user would (CPU, PyTorch 2 rules). */
export function estimateCpFixture(fx: CpFixture): Estimate<number> {
  const c = fx.case;
  const cp = c.cp > 1 ? { contextParallel: { size: c.cp, rank: c.rank, loadBalance: c.loadBalance ?? true } } : {};
  const model = fromHFConfig(c.config, {
    transformers: c.transformers,
    attention: 'sdpa',
    useCache: false,
    ...(c.dtype === 'bfloat16' ? { dtype: 'bfloat16' as const } : {}),
    ...cp,
  });
  return estimate(model, {
    input: c.input,
    device: 'cpu',
    framework: 'torch-2',
    optimizer: c.optimizer,
    timeline: false,
    ...(c.cp > 1 ? { parallel: { dp: 1, cp: c.cp } } : {}),
  }) as Estimate<number>;
}
