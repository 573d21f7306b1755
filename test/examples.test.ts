/**
 * Every exported function documents a runnable `@example`. This test extracts each
 * example from src/, runs it against the sources, and checks that every
 * `console.log(...); // expected` prints exactly the expected text (a quoted string,
 * an arithmetic expression, or the literal text util.format prints).
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { format } from 'node:util';
import { afterAll, describe, expect, it, vi } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const srcIndex = join(root, 'src', 'index.ts');
const srcInternals = join(root, 'src', 'internals.ts');
const outDir = join(root, '.tmp', 'examples');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith('.ts') ? [path] : [];
  });
}

interface Example {
  readonly file: string;
  readonly line: number;
  readonly code: string;
}

function examplesOf(file: string): Example[] {
  const text = readFileSync(file, 'utf8');
  const found: Example[] = [];
  const pattern = /@example\s*\n\s*\*\s*```ts\n([\s\S]*?)\n\s*\*\s*```/g;
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) {
    const code = match[1]!
      .split('\n')
      .map((l) => l.replace(/^\s*\* ?/, ''))
      .join('\n');
    found.push({ file, line: text.slice(0, match.index).split('\n').length, code });
  }
  return found;
}

function expectedValue(comment: string): { kind: 'text'; text: string } | { kind: 'number'; value: number } {
  const trimmed = comment.trim();
  if (/^"[\s\S]*"$/.test(trimmed)) return { kind: 'text', text: JSON.parse(trimmed) as string };
  if (/^[\d\s+*()/-]+$/.test(trimmed) && /[+*/-]/.test(trimmed.replace(/^-/, ''))) {
    return { kind: 'number', value: Function(`return (${trimmed});`)() as number };
  }
  return { kind: 'text', text: trimmed };
}

const examples = sourceFiles(join(root, 'src')).flatMap(examplesOf);
mkdirSync(outDir, { recursive: true });
afterAll(() => rmSync(outDir, { recursive: true, force: true }));

describe('TSDoc examples run and print what they say', () => {
  it('there are examples to run', () => {
    expect(examples.length).toBeGreaterThan(40);
  });

  examples.forEach((example, i) => {
    const name = `${relative(root, example.file)}:${example.line}`;
    it(name, async () => {
      const lines = example.code.split('\n');
      const checks: { line: number; expected: string }[] = [];
      const instrumented = lines.map((line, n) => {
        const m = /^(\s*)console\.log\((.*)\);\s*\/\/\s*(.+)$/.exec(line);
        if (m === null)
          return line
            .replace(/from 'vram-ts'/g, `from ${JSON.stringify(pathToFileURL(srcIndex).href)}`)
            .replace(/from 'vram-ts\/internals'/g, `from ${JSON.stringify(pathToFileURL(srcInternals).href)}`);
        checks.push({ line: n, expected: m[3]! });
        return `${m[1]}__check(${n}, ${m[2]});`;
      });
      const printed = new Map<number, string>();
      (globalThis as Record<string, unknown>).__check = (n: number, ...args: unknown[]) => printed.set(n, format(...args));
      const file = join(outDir, `example-${i}.ts`);
      writeFileSync(file, instrumented.join('\n'));
      const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
      try {
        await import(/* @vite-ignore */ pathToFileURL(file).href);
      } finally {
        log.mockRestore();
      }
      for (const check of checks) {
        const got = printed.get(check.line);
        const want = expectedValue(check.expected);
        if (want.kind === 'number') expect(Number(got), `${name} line ${check.line}`).toBe(want.value);
        else expect(got, `${name} line ${check.line}`).toBe(want.text);
      }
    });
  });
});

describe('every exported function has a TSDoc @example', () => {
  it('finds an example above each function the package exports (vram-ts and vram-ts/internals)', async () => {
    const api = { ...((await import('../src/index.js')) as Record<string, unknown>), ...((await import('../src/internals.js')) as Record<string, unknown>) };
    const index = readFileSync(srcIndex, 'utf8') + readFileSync(srcInternals, 'utf8');
    const sources = sourceFiles(join(root, 'src')).map((file) => readFileSync(file, 'utf8'));
    const missing: string[] = [];
    for (const [name, value] of Object.entries(api)) {
      if (typeof value !== 'function') continue;
      const alias = new RegExp(`(\\w+) as ${name}\\b`).exec(index)?.[1] ?? name;
      const declared = new RegExp(`/\\*\\*((?:(?!\\*/)[\\s\\S])*?)\\*/\\s*(?:/\\* @__NO_SIDE_EFFECTS__ \\*/\\s*)?export (?:function|const|class) ${alias}\\b`);
      const doc = sources.map((text) => declared.exec(text)).find((m) => m !== null);
      if (doc === undefined || !doc[1]!.includes('@example')) missing.push(name);
    }
    expect(missing).toEqual([]);
  });
});
