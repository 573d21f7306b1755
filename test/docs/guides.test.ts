import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { DOCS, refresh } from '../../scripts/docs.js';

for (const file of DOCS) {
  it(`${file}: every quoted vram-ts command shows what it prints now (npm run docs:examples)`, () => {
    const text = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
    expect(text).toContain('<!-- run: vram-ts');
    expect(text).toBe(refresh(text));
  });
}
