import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { renderReleases } from '../../scripts/releases.js';

it('docs/transformers-releases.md is what `npm run docs:releases` generates from TRANSFORMERS_RULES', () => {
  const committed = readFileSync(new URL('../../docs/transformers-releases.md', import.meta.url), 'utf8');
  expect(committed).toBe(renderReleases());
});
