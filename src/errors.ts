/**
 * One problem found while building, tracing or estimating a model.
 *
 * @example
 * ```ts
 * import { VramError, conv2d, estimate } from 'vram-ts';
 * try {
 *   estimate(conv2d({ out: 8, kernel: 9 }), { input: [1, 3, 4, 4] });
 * } catch (error) {
 *   if (error instanceof VramError) console.log(error.issues[0]?.path);
 * }
 * ```
 */
export interface VramIssue {
  /** Where the problem is: module names and child indices from the root, then the op. */
  readonly path: readonly (string | number)[];
  /** A short machine-readable kind, e.g. `channel-mismatch`. */
  readonly code: string;
  /** What was wrong, in words. */
  readonly message: string;
  /** What the rule expected, when there is one. */
  readonly expected?: string;
  /** What it received instead. */
  readonly received?: string;
}

/**
 * The one error class vram-ts throws: a list of issues, each with a path.
 *
 * @example
 * ```ts
 * import { VramError } from 'vram-ts';
 * const error = new VramError([{ path: ['features', 0], code: 'bad-dimension', message: 'dimension must be >= 1' }]);
 * console.log(error.message); // "features.0: dimension must be >= 1"
 * ```
 */
export class VramError extends Error {
  /** Every problem found, at least one. */
  readonly issues: readonly VramIssue[];

  constructor(issues: readonly VramIssue[]) {
    const checked = wellFormed(issues);
    super(checked.map(formatIssue).join('\n'));
    this.name = 'VramError';
    this.issues = checked;
  }
}

/** The issues as given when well formed; otherwise one issue saying so (the error class itself never throws). */
function wellFormed(issues: unknown): readonly VramIssue[] {
  const isIssue = (i: unknown): boolean => {
    const issue = i as Partial<VramIssue> | null;
    const text = (v: unknown) => v === undefined || typeof v === 'string';
    const step = (p: unknown) => typeof p === 'string' || Number.isSafeInteger(p);
    const known = (key: string) => key === 'path' || key === 'code' || key === 'message' || key === 'expected' || key === 'received';
    return (
      typeof issue === 'object' &&
      issue !== null &&
      Array.isArray(issue.path) &&
      issue.path.every(step) &&
      typeof issue.code === 'string' &&
      typeof issue.message === 'string' &&
      text(issue.expected) &&
      text(issue.received) &&
      Object.keys(issue).every(known)
    );
  };
  if (Array.isArray(issues) && issues.length > 0 && issues.every(isIssue)) return issues;
  return [{ path: [], code: 'bad-issues', message: 'a VramError needs a non-empty list of issues, each with a path, a code and a message' }];
}

function formatIssue(issue: VramIssue): string {
  const where = issue.path.length > 0 ? `${issue.path.join('.')}: ` : '';
  const detail = issue.expected !== undefined || issue.received !== undefined ? ` (expected ${issue.expected ?? '?'}, received ${issue.received ?? '?'})` : '';
  return `${where}${issue.message}${detail}`;
}

/** Throws a VramError with one issue; a helper for rules deep inside the library. */
export function fail(code: string, message: string, details: { path?: readonly (string | number)[]; expected?: string; received?: string } = {}): never {
  throw new VramError([
    {
      path: details.path ?? [],
      code,
      message,
      ...(details.expected !== undefined ? { expected: details.expected } : {}),
      ...(details.received !== undefined ? { received: details.received } : {}),
    },
  ]);
}
