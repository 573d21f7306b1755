/** The VramError a call throws (any other throw, or none, fails the test). */
import { VramError } from '../../src/index.js';

export function errorOf(f: () => unknown): VramError {
  try {
    f();
  } catch (e) {
    if (e instanceof VramError) return e;
    throw e;
  }
  throw new Error('no error');
}

/** The first issue of the VramError a call throws, as `path:code` (`tensorParallelSize:bad-option`). */
export function issueOf(f: () => unknown): string {
  const issue = errorOf(f).issues[0]!;
  return `${issue.path.join('.')}:${issue.code}`;
}

/** The issues of the VramError a call throws, each as its path and code. */
export function issuesOf(f: () => unknown): { path: readonly (string | number)[]; code: string }[] {
  return errorOf(f).issues.map((i) => ({ path: i.path, code: i.code }));
}
