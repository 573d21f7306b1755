/**
 * `npm run docs:examples`: re-runs every command quoted in the docs and writes its output
 * under it, so the numbers in the guides are what the command prints. A block is
 *
 *   <!-- run: vram-ts ARGS -->
 *   ```text
 *   …output…
 *   ```
 *
 * and test/docs/guides.test.ts fails when a block is stale.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { run } from '../src/cli/main.js';

export const DOCS = [
  'README.md',
  'docs/guides/why-training-needs-more-memory.md',
  'docs/guides/vision.md',
  'docs/guides/llm.md',
  'docs/guides/moe.md',
  'docs/guides/rl.md',
  'docs/guides/config-files.md',
];

const BLOCK = /<!-- run: vram-ts ([^\n]*?) -->\n```text\n[\s\S]*?```/g;

function output(args: string): string {
  let out = '';
  let err = '';
  const code = run(
    args.split(/\s+/).filter(Boolean),
    (t) => (out += t),
    (t) => (err += t),
  );
  if (code !== 0 && code !== 1) throw new Error(`vram-ts ${args} failed: ${err}`);
  return out;
}

/** The text of a doc with every run block refreshed. */
export function refresh(text: string): string {
  return text.replace(
    BLOCK,
    (_whole, args: string) => `<!-- run: vram-ts ${args} -->\n\`\`\`text\n$ vram-ts ${args}\n${output(args).replace(/\n+$/, '')}\n\`\`\``,
  );
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const file of DOCS) {
    const path = new URL(`../${file}`, import.meta.url);
    const before = readFileSync(path, 'utf8');
    const after = refresh(before);
    writeFileSync(path, after);
    console.log(`${file}: ${before === after ? 'unchanged' : 'updated'}`);
  }
}
