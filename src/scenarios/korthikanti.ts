/** Korthikanti et al. 2022's activation formula: the published cross-check of one transformer layer's activations. */
import { korthikantiOptions } from '../estimate-options.js';
import { validate } from '../validate.js';
import type { Dim } from '../sym/expr.js';
import { add, floorDiv, mul } from '../sym/ops.js';
import { sizeArg } from '../tensor/size.js';

/** Options of {@link korthikanti}. */
export interface KorthikantiOptions {
  readonly seq: Dim;
  readonly batch: Dim;
  readonly hidden: number;
  readonly heads: number;
  /** Tensor-parallel size t (default 1). */
  readonly tensorParallel?: number;
  readonly sequenceParallel?: boolean;
  readonly recompute?: 'none' | 'selective' | 'full';
}

/**
 * Activation bytes per transformer layer from Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models", Table 2), 16-bit activations: sbh(34 + 5as/h)
 * without parallelism; sbh(10 + 24/t + 5as/(ht)) with tensor parallelism; sbh(34/t +
 * 5as/(ht)) with sequence parallelism too; selective recomputation drops the 5as/h terms;
 * full recomputation keeps 2sbh (2sbh/t with sequence parallelism).
 *
 * @example
 * ```ts
 * import { korthikanti } from 'vram-ts';
 * console.log(korthikanti({ seq: 2048, batch: 1, hidden: 4096, heads: 32 })); // 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)
 * ```
 */
export function korthikanti(options: KorthikantiOptions): Dim {
  validate(options, korthikantiOptions);
  // An expression must be one all the way down (the schema's dim looks at its kind only).
  sizeArg(options.seq, ['seq']);
  sizeArg(options.batch, ['batch']);
  const t = options.tensorParallel ?? 1;
  const sp = options.sequenceParallel ?? false;
  const { hidden: h, heads: a } = options;
  const sbh = mul(mul(options.seq, options.batch), h);
  // 5as/h · sbh = 5·a·s²·b.
  const attention = mul(mul(mul(options.seq, options.seq), options.batch), 5 * a);
  const divide = (d: Dim, k: number): Dim => (typeof d === 'number' ? d / k : floorDiv(d, k));
  switch (options.recompute ?? 'none') {
    case 'full':
      return divide(mul(sbh, 2), sp ? t : 1);
    case 'selective':
      return sp ? divide(mul(sbh, 34), t) : t === 1 ? mul(sbh, 34) : add(mul(sbh, 10), divide(mul(sbh, 24), t));
    default:
      if (t === 1) return add(mul(sbh, 34), attention);
      return sp ? add(divide(mul(sbh, 34), t), divide(attention, t)) : add(add(mul(sbh, 10), divide(mul(sbh, 24), t)), divide(attention, t));
  }
}
