/**
 * Reading tools/oracle/megatron_cpu.py's fixtures (Megatron-core itself, NVIDIA/Megatron-LM
 * d98e8a64, its DistributedDataParallel and optimizers over gloo on PyTorch 2.13 CPU) and
 * estimating each rank with engine 'megatron'. Shared by the fidelity test and `npm run accuracy`.
 * The peak compared is the one without gloo's staging copies (NCCL makes none).
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, type Estimate } from '../../src/index.js';
import { seqFromSpecs, type LayerSpec } from './layer-spec.js';

export interface MegatronRank {
  readonly rank: number;
  readonly livePeakWithoutBackendTempsBytes: number;
  readonly roles: {
    readonly gradBuffer: number;
    readonly paramBuffer: number;
    readonly moduleParams: number;
    readonly fp32Main: number;
    readonly optimizerState: number;
    readonly mainParamGrads: number;
    readonly inputs: number;
  };
  readonly megatron: {
    readonly buffers: readonly {
      readonly numel: number;
      readonly buckets: readonly { readonly start: number; readonly numel: number }[];
      readonly paramIndexMap: Readonly<Record<string, readonly [number, number, number]>>;
    }[];
    readonly optimizer: { readonly shardParamRanges?: readonly { readonly param: string; readonly numel: number }[] };
  };
}

export interface MegatronFixture {
  readonly id: string;
  readonly case: {
    readonly layers: readonly LayerSpec[];
    readonly input: readonly number[];
    readonly dtype: 'float32' | 'bfloat16';
    readonly world: number;
    readonly useDistributedOptimizer: boolean;
    readonly gradReduceInFp32: boolean;
    readonly overlapGradReduce: boolean;
    readonly bucketSize: number | null;
  };
  readonly ranks: readonly MegatronRank[];
}

export function loadMegatronFixtures(): MegatronFixture[] {
  return loadJsonFixtures<MegatronFixture>('megatron-cpu');
}

/** The Megatron settings of a case, as `parallel.megatron`. */
export function megatronOptions(fx: MegatronFixture): {
  distributedOptimizer: boolean;
  gradReduceInFp32: boolean;
  overlapGradReduce: boolean;
  bucketSize?: number;
} {
  const c = fx.case;
  return {
    distributedOptimizer: c.useDistributedOptimizer,
    gradReduceInFp32: c.gradReduceInFp32,
    overlapGradReduce: c.overlapGradReduce,
    ...(c.bucketSize !== null ? { bucketSize: c.bucketSize } : {}),
  };
}

export function estimateMegatronRank(fx: MegatronFixture, rank: number): Estimate<number> {
  const c = fx.case;
  return estimate(seqFromSpecs(c.layers), {
    input: c.input,
    device: 'cpu',
    framework: 'torch-2',
    optimizer: 'adamw',
    timeline: false,
    ...(c.dtype === 'bfloat16' ? { dtype: 'bfloat16' as const } : {}),
    parallel: { engine: 'megatron', dp: c.world, rank, megatron: megatronOptions(fx) },
  }) as Estimate<number>;
}
