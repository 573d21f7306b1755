/**
 * Reading tools/oracle/ep_cpu.py's fixtures (real, unmodified transformers 5.18.0 MoE decoders
 * under Hugging Face's expert parallelism, PyTorch 2.13 CPU, the fake process group) and
 * estimating each case's rank as vram-ts builds it. Shared by the expert-parallel test and
 * `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, fromHFConfig, type Estimate } from '../../src/index.js';

export interface EpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Readonly<Record<string, unknown>>;
    readonly transformers: string;
    readonly attention: 'eager' | 'sdpa';
    readonly experts: 'eager' | 'grouped_mm' | 'batched_mm';
    readonly input: readonly number[];
    readonly ep: number;
    readonly rank: number;
    readonly optimizer: 'sgd';
  };
  readonly params: { readonly whole: number; readonly local: number };
  readonly savedBytes: number;
  readonly routing: { readonly layers: Readonly<Record<string, { readonly globalPerExpert: readonly number[]; readonly perLocalExpert: readonly number[] }>> };
  readonly train: Readonly<
    Record<string, { readonly livePeakBytes: number; readonly gradBytes: number; readonly paramBytes: number; readonly optimizerStateBytes: number }>
  >;
}

export function loadEpFixtures(): EpFixture[] {
  return loadJsonFixtures<EpFixture>('ep-cpu', (f) => f.startsWith('ep_') && f.endsWith('.json'));
}

/** The case's rank with the routing it recorded, built and estimated as a user would (CPU, PyTorch 2 rules). */
export function estimateEpFixture(fx: EpFixture): Estimate<number> {
  const c = fx.case;
  if (c.experts === 'batched_mm') throw new Error('batched_mm is not modelled');
  const expertTokens = Object.values(fx.routing.layers).map((l) => l.globalPerExpert);
  const ep = c.ep > 1 ? { expertParallel: { size: c.ep, rank: c.rank } } : {};
  const model = fromHFConfig(c.config, {
    transformers: c.transformers,
    attention: c.attention,
    useCache: false,
    moe: { experts: c.experts, expertTokens },
    ...ep,
  });
  return estimate(model, {
    input: c.input,
    device: 'cpu',
    framework: 'torch-2',
    optimizer: c.optimizer,
    timeline: false,
    ...(c.ep > 1 ? { parallel: { dp: 1, ep: c.ep } } : {}),
  }) as Estimate<number>;
}
