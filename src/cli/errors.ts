/**
 * The command's errors: every one is a single line on stderr,
 * `vram-ts: <path>: <message> (expected <valid values>, got <received>)`.
 */
import type { VramError } from '../index.js';

/** A usage or input error: exit code 2. */
export class CliError extends Error {
  /** What was wrong: a flag (`--batch`), a file, `model`; empty when nothing narrower fits. */
  readonly path: string;
  readonly expected: string | undefined;
  readonly received: string | undefined;
  /** Further problems not shown (a VramError's other issues). */
  readonly more: number;

  constructor(path: string, message: string, details: { expected?: string | undefined; received?: string | undefined; more?: number } = {}) {
    super(message);
    this.name = 'CliError';
    this.path = path;
    this.expected = details.expected;
    this.received = details.received;
    this.more = details.more ?? 0;
  }
}

/** Throws a CliError. */
export function usage(path: string, message: string, details: { expected?: string | undefined; received?: string | undefined } = {}): never {
  throw new CliError(path, message, details);
}

/** A CliError from the first issue of a VramError, its path after `prefix` when given. */
export function fromVramError(error: VramError, prefix?: string): CliError {
  const issue = error.issues[0];
  if (issue === undefined) return new CliError(prefix ?? '', error.message);
  const where = issue.path.join('.');
  const path = prefix === undefined ? where : where === '' ? prefix : `${prefix}: ${where}`;
  return new CliError(path, issue.message, { expected: issue.expected, received: issue.received, more: error.issues.length - 1 });
}

/** Collapses a text onto one line. */
export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

/** The line printed for an error, newline included. */
export function errorLine(error: CliError): string {
  const details = [...(error.expected !== undefined ? [`expected ${error.expected}`] : []), ...(error.received !== undefined ? [`got ${error.received}`] : [])];
  const path = error.path === '' ? '' : `${error.path}: `;
  const detail = details.length > 0 ? ` (${details.join(', ')})` : '';
  const more = error.more > 0 ? ` (and ${error.more} more)` : '';
  return `vram-ts: ${oneLine(`${path}${error.message}${detail}${more}`)}\n`;
}

/** The line for an error nobody expected (a bug): `vram-ts: internal error: <message>`. */
export function internalErrorLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return `vram-ts: internal error: ${oneLine(message) || (error instanceof Error ? error.name : 'unknown')}\n`;
}

/** A file-system error in a few words (`no such file`, `permission denied`, …). */
export function fsReason(error: unknown): string {
  const code = typeof error === 'object' && error !== null && 'code' in error ? String((error as { code: unknown }).code) : '';
  const reasons: Record<string, string> = {
    ENOENT: 'no such file or directory',
    EACCES: 'permission denied',
    EPERM: 'operation not permitted',
    EISDIR: 'is a directory',
    ENOTDIR: 'a part of the path is not a directory',
    EROFS: 'read-only file system',
    ENOSPC: 'no space left on the device',
    ENAMETOOLONG: 'name too long',
  };
  return reasons[code] ?? (code !== '' ? code : oneLine(error instanceof Error ? error.message : String(error)));
}
