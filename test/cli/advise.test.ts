/** `vram-ts fit --advise` and `vram-ts rl --advise`: advise's and adviseRl's tables of the flags' job, their usage rules and exit codes. */
import { describe, expect, it } from 'vitest';
import { advise, adviseRl, formatBytes, llm, mobilenetV3Small } from '../../src/index.js';
import { cli } from '../helpers/cli.js';

describe('vram-ts fit --advise', () => {
  it("prints the baseline, then advise's levers in its order with their figures, then what was skipped", () => {
    const r = cli('fit', 'mobilenet_v3_small', '--gpu', '4GB', '--advise', '--batch', '64', '--classes', '10');
    expect(r.code).toBe(0);
    expect(r.err).toBe('');
    const a = advise(mobilenetV3Small({ numClasses: 10 }), { input: [64, 3, 224, 224], gpu: '4GB' });
    const lines = r.out.split('\n');
    expect(lines[0]).toBe(
      `baseline: ${a.baseline.fits ? 'fits' : 'does not fit'}: needs ${formatBytes(a.baseline.needed)} of ${formatBytes(a.baseline.capacity)} (4GB), headroom ${formatBytes(a.baseline.headroom)}`,
    );
    const rows = lines.filter((l) => /^ {2}(yes|no) /.test(l));
    expect(rows.map((l) => l.trim().split(/\s+/).at(-1))).toEqual(a.levers.map((l) => l.lever));
    const first = a.levers[0]!;
    expect(rows[0]).toContain(formatBytes(first.needed));
    expect(rows[0]).toContain(first.cost.kind);
    expect(r.out).toContain(`change: ${first.description}`);
    expect(r.out).toContain(`cost:   ${first.cost.note}`);
    expect(r.out).toContain(a.best === undefined ? 'best: none fits' : `best: ${a.best.lever} (${a.best.cost.kind})`);
    expect(r.out).toMatch(/\nskipped\n(.*\n)* {2}lora +no Linear layer matches/);
  });

  it('makes the Qwen job of the issue fit, and --gpus N adds the sharding levers', () => {
    const args = ['fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--advise', '--batch', '8', '--seq', '8192', '--precision', 'bf16', '--optimizer', 'adamw'];
    const one = cli(...args, '--check');
    expect(one.code).toBe(0);
    expect(one.out).toMatch(/^baseline: does not fit: needs/);
    expect(one.out).toMatch(/\n {2}yes .* micro-batches\n/);
    expect(one.out).toMatch(/ {2}shard-fsdp2 +sharding needs more than one GPU/);
    const two = cli(...args, '--gpus', '2');
    expect(two.code).toBe(0);
    expect(two.out).toMatch(/ shard-fsdp2\n {4}change: FSDP2 \(fully_shard\) over 2 GPUs, batch 8 on each/);
  });

  it('is not with --solve or a layout flag, and --check exits 1 when nothing fits', () => {
    const solve = cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--advise', '--solve', 'seq');
    expect(solve.code).toBe(2);
    expect(solve.out).toBe('');
    expect(solve.err).toMatch(/--solve: is not with --advise/);
    const engine = cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--advise', '--gpus', '2', '--zero', '2');
    expect(engine.code).toBe(2);
    expect(engine.err).toMatch(/--zero: is a layout: --advise starts from one GPU/);
    const scope = cli('mobilenet_v3_small', '--advise');
    expect(scope.code).toBe(2);
    expect(scope.err).toMatch(/--advise/);
    const none = cli('fit', 'qwen2.5-0.5b', '--gpu', '1GB', '--advise', '--check');
    expect(none.code).toBe(1);
    expect(none.out).toContain('best: none fits');
  });
});

describe('vram-ts rl --advise', () => {
  const job = ['rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', '79.22GiB', '--num-generations', '8', '--max-completion-length', '4096', '--prompt', '256'];
  it("prints adviseRl's baseline and levers in its order with their figures; --format json is the result", () => {
    const r = cli(...job, '--advise', '--check');
    expect(r.code).toBe(0);
    expect(r.err).toBe('');
    const a = adviseRl(llm('qwen2.5-0.5b'), {
      framework: 'trl',
      totalBytes: 85_061_827_297,
      trainer: { config: { num_generations: 8, max_completion_length: 4096 }, prompt: 256 },
    });
    expect(r.out.split('\n')[0]).toBe(
      `baseline: does not fit: peak ${formatBytes(a.baseline.peak)} in ${a.baseline.peakPhase}, usable ${formatBytes(a.baseline.usable)} of ${formatBytes(a.baseline.totalBytes)} (79.22GiB), headroom -${formatBytes(-a.baseline.headroom)}`,
    );
    const rows = r.out.split('\n').filter((l) => /^ {2}(yes|no) /.test(l));
    expect(rows.map((l) => l.trim().split(/\s+/).at(-1))).toEqual(a.levers.map((l) => l.lever));
    expect(r.out).toContain(`change: ${a.best!.description}`);
    expect(r.out).toContain('best: rollout-utilization (none)');
    const json = JSON.parse(cli(...job, '--advise', '--format', 'json').out);
    expect(json.best.lever).toBe('rollout-utilization');
    expect(json.best.peak).toBe(a.best!.peak);
  });

  it('--check exits 1 when nothing fits', () => {
    const none = cli('rl', 'qwen2.5-0.5b', '--framework', 'trl', '--gpu', '4GiB', '--max-completion-length', '4096', '--prompt', '256', '--advise', '--check');
    expect(none.code).toBe(1);
    expect(none.out).toContain('best: none fits');
  });
});
