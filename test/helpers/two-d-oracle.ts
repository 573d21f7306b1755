/**
 * Reading the 2-D oracles' fixtures — tools/oracle/fsdp2_tp_cpu.py (FSDP2 over dp × DTensor
 * tensor parallelism) and tools/oracle/fsdp2_cp_cpu.py (FSDP2 over the flattened dp × cp mesh
 * around context_parallel), both on a real transformers 4.40.2 Llama, PyTorch 2.13 CPU, the
 * fake process group — and estimating each case's rank as vram-ts builds it. Shared by the
 * 2-D test and `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, fromHFConfig, type DType, type Estimate } from '../../src/index.js';

interface Train {
  readonly livePeakBytes: number;
  readonly paramBytes: number;
  readonly gradBytes: number;
  readonly optimizerStateBytes: number;
}

export interface FsdpTpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Readonly<Record<string, unknown>>;
    readonly transformers: string;
    readonly input: readonly number[];
    readonly dtype: 'float32' | 'bfloat16';
    readonly dp: number;
    readonly tp: number;
    readonly dpRank: number;
    readonly tpRank: number;
    readonly sequenceParallel: boolean;
    readonly lossParallel: boolean;
    readonly optimizer: 'sgd' | 'adamw';
    readonly retie?: boolean;
    readonly fsdp: {
      readonly units: 'layers' | 'titan';
      readonly reshardAfterForward: boolean;
      readonly mp: { readonly paramDtype: DType; readonly reduceDtype: DType } | null;
    };
  };
  readonly savedBytes: number;
  readonly embeddingGrad: {
    readonly blocks: readonly {
      readonly bytes: number;
      readonly alloc: { readonly scope: string | null; readonly top: string };
      readonly liveAfterAlloc: number;
    }[];
  };
  readonly train: Readonly<Record<string, Train>>;
}

export interface FsdpCpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Readonly<Record<string, unknown>>;
    readonly transformers: string;
    readonly input: readonly number[];
    readonly dtype: 'float32' | 'bfloat16';
    readonly dp: number;
    readonly cp: number;
    readonly fsdpMesh: string;
    readonly reshardAfterForward: boolean;
    readonly mp: { readonly paramDtype: DType; readonly reduceDtype: DType } | null;
    readonly loadBalance: boolean;
  };
  readonly mesh: { readonly cpLocalRank: number; readonly fsdpMeshLocalRank: number };
  readonly savedBytes: number;
  readonly train: Readonly<Record<string, Train>>;
}

export interface TpCpFixture {
  readonly id: string;
  readonly case: {
    readonly config: Readonly<Record<string, unknown>>;
    readonly transformers: string;
    readonly input: readonly number[];
    readonly tp: number;
    readonly cp: number;
    readonly sequenceParallel: boolean;
    readonly lossParallel: boolean;
    readonly loadBalance: boolean;
  };
  readonly mesh: { readonly cpRank?: number; readonly tpRank?: number };
  readonly savedBytes: number;
  readonly train: Readonly<Record<string, Train>>;
}

/** TP × CP cases (tools/oracle/tp_cp_cpu.py; its controls with tp or cp 1 included), without the gloo check. */
export const loadTpCpFixtures = (): TpCpFixture[] => loadJsonFixtures<TpCpFixture>('tp-cp-cpu', (f) => /^tp\d+cp\d+.*\.json$/.test(f));

/** FSDP2 × TP cases; torchtitan's newer grouping ([norm, lm_head] as one unit) is left out: vram-ts's units are single modules. */
export const loadFsdpTpFixtures = (): FsdpTpFixture[] => loadJsonFixtures<FsdpTpFixture>('fsdp2-tp-cpu').filter((fx) => fx.case.fsdp.units === 'layers');
/** FSDP2 × CP cases over the flattened dp × cp mesh (torchtitan's); the control over dp alone is left out. */
export const loadFsdpCpFixtures = (): FsdpCpFixture[] => loadJsonFixtures<FsdpCpFixture>('fsdp2-cp-cpu').filter((fx) => fx.case.fsdpMesh === 'dp_shard_cp');

const mixed = (mp: { readonly paramDtype: DType; readonly reduceDtype: DType } | null) =>
  mp === null ? {} : { mixedPrecision: { param: mp.paramDtype, reduce: mp.reduceDtype } };

export function estimateFsdpTpFixture(fx: FsdpTpFixture, timeline = false): Estimate<number> {
  const c = fx.case;
  const model = fromHFConfig(c.config, {
    transformers: c.transformers,
    attention: 'eager',
    useCache: false,
    ...(c.dtype === 'bfloat16' ? { dtype: 'bfloat16' as const } : {}),
    tensorParallel: { size: c.tp, rank: c.tpRank, sequenceParallel: c.sequenceParallel, lossParallel: c.lossParallel, retie: c.retie ?? false },
  });
  return estimate(model, {
    input: c.input,
    device: 'cpu',
    framework: 'torch-2',
    optimizer: c.optimizer,
    timeline,
    parallel: { engine: 'fsdp2', dp: c.dp, tp: c.tp, rank: c.dpRank, reshardAfterForward: c.fsdp.reshardAfterForward, ...mixed(c.fsdp.mp) },
  }) as Estimate<number>;
}

export function estimateFsdpCpFixture(fx: FsdpCpFixture): Estimate<number> {
  const c = fx.case;
  const cp = c.cp > 1 ? { contextParallel: { size: c.cp, rank: fx.mesh.cpLocalRank, loadBalance: c.loadBalance } } : {};
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
    optimizer: 'sgd',
    timeline: false,
    parallel: {
      engine: 'fsdp2',
      dp: c.dp,
      ...(c.cp > 1 ? { cp: c.cp } : {}),
      rank: fx.mesh.fsdpMeshLocalRank,
      reshardAfterForward: c.reshardAfterForward,
      ...mixed(c.mp),
    },
  }) as Estimate<number>;
}

export function estimateTpCpFixture(fx: TpCpFixture): Estimate<number> {
  const c = fx.case;
  const tp = c.tp > 1 ? { tensorParallel: { size: c.tp, rank: fx.mesh.tpRank ?? 0, sequenceParallel: c.sequenceParallel, lossParallel: c.lossParallel } } : {};
  const cp = c.cp > 1 ? { contextParallel: { size: c.cp, rank: fx.mesh.cpRank ?? 0, loadBalance: c.loadBalance } } : {};
  const model = fromHFConfig(c.config, { transformers: c.transformers, attention: 'sdpa', useCache: false, ...tp, ...cp });
  return estimate(model, {
    input: c.input,
    device: 'cpu',
    framework: 'torch-2',
    optimizer: 'sgd',
    timeline: false,
    parallel: { dp: 1, ...(c.tp > 1 ? { tp: c.tp } : {}), ...(c.cp > 1 ? { cp: c.cp } : {}) },
  }) as Estimate<number>;
}
