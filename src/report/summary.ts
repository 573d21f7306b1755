import { estimate } from '../estimate.js';
import type { EstimateOptions } from '../estimate-types.js';
import { fail } from '../errors.js';
import { summaryOptions } from '../estimate-options.js';
import { validate } from '../validate.js';
import type { Layer } from '../nn/types.js';
import { formatBreakdown } from './breakdown.js';
import { formatTorchinfo, type TorchinfoOptions } from './torchinfo.js';
import { formatTorchsummary, type TorchsummaryOptions } from './torchsummary.js';

/** The text formats {@link summary} prints. */
export type SummaryFormat = 'breakdown' | 'torchsummary' | 'torchinfo';

/** Options of {@link summary}: estimate's options plus the format and its settings. */
export interface SummaryOptions extends EstimateOptions {
  readonly format?: SummaryFormat;
  readonly torchsummary?: TorchsummaryOptions;
  readonly torchinfo?: TorchinfoOptions;
}

/**
 * A text report of a model: `breakdown` (default) shows what is really held and why
 * torchsummary differs; `torchsummary` and `torchinfo` print exactly what those tools
 * print for the same model and input, without running PyTorch.
 *
 * @example
 * ```ts
 * import { mobilenetV3Small, summary } from 'vram-ts';
 * const text = summary(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224], format: 'torchsummary' });
 * console.log(text.split('\n').at(-3)); // "Estimated Total Size (MB): 40.98"
 * ```
 */
export function summary(model: Layer, options: SummaryOptions): string {
  validate(options, summaryOptions);
  const { format = 'breakdown', torchsummary, torchinfo, ...estimateOnly } = options;
  const result = estimate(model, estimateOnly);
  switch (format) {
    case 'breakdown':
      return formatBreakdown(result);
    case 'torchsummary':
      return formatTorchsummary(result.ir, torchsummary);
    case 'torchinfo':
      return formatTorchinfo(result.ir, torchinfo);
    default:
      return fail('bad-option', 'unknown summary format', { path: ['format'], expected: 'breakdown | torchsummary | torchinfo', received: String(format) });
  }
}
