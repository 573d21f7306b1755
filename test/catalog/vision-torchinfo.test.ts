/**
 * torchinfo's text of torchvision models written with the builders (vision(name)), byte for byte
 * against the real torchinfo (tools/compat/vision_torchinfo.py → test/fixtures/compat/vision).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { summary, vision } from '../../src/index.js';

const dir = new URL('../fixtures/compat/vision/', import.meta.url);
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.txt'))
  .sort();

describe('vision catalog: torchinfo text, byte for byte', () => {
  it('has the fixtures (ResNet-18, ResNet-50, EfficientNet-B0)', () => expect(files.length).toBeGreaterThanOrEqual(4));
  for (const file of files) {
    const m = /^(.+)_(\d+)cls_([\dx]+)\.txt$/.exec(file)!;
    it(file, () => {
      const input = m[3]!.split('x').map(Number);
      const text = summary(vision(m[1]!, { numClasses: Number(m[2]) }), { input, format: 'torchinfo' });
      expect(text).toBe(readFileSync(new URL(file, dir), 'utf8'));
    });
  }
});
