/** The fit verdict's sum as the commands print it: capacity, − each runtime line, = usable, − what is compared, = headroom. */
import { formatBytes, type FitResult } from '../index.js';

/** Where the verdict's capacity comes from, in words (FitResult.capacityFrom). */
export const CAPACITY_NOTE: Readonly<Record<FitResult['capacityFrom'], string>> = {
  torch: 'as PyTorch reports it (a cited log: docs/gpus.md)',
  driver: "the driver's total: no log of PyTorch's figure for this GPU is known (it reports somewhat less)",
  given: 'as given',
  nominal: 'nominal',
};

/** One line of the sum: its label, bytes (negative shown with a minus) and source ('' for none). */
export type SumRow = readonly [label: string, bytes: number, source: string];

/** The rows aligned: labels padded, sizes right-aligned, each source after its size; one per line. */
export function sumLines(rows: readonly SumRow[]): string {
  const width = Math.max(...rows.map(([label]) => label.length));
  const sizes = rows.map(([, bytes]) => (bytes < 0 ? `-${formatBytes(-bytes)}` : formatBytes(bytes)));
  const sizeWidth = Math.max(...sizes.map((t) => t.length));
  return rows
    .map(([label, , source], i) => `  ${label.padEnd(width)}  ${sizes[i]!.padStart(sizeWidth)}${source === '' ? '' : `  ${source}`}`.trimEnd())
    .join('\n');
}
