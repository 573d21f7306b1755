import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { renderAccuracy } from '../../scripts/accuracy.js';

it('docs/accuracy.md is what `npm run accuracy` generates from the committed fixtures', () => {
  const committed = readFileSync(new URL('../../docs/accuracy.md', import.meta.url), 'utf8');
  expect(committed).toBe(renderAccuracy().text);
});
