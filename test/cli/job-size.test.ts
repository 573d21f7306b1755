import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';

/** The command's run, with the milliseconds it took. */
function timed(...args: string[]) {
  const start = performance.now();
  const r = cli(...args);
  return { ...r, ms: performance.now() - start };
}

describe('huge jobs', () => {
  it('--gpus 1000000 --all-ranks is refused at --gpus in under 2 s (it ran out of memory after minutes)', () => {
    const r = timed('mobilenet_v3_small', '--gpus', '1000000', '--all-ranks');
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toMatch(/^vram-ts: --gpus: .*--rank R \(expected at most 1024 ranks, got 1000000 · 1 · 1\)\n$/);
    expect(r.ms).toBeLessThan(2000);
  });

  it('--all-ranks lists every stage: --stage is refused', () => {
    const r = cli('mobilenet_v3_small', '--gpus', '4', '--pp', '2', '--micro-batches', '2', '--all-ranks', '--stage', '1');
    expect(r.code).toBe(2);
    expect(r.err).toContain('--all-ranks: lists every stage');
  });

  it('--all-ranks still lists a job of several ranks (the one rank --gpus sets is left out)', () => {
    const r = cli('mobilenet_v3_small', '--gpus', '4', '--engine', 'ddp', '--all-ranks');
    expect(r.code).toBe(0);
    expect(r.out).toContain('Every rank (4):');
  });

  it('a plan over a million GPUs, or one that would estimate thousands of ranks, is refused at --gpus in under 2 s', () => {
    const million = timed('plan', 'mobilenet_v3_small', '--gpu', '80GB', '--gpus', '1000000', '--global-batch', '16');
    expect([million.code, million.err]).toEqual([2, 'vram-ts: --gpus: must be an integer from 1 to 1024 (expected integer 1 – 1024, got 1000000)\n']);
    expect(million.ms).toBeLessThan(2000);
    const wide = timed('plan', 'mobilenet_v3_small', '--gpu', '80GB', '--gpus', '1024', '--global-batch', '1024');
    expect(wide.code).toBe(2);
    expect(wide.err).toMatch(/^vram-ts: --gpus: the search would estimate \d+ ranks/);
    expect(wide.ms).toBeLessThan(2000);
  });
});
