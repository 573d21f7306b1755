/**
 * Reading the distributed oracles' fixtures and comparing one rank of vram-ts with them:
 * tools/oracle/distributed_cpu.py (DDP and ZeroRedundancyOptimizer on PyTorch 1.13 CPU, its own
 * fake process group) in test/fixtures/distributed-cpu, and tools/oracle/fsdp2_cpu.py (FSDP2 and
 * DDP on PyTorch 2.13 CPU, PyTorch's `fake` process group; real transformers 4.40.2 decoders) in
 * test/fixtures/fsdp2-cpu. Shared by the fidelity test and `npm run accuracy`.
 */
import { loadJsonFixtures } from './fixtures.js';
import { estimate, fromAccelerateConfig, fromHFConfig, type DType, type Engine, type Layer, type ParallelPlan } from '../../src/index.js';
import { seqFromSpecs, type LayerSpec } from './layer-spec.js';
import { OPTIMIZERS } from './oracle.js';

export interface DistributedFixture {
  readonly id: string;
  readonly case: {
    readonly model: 'sequential' | 'hf';
    readonly input: readonly number[];
    readonly mode: 'train' | 'eval';
    readonly layers?: readonly LayerSpec[];
    readonly config?: Readonly<Record<string, unknown>>;
    readonly transformers?: string;
    readonly trainUseCache?: boolean;
    readonly dtype?: DType;
    readonly world: number;
    readonly rank: number;
    readonly optimizer: string;
    readonly microBatches?: number;
    /** fsdp2_cpu.py: the engine (null: one process, no wrapping); distributed_cpu.py: DDP unless `zero`. */
    readonly parallel?: 'ddp' | 'fsdp2' | null;
    readonly gradientSync?: 'every' | 'last';
    readonly zeroGradSetToNone?: boolean;
    readonly ddp?: { readonly gradientAsBucketView: boolean; readonly bucketCapMb: number; readonly findUnusedParameters: boolean };
    readonly zero?: { readonly parametersAsBucketView: boolean };
    readonly fsdp?: {
      readonly units: readonly string[];
      readonly reshardAfterForward: boolean;
      readonly mp: { readonly paramDtype: DType; readonly reduceDtype: DType } | null;
      /** fsdp2_cpu.py's accelerate cases: the plugin settings accelerate's fsdp2_prepare_model wrapped with. */
      readonly accelerate?: AccelerateCase;
    };
  };
  readonly env: { readonly torch: string };
  readonly train: Readonly<Record<string, { readonly livePeakBytes: number; readonly optimizerStateBytes: number }>>;
}

/** An accelerate case's FSDP plugin settings (tools/oracle/cases/accelerate-fsdp2-cpu.json). */
export interface AccelerateCase {
  readonly reshardAfterForward: boolean;
  readonly autoWrap: string;
  readonly layerCls: string;
  readonly mixedPrecision: 'no' | 'bf16';
}

/** The accelerate config those settings are (what `accelerate launch` turned into the plugin's environment). */
export function accelerateConfigOf(fixture: DistributedFixture): Record<string, unknown> {
  const a = fixture.case.fsdp!.accelerate!;
  return {
    distributed_type: 'FSDP',
    num_processes: fixture.case.world,
    mixed_precision: a.mixedPrecision,
    fsdp_config: {
      fsdp_version: 2,
      fsdp_auto_wrap_policy: a.autoWrap,
      fsdp_transformer_layer_cls_to_wrap: a.layerCls,
      fsdp_reshard_after_forward: a.reshardAfterForward,
    },
  };
}

/** One figure of one rank: what the engine allocated next to vram-ts. */
export interface RankComparison {
  readonly id: string;
  /** The oracle's PyTorch release (`1.13`, `2.13`). */
  readonly torch: string;
  readonly engine: Engine | 'single';
  readonly figure: string;
  readonly pytorch: number;
  readonly ours: number;
  /** (ours - pytorch) / pytorch. */
  readonly error: number;
}

/** The fixture folders of the distributed oracles. */
export const DISTRIBUTED_FOLDERS = ['distributed-cpu', 'fsdp2-cpu'] as const;

/** fsdp2_cpu.py's cases wrapped by accelerate 1.15.0's own fsdp2_prepare_model (fewer: a folder of their own). */
export const ACCELERATE_FOLDER = 'accelerate-fsdp2-cpu';

export function loadDistributedFixtures(folder: (typeof DISTRIBUTED_FOLDERS)[number] | typeof ACCELERATE_FOLDER = 'distributed-cpu'): DistributedFixture[] {
  return loadJsonFixtures<DistributedFixture>(folder);
}

/**
 * The case's plan as vram-ts takes it (undefined: one process). Knobs the fixtures set that
 * vram-ts has no option for (`find_unused_parameters`, `zero_grad(set_to_none=False)`,
 * ZeroRedundancyOptimizer's `parameters_as_bucket_view`) are cases that check they move nothing
 * vram-ts counts.
 */
export function planOf(fixture: DistributedFixture, model: Layer): ParallelPlan | undefined {
  const c = fixture.case;
  const sync = c.gradientSync !== undefined ? { gradientSync: c.gradientSync } : {};
  if (c.parallel === null) return undefined;
  if (c.fsdp?.accelerate !== undefined) {
    // The plan fromAccelerateConfig reads of the config; the harness's loop (not accelerator.accumulate) reduces every micro-batch.
    const micro = c.microBatches ?? 1;
    const reading = fromAccelerateConfig(accelerateConfigOf(fixture), { model, ...(micro > 1 ? { gradientAccumulationSteps: micro } : {}) });
    return { ...reading.options.parallel!, rank: c.rank, gradientSync: c.gradientSync ?? 'every' };
  }
  if (c.parallel === 'fsdp2') {
    const f = c.fsdp!;
    return {
      engine: 'fsdp2',
      dp: c.world,
      rank: c.rank,
      units: f.units,
      reshardAfterForward: f.reshardAfterForward,
      ...sync,
      ...(f.mp !== null ? { mixedPrecision: { param: f.mp.paramDtype, reduce: f.mp.reduceDtype } } : {}),
    };
  }
  const ddp = c.ddp!;
  return {
    engine: c.zero === undefined ? 'ddp' : 'zero-redundancy',
    dp: c.world,
    rank: c.rank,
    bucketView: ddp.gradientAsBucketView,
    bucketCapMb: ddp.bucketCapMb,
    ...sync,
  };
}

function modelOf(fixture: DistributedFixture): Layer {
  const c = fixture.case;
  if (c.model === 'sequential') return seqFromSpecs(c.layers!);
  return fromHFConfig(c.config!, { transformers: c.transformers!, attention: 'eager', useCache: c.trainUseCache ?? false });
}

/** The live peak of the measured (third) step and the optimizer state on the rank. */
export function compareDistributedFixture(fixture: DistributedFixture): RankComparison[] {
  const c = fixture.case;
  const model = modelOf(fixture);
  const parallel = planOf(fixture, model);
  const torch = fixture.env.torch.startsWith('1.') ? '1.13' : fixture.env.torch.replace(/^(\d+\.\d+).*/, '$1');
  const framework = torch === '1.13' ? ('torch-1.13' as const) : ('torch-2' as const);
  const out: RankComparison[] = [];
  const row = (figure: string, pytorch: number, ours: number): RankComparison => ({
    id: fixture.id,
    torch,
    engine: parallel?.engine ?? 'single',
    figure,
    pytorch,
    ours,
    error: pytorch === 0 ? (ours === 0 ? 0 : Infinity) : (ours - pytorch) / pytorch,
  });
  for (const [name, measured] of Object.entries(fixture.train)) {
    const optimizer = OPTIMIZERS[name];
    if (optimizer === undefined) throw new Error(`${fixture.id}: no vram-ts optimizer for ${name}`);
    const r = estimate(model, {
      input: c.input,
      device: 'cpu',
      framework,
      moduleMode: c.mode,
      timeline: false,
      optimizer,
      microBatches: c.microBatches ?? 1,
      ...(c.dtype !== undefined && c.dtype !== 'float32' ? { dtype: c.dtype } : {}),
      ...(parallel !== undefined ? { parallel } : {}),
    });
    out.push(row(`train peak (${name})`, measured.livePeakBytes, r.bytes.peak as number));
    out.push(row(`optimizer state (${name})`, measured.optimizerStateBytes, r.bytes.optimizer as number));
  }
  return out;
}

/** Issue 12: per-rank peaks within 5%, the optimizer state on the rank exact. */
export function rankTolerance(c: RankComparison): number {
  return c.figure.startsWith('optimizer state') ? 0 : 0.05;
}
