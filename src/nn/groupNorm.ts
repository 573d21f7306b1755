import { groupNormOp, type GroupNormAttrs, GROUP_NORM_SCHEMA } from '../ops/groupNorm.js';
import { checkAcross, frozenAttrs } from '../ops/attrs.js';
import { opLayer, splitOptions } from './op.js';
import type { LayerOptions, OpLayer } from './types.js';

/**
 * Group normalization (torch.nn.GroupNorm(num_groups, C)): channels in `groups` groups. Keeps its
 * input, the weight and an [N, groups] mean and rstd for backward.
 *
 * @example
 * ```ts
 * import { conv2d, estimate, groupNorm, seq } from 'vram-ts';
 * const r = estimate(seq(conv2d({ out: 32, kernel: 3, padding: 1 }), groupNorm({ groups: 8 })), { input: [2, 3, 16, 16] });
 * console.log(r.params.total); // 896 + 64
 * ```
 */
/* @__NO_SIDE_EFFECTS__ */
export function groupNorm(options: GroupNormAttrs & LayerOptions): OpLayer<GroupNormAttrs> {
  const [attrs, layer] = splitOptions(options, GROUP_NORM_SCHEMA.fields, 'groupNorm', GROUP_NORM_SCHEMA.required);
  checkAcross(GROUP_NORM_SCHEMA, attrs, ['groupNorm']);
  return opLayer(groupNormOp, 'GroupNorm', frozenAttrs(attrs), layer);
}
