import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { ceilDiv, mul, product } from '../sym/ops.js';
import type { Framework } from '../ops/types.js';
import { bytesOf, checkDType, type DType } from '../tensor/dtype.js';

/** Optimizers whose state and step temporaries vram-ts knows. */
export type OptimizerName = 'sgd' | 'sgd_momentum' | 'adam' | 'adamw' | 'adafactor' | 'lion' | 'adam8bit';

/** How torch.optim runs the update: per tensor, over lists of tensors, or one fused CUDA kernel. */
export type OptimizerImpl = 'for-loop' | 'foreach' | 'fused';

/** An optimizer and its settings. */
export interface OptimizerSpec {
  readonly name: OptimizerName;
  /** Default `for-loop` (torch.optim's `foreach=False`). */
  readonly impl?: OptimizerImpl;
  /** dtype of the moment tensors (default: the parameter's dtype, as zeros_like gives). */
  readonly stateDtype?: DType;
  /** SGD/Adam weight decay (AdamW decays the weights in place, without a temporary). */
  readonly weightDecay?: number;
  /** SGD with Nesterov momentum (one more temporary per tensor). */
  readonly nesterov?: boolean;
}

/** One state tensor an optimizer keeps for a parameter. */
export interface StateTensor {
  readonly label: string;
  readonly bytes: Dim;
  /** Where it lives: `device` (counts on the GPU) or `host` (CPU scalars such as Adam's step count). */
  readonly place: 'device' | 'host';
}

/** What the optimizer does for one parameter tensor. */
export interface ParamUpdate {
  readonly state: readonly StateTensor[];
  /** Temporaries of the update of this tensor, allocated in order then freed (for-loop). */
  readonly temps: readonly Dim[];
  /**
   * For-loop: the last temporary is a loop variable (Adam's `denom`) that lives on until the
   * next tensor's update assigns it again, so it overlaps that update's temporaries.
   */
  readonly carriesLast?: boolean;
  /** Bytes held at once over the whole list while updating (foreach intermediates). */
  readonly listTemps: Dim;
}

/** A parameter as the optimizer sees it. */
export interface OptimizedParam {
  readonly shape: readonly Dim[];
  readonly dtype: DType;
}

/** Normalises `'adam'` or a spec object, checking the names. */
export function optimizerSpec(value: OptimizerName | OptimizerSpec): OptimizerSpec {
  if (typeof value === 'string' && BY_NAME.has(value)) return BY_NAME.get(value)!;
  const spec = typeof value === 'string' ? { name: value } : value;
  const names: readonly OptimizerName[] = ['sgd', 'sgd_momentum', 'adam', 'adamw', 'adafactor', 'lion', 'adam8bit'];
  if (!names.includes(spec.name)) fail('bad-option', 'unknown optimizer', { path: ['optimizer'], expected: names.join(' | '), received: String(spec.name) });
  if (spec.impl !== undefined && !['for-loop', 'foreach', 'fused'].includes(spec.impl)) {
    fail('bad-option', 'unknown optimizer implementation', {
      path: ['optimizer', 'impl'],
      expected: 'for-loop | foreach | fused',
      received: String(spec.impl),
    });
  }
  if (spec.stateDtype !== undefined) checkDType(spec.stateDtype, ['optimizer', 'stateDtype']);
  if (typeof value === 'string') BY_NAME.set(value, Object.freeze(spec));
  return spec;
}

/** Specs by name: one object each, so that updates computed for it can be kept. */
const BY_NAME = new Map<string, OptimizerSpec>();

/** bitsandbytes keeps 32-bit state for tensors under this many elements (`min_8bit_size`). */
export const BNB_MIN_8BIT_SIZE = 4096;
/** bitsandbytes' blockwise quantisation block (Optimizer2State: one float32 absmax per block). */
export const BNB_BLOCK_SIZE = 256;

/**
 * State and temporaries of one parameter's update, mirroring torch.optim (2.x) for
 * SGD/Adam/AdamW/Adafactor, lucidrains' Lion and bitsandbytes' Adam8bit:
 * - Adam/AdamW for-loop: `denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)` holds two
 *   parameter-sized temporaries at once, and `denom` lives on into the next tensor's update
 *   (a loop variable); foreach holds one per tensor for the whole list; fused none. The step
 *   count is a host scalar unless fused.
 * - SGD with momentum keeps a momentum buffer; weight decay or Nesterov add a temporary.
 * - Adafactor keeps factored second moments (row and column means) for matrices.
 * - Adam8bit keeps uint8 moments plus a float32 absmax per 256-element block, and
 *   32-bit moments for tensors under 4096 elements.
 *
 * @example
 * ```ts
 * import { paramUpdate } from 'vram-ts/internals';
 * const u = paramUpdate({ name: 'adam' }, { shape: [1024, 576], dtype: 'float32' });
 * console.log(u.state.map((s) => `${s.label}:${s.place}`).join(' '), u.temps.length); // step:host exp_avg:device exp_avg_sq:device 2
 * ```
 */
export function paramUpdate(spec: OptimizerSpec, param: OptimizedParam, framework: Framework = 'torch-2'): ParamUpdate {
  const impl = spec.impl ?? 'for-loop';
  const numel = product(param.shape);
  const full = bytesOf(numel, spec.stateDtype ?? param.dtype);
  const paramBytes = bytesOf(numel, param.dtype);
  const step: StateTensor = { label: 'step', bytes: 4, place: impl === 'fused' ? 'device' : 'host' };
  const wdTemp = (spec.weightDecay ?? 0) > 0 ? [paramBytes] : [];
  // for-loop: the per-tensor temporaries; foreach: what each tensor contributes to the list-wide
  // intermediates (held together); fused: nothing.
  const perTensor = (temps: Dim[], foreachShare: Dim = 0): Pick<ParamUpdate, 'temps' | 'listTemps'> =>
    impl === 'for-loop' ? { temps, listTemps: 0 } : impl === 'foreach' ? { temps: [], listTemps: foreachShare } : { temps: [], listTemps: 0 };
  const wdShare = wdTemp[0] ?? 0;
  switch (spec.name) {
    case 'sgd':
      return { state: [], ...perTensor(wdTemp, wdShare) };
    case 'sgd_momentum':
      return {
        state: [{ label: 'momentum_buffer', bytes: full, place: 'device' }],
        ...perTensor([...wdTemp, ...(spec.nesterov ? [paramBytes] : [])], wdShare),
      };
    case 'adam':
    case 'adamw': {
      const state: StateTensor[] = [step, { label: 'exp_avg', bytes: full, place: 'device' }, { label: 'exp_avg_sq', bytes: full, place: 'device' }];
      const decay = spec.name === 'adam' ? wdTemp : [];
      // foreach: 2.x takes exp_avg_sq_sqrt = _foreach_sqrt(...) then divides and adds in place;
      // 1.13 made `denom = _foreach_add(exp_avg_sq_sqrt, eps)`, a second list.
      const lists = framework === 'torch-1.13' ? 2 : 1;
      return {
        state,
        ...perTensor([...decay, full, full], mul(full, lists + (spec.name === 'adam' && decay.length > 0 ? 1 : 0))),
        ...(impl === 'for-loop' ? { carriesLast: true } : {}),
      };
    }
    case 'lion':
      return { state: [{ label: 'exp_avg', bytes: full, place: 'device' }], ...perTensor([full, full], full) };
    case 'adafactor': {
      if (param.shape.length < 2) return { state: [step, { label: 'variance', bytes: full, place: 'device' }], ...perTensor([full, full], full) };
      const rows = product(param.shape.slice(0, -1));
      const cols = product([...param.shape.slice(0, -2), param.shape[param.shape.length - 1]!]);
      const dtype = spec.stateDtype ?? param.dtype;
      return {
        state: [step, { label: 'row_var', bytes: bytesOf(rows, dtype), place: 'device' }, { label: 'col_var', bytes: bytesOf(cols, dtype), place: 'device' }],
        ...perTensor([full, full], full),
      };
    }
    case 'adam8bit': {
      const small = typeof numel === 'number' && numel < BNB_MIN_8BIT_SIZE;
      if (small)
        return {
          state: [
            step,
            { label: 'state1', bytes: bytesOf(numel, 'float32'), place: 'device' },
            { label: 'state2', bytes: bytesOf(numel, 'float32'), place: 'device' },
          ],
          temps: [],
          listTemps: 0,
        };
      const absmax = mul(ceilDiv(numel, BNB_BLOCK_SIZE), 4);
      return {
        state: [
          step,
          { label: 'state1', bytes: numel, place: 'device' },
          { label: 'absmax1', bytes: absmax, place: 'device' },
          { label: 'state2', bytes: numel, place: 'device' },
          { label: 'absmax2', bytes: absmax, place: 'device' },
        ],
        temps: [],
        listTemps: 0,
      };
    }
  }
}
