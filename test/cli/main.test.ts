import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { deepspeedZero2, estimate, formatBytes, llm, zeroPaper } from '../../src/index.js';
import { cli, scratch } from '../helpers/cli.js';

const tmp = scratch('cli').dir;

describe('vram-ts command', () => {
  it("prints the seed's breakdown (the README's main job)", () => {
    const r = cli('mobilenet_v3_small', '--input', '3x4000x2672', '--classes', '3', '--train');
    expect(r.code).toBe(0);
    expect(r.out).toContain('3,437,733,408');
    // PyTorch 1.13's rules, as torchsummary's users measured them: the pooled input is kept too.
    expect(cli('mobilenet_v3_small', '--input', '3x4000x2672', '--classes', '3', '--train', '--device', 'cpu', '--framework', 'torch-1.13').out).toContain(
      '3,461,925,408',
    );
    expect(cli('mobilenet_v3_small', '--framework', 'torch-3').code).toBe(2);
    expect(r.out).toContain('Why torchsummary says 7357.33 MB');
    expect(r.out).toMatch(/1,520,931 elements/);
  });

  it('prints torchsummary and torchinfo text', () => {
    const ref = readFileSync(new URL('../fixtures/reference/torchsummary_mobilenet_v3_small_3cls_224x224.txt', import.meta.url), 'utf8');
    expect(cli('mobilenet_v3_small', '--classes', '3', '--format', 'torchsummary').out).toBe(ref);
    expect(cli('mobilenet_v3_small', '--classes', '3', '--format', 'torchinfo').out).toContain('Total mult-adds (M): 55.51');
  });

  it('counts the KV cache of the asked batch and context in an inference verdict', () => {
    // 32 × 8192 tokens of Llama-3-8B keep 32 GiB of keys and values: with the weights that no longer fits 80 GB.
    const r = cli('llama-3-8b', '--infer', '--batch', '32', '--seq', '8192', '--precision', 'bf16', '--attention', 'sdpa', '--gpu', 'H100', '--check');
    expect(r.code).toBe(1);
    expect(r.out).toContain('KV cache for 32 × 8192 tokens (bfloat16): 34,359,738,368 B (32.00 GiB), included in the peak above');
    expect(cli('fit', 'llama-3-8b', '--infer', '--seq', '8192', '--precision', 'bf16', '--gpu', 'H100', '--solve', 'batch').out.trim()).not.toBe('32');
    // Without the cache, 32 × 8192 still allocates 79.58 GiB: above the 79.22 GiB PyTorch reports for an H100 before the context.
    expect(cli('llama-3-8b', '--infer', '--batch', '32', '--seq', '8192', '--precision', 'bf16', '--gpu', 'H100', '--check', '--no-cache').code).toBe(1);
    // 20 × 8192: the 20 GiB cache makes an allocation fail even after the allocator frees its cached blocks; without it, it fits.
    const cached = cli('llama-3-8b', '--infer', '--batch', '20', '--seq', '8192', '--precision', 'bf16', '--gpu', 'H100', '--check');
    expect(cached.code).toBe(1);
    expect(cached.out).toContain('PyTorch would raise: OutOfMemoryError: CUDA out of memory. Tried to allocate');
    expect(cli('llama-3-8b', '--infer', '--batch', '20', '--seq', '8192', '--precision', 'bf16', '--gpu', 'H100', '--check', '--no-cache').code).toBe(0);
    // 16 × 8192 reserves more than the usable memory with nothing freed, yet runs: the cached blocks are freed and retried.
    const retried = cli('llama-3-8b', '--infer', '--batch', '16', '--seq', '8192', '--precision', 'bf16', '--gpu', 'H100', '--check');
    expect(retried.code).toBe(0);
    expect(retried.out).toContain('every allocation is placed once the caching allocator frees its cached blocks and retries');
  });

  it('follows a named transformers release and picks its default attention', () => {
    const eager = cli('gpt2', '--infer', '--seq', '64', '--transformers', '4.40.2', '--format', 'json');
    const sdpa = cli('gpt2', '--infer', '--seq', '64', '--transformers', '4.42.0', '--format', 'json');
    expect(eager.code).toBe(0);
    // GPT-2 had no sdpa class before 4.42: transformers 4.40 runs it eager, 4.42 picks sdpa.
    expect(cli('gpt2', '--infer', '--seq', '64', '--transformers', '4.42.0', '--attention', 'eager', '--format', 'json').out).toBe(eager.out);
    expect(sdpa.out).not.toBe(eager.out);
    const bad = cli('gpt2', '--transformers', '5.3.0');
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('transformers');
  });

  it('solves the longest context that fits (fit … --solve seq) and exits 0', () => {
    const r = cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--train', '--solve', 'seq');
    expect(r.code).toBe(0);
    expect(Number(r.out.trim())).toBeGreaterThan(100);
  });

  it('plan: the layouts that fit, the fewest GPUs, the same figures as the library; its required flags', () => {
    const args = ['plan', 'qwen2.5-0.5b', '--gpu', '24GB', '--gpus', '4', '--global-batch', '8', '--seq', '2048', '--precision', 'bf16', '--engine', 'fsdp2'];
    const json = cli(...args, '--format', 'json');
    expect(json.code, json.err).toBe(0);
    type Layout = { dp: number; engine: string; microBatch: number; accumulation: number; peak: number; rank: number };
    const r = JSON.parse(json.out) as { fewest: Layout; layouts: Layout[] };
    expect(r.layouts.map((l) => `${l.dp} ${l.engine}`)).toEqual(['1 single', '2 fsdp2', '4 fsdp2']);
    // A layout without accumulation is one estimate of its highest rank.
    const four = r.layouts[2]!;
    expect(four.accumulation).toBe(1);
    const same = cli(
      'qwen2.5-0.5b',
      '--seq',
      '2048',
      '--precision',
      'bf16',
      '--batch',
      String(four.microBatch),
      '--gpus',
      '4',
      '--rank',
      String(four.rank),
      '--format',
      'json',
    );
    expect((JSON.parse(same.out) as { bytes: { peak: number } }).bytes.peak).toBe(four.peak);
    const best = r.fewest;
    expect(cli(...args).out).toContain(`Fewest GPUs: ${best.dp} `);
    for (const [drop, flag] of [
      ['--gpu', '--gpu'],
      ['--gpus', '--gpus'],
      ['--global-batch', '--global-batch'],
    ] as const) {
      const i = args.indexOf(drop);
      const r2 = cli(...args.slice(0, i), ...args.slice(i + 2));
      expect(r2.code).toBe(2);
      expect(r2.err).toContain(flag);
    }
    expect(cli(...args, '--batch', '2').err).toContain('--global-batch');
  });

  it('compat: the closed form as its code computes it, beside the same job in vram-ts', () => {
    const params = estimate(llm('qwen2.5-0.5b'), { input: [1, 1], optimizer: null }).params.total;
    const paper = zeroPaper({ params, gpus: 8 });
    const out = cli('compat', 'zero-paper', 'qwen2.5-0.5b', '--gpus', '8', '--seq', '256');
    expect(out.code, out.err).toBe(0);
    for (const bytes of [paper.baseline, paper.stage1, paper.stage2, paper.stage3]) expect(out.out).toContain(formatBytes(bytes));
    const zero3 = estimate(llm('qwen2.5-0.5b'), { input: [1, 256], precision: 'bf16', parallel: { engine: 'deepspeed', dp: 8, zero: 3 }, timeline: false });
    expect(out.out).toMatch(new RegExp(`P_os\\+g\\+p .* ${formatBytes(zero3.bytes.peak as number).replace('.', '\\.')}  DeepSpeed ZeRO-3`));
    const ds = cli('compat', 'deepspeed', 'qwen2.5-0.5b', '--gpus', '8', '--nodes', '2', '--seq', '256');
    expect(ds.out).toContain(formatBytes(deepspeedZero2({ totalParams: params, gpusPerNode: 8, nodes: 2, cpuOffload: false }).gpu));
    expect(ds.out).toContain('largest layer 136,134,656 (model.embed_tokens)');
    const mg = cli('compat', 'megatron', 'qwen2.5-0.5b', '--gpus', '8', '--tp', '2', '--seq', '1024');
    expect(mg.code, mg.err).toBe(0);
    expect(mg.out).toContain('vram-ts, rank 0 (tensor parallel 2 with sequence parallel');
    expect(cli('compat', 'megatron', 'qwen2.5-0.5b', '--gpus', '8', '--pp', '2', '--seq', '256').out).toContain(
      'vram-ts, rank 0 (pipeline stage 0 of 2 (1F1B, 2 micro-batches, DDP)',
    );
    expect(cli('compat', 'megatron', 'qwen2.5-0.5b', '--gpus', '8', '--tp', '2', '--pp', '2', '--seq', '256').out).toContain('not modelled yet');
    for (const [args, flag] of [
      [['compat', 'zero-paper', 'mobilenet_v3_small'], 'model'],
      [['compat', 'zero-paper', 'qwen2.5-0.5b', '--tp', '2'], '--tp'],
      [['compat', 'deepspeed', 'qwen2.5-0.5b', '--gpus', '8', '--nodes', '0'], '--nodes'],
      [['compat', 'zero-paper', 'qwen2.5-0.5b', '--nodes', '2'], '--nodes'],
      [['compat', 'zeropaper', 'qwen2.5-0.5b'], 'compat'],
      [['compat', 'megatron', 'qwen2.5-0.5b', '--gpus', '6', '--tp', '4'], '--gpus'],
    ] as const) {
      const r = cli(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err).toContain(flag);
    }
  });

  it('lists every rank with --all-ranks: the JSON exact per rank, the table in runs of equal ranks', () => {
    const args = ['qwen2.5-0.5b', '--seq', '512', '--precision', 'bf16', '--gpus', '6', '--engine', 'zero-redundancy', '--all-ranks'];
    const json = cli(...args, '--format', 'json');
    expect(json.code, json.err).toBe(0);
    const ranks = (JSON.parse(json.out) as { ranks: { rank: number; optimizer: number }[] }).ranks;
    expect(ranks.map((r) => r.rank)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const r of ranks)
      expect(
        (JSON.parse(cli(...args.slice(0, -1), '--rank', String(r.rank), '--format', 'json').out) as { bytes: { optimizer: number } }).bytes.optimizer,
      ).toBe(r.optimizer);
    const table = cli(...args);
    expect(table.out).toMatch(/Every rank \(6\):\nrank +peak +parameters +gradients +optimizer\n0 /);
  });

  it('offloads to host memory (--offload) and runs micro-batches (--micro-batches), refusing what does not apply', () => {
    const json = (...args: string[]) => {
      const r = cli('qwen2.5-0.5b', '--seq', '256', '--precision', 'bf16', '--format', 'json', ...args);
      expect(r.code, r.err).toBe(0);
      return JSON.parse(r.out) as { bytes: { peak: number; optimizer: number }; host?: { optimizer: number } };
    };
    const zero3 = json('--gpus', '8', '--zero', '3');
    const offloaded = json('--gpus', '8', '--zero', '3', '--offload', 'optimizer');
    expect(offloaded.bytes.optimizer).toBeLessThan(zero3.bytes.optimizer);
    expect(offloaded.host!.optimizer).toBeGreaterThan(0);
    expect(json('--micro-batches', '2').bytes.peak).toBeGreaterThanOrEqual(json().bytes.peak);
    for (const [args, flag] of [
      [['--offload', 'optimizer'], '--offload'],
      [['--gpus', '8', '--zero', '3', '--offload', 'disk'], '--offload'],
      [['--gpus', '8', '--engine', 'ddp', '--offload', 'optimizer'], 'offload'],
      [['--stage', '1'], '--stage'],
      [['--pp', '2'], '--pp'],
      [['--gpus', '6', '--pp', '4'], '--gpus'],
      [['--infer', '--micro-batches', '2'], '--micro-batches'],
    ] as const) {
      const r = cli('qwen2.5-0.5b', '--seq', '64', ...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err).toContain(flag);
    }
  });

  it('estimates one rank of N data-parallel GPUs (--gpus, --fsdp, --engine, --rank)', () => {
    const peak = (...args: string[]) => {
      const r = cli('qwen2.5-0.5b', '--seq', '1024', '--precision', 'bf16', '--format', 'json', ...args);
      expect(r.code, r.err).toBe(0);
      return JSON.parse(r.out) as { bytes: { peak: number; parameters: number; optimizer: number } };
    };
    const one = peak();
    const fsdp = peak('--gpus', '8', '--fsdp');
    const ddp = peak('--gpus', '8', '--engine', 'ddp');
    expect(fsdp.bytes.parameters).toBe(one.bytes.parameters / 8);
    expect(fsdp.bytes.peak).toBeLessThan(one.bytes.peak);
    // DDP keeps everything and adds its gradient buckets.
    expect(ddp.bytes.peak).toBeGreaterThan(one.bytes.peak);
    expect(peak('--gpus', '8', '--engine', 'zero-redundancy', '--rank', '7').bytes.optimizer).toBeLessThan(one.bytes.optimizer);
    expect(peak('--gpus', '1', '--engine', 'fsdp2')).toEqual(one);
    // DeepSpeed ZeRO: --zero picks the stage (the engine implied); stage 3 shards the parameters.
    const zero3 = peak('--gpus', '8', '--zero', '3');
    expect(zero3).toEqual(peak('--gpus', '8', '--engine', 'deepspeed', '--zero', '3'));
    expect(zero3.bytes.parameters).toBeLessThan(peak('--gpus', '8', '--zero', '2').bytes.parameters);
    expect(cli('qwen2.5-0.5b', '--seq', '64', '--gpus', '2', '--zero', '1').out.split('\n')[0]).toContain('rank 0 of 2 (deepspeed ZeRO-1)');
    for (const [args, flag] of [
      [['--gpus', '2', '--engine', 'deepspeed'], '--engine'],
      [['--gpus', '2', '--zero', '4'], '--zero'],
      [['--zero', '2'], '--zero'],
      [['--gpus', '2', '--zero', '2', '--fsdp'], '--zero'],
      [['--gpus', '2', '--zero', '2', '--engine', 'ddp'], '--zero'],
      [['--gpus', '8', '--rank', '8'], '--rank'],
      [['--gpus', '2', '--fsdp', '--engine', 'ddp'], '--fsdp'],
      [['--gpus', '2', '--infer'], '--gpus'],
      [['--gpus', '2', '--engine', 'megatron-lm'], '--engine'],
      [['--gpus', '2', '--distributed-optimizer'], '--distributed-optimizer'],
      [['--all-ranks'], '--all-ranks'],
      [['--gpus', '4', '--all-ranks', '--rank', '1'], '--all-ranks'],
    ] as const) {
      const r = cli('qwen2.5-0.5b', ...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err).toContain(flag);
    }
    const fit = cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--solve', 'seq', '--precision', 'bf16', '--gpus', '8', '--fsdp');
    expect(fit.code).toBe(0);
    expect(Number(fit.out)).toBeGreaterThan(Number(cli('fit', 'qwen2.5-0.5b', '--gpu', 'A800-80GB', '--solve', 'seq', '--precision', 'bf16').out));
  });

  it('estimates the torchvision catalog by its names (vram-ts resnet50 --input 3x224x224 --train)', () => {
    const r = cli('resnet50', '--input', '3x224x224', '--train', '--format', 'json');
    expect(r.code, r.err).toBe(0);
    // torchvision 0.14's resnet50: 25,557,032 parameters with the 1000-class head.
    expect((JSON.parse(r.out) as { params: { total: number } }).params.total).toBe(25_557_032);
    expect((JSON.parse(cli('resnet18', '--classes', '10', '--format', 'json').out) as { params: { total: number } }).params.total).toBe(11_181_642);
    expect(cli('resnet50', '--checkpointing').code).toBe(0);
    expect(cli('vit_b_16', '--checkpointing').err).toContain('--checkpointing');
  });

  it('gives json, markdown, explain and an SVG file', () => {
    const json = JSON.parse(cli('qwen2.5-0.5b', '--seq', '64', '--precision', 'bf16', '--format', 'json').out) as { params: { total: number } };
    expect(json.params.total).toBe(494_032_768);
    expect(cli('gpt2', '--seq', '32', '--format', 'markdown').out).toContain('| GPT2LMHeadModel | bytes | size |');
    expect(cli('gpt2', '--seq', '32', '--format', 'explain').out).toContain('saved activations');
    const svg = join(tmp, 'step.svg');
    expect(cli('mobilenet_v3_small', '--svg', svg).code).toBe(0);
    expect(readFileSync(svg, 'utf8')).toMatch(/^<svg/);
    // --chart breakdown with --gpu: the bar of what is live at the peak against the card.
    const bar = join(tmp, 'bar.svg');
    expect(cli('mobilenet_v3_small', '--gpu', '24GB', '--svg', bar, '--chart', 'breakdown').code).toBe(0);
    expect(readFileSync(bar, 'utf8')).toContain('of 24.00 GiB');
    expect(cli('mobilenet_v3_small', '--chart', 'breakdown').code).toBe(2);
  });

  it('exits 1 with --check when it does not fit, 0 when it does', () => {
    expect(cli('llama-3-8b', '--seq', '4096', '--gpu', '24GB', '--check').code).toBe(1);
    expect(cli('mobilenet_v3_small', '--gpu', '24GB', '--check').code).toBe(0);
  });

  it('exits 2 with a one-line reason for bad input', () => {
    const bad = join(tmp, 'config.json');
    writeFileSync(
      bad,
      JSON.stringify({
        model_type: 'llama',
        hidden_size: 64,
        intermediate_size: 128,
        num_hidden_layers: 1,
        num_attention_heads: 4,
        num_key_value_heads: 3,
        vocab_size: 100,
      }),
    );
    const r = cli(bad);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^vram-ts: num_key_value_heads: .*\n$/);
    const missing = cli(join(tmp, 'missing.json'));
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('cannot read');
    expect(cli('mobilenet_v3_small', '--input', '3x224').code).toBe(2);
    expect(cli('no-such-model').code).toBe(2);
    expect(cli('mobilenet_v3_small', '--nope').code).toBe(2);
  });

  it('reads only a safetensors header', () => {
    const header = new TextEncoder().encode(
      JSON.stringify({ a: { dtype: 'BF16', shape: [2, 3], data_offsets: [0, 12] }, b: { dtype: 'F32', shape: [4], data_offsets: [12, 28] } }),
    );
    const file = new Uint8Array(8 + header.length + 28);
    new DataView(file.buffer).setBigUint64(0, BigInt(header.length), true);
    file.set(header, 8);
    const path = join(tmp, 'model.safetensors');
    writeFileSync(path, file);
    expect(cli('--safetensors', path).out).toContain('2 tensors, 10 parameters (BF16 6, F32 4)');
  });

  it('prints help with examples', () => {
    const r = cli('--help');
    expect(r.code).toBe(0);
    expect(r.out).toContain('Examples');
  });
});
