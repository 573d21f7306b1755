/** The torch-reported totals of the GPU catalog (issue 24): each figure recomputed from its quote, each sourced. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { gpuTable, withTable } from '../../scripts/gpus.js';
import { GPUS, type CapacityFigure, gpu, memoryBudget, torchCapacity } from '../../src/gpus/catalog.js';
import { VramError } from '../../src/index.js';

const MiB = 2 ** 20;
const GiB = 2 ** 30;

/** The bytes a quote prints, read from the quote's own text as its precision says. */
function bytesFromQuote(figure: CapacityFigure): number {
  const { quote, printed, precision } = figure;
  expect(quote).toContain(printed);
  if (precision === 'bytes') return Number(/\((\d+) bytes\)/.exec(printed)?.[1]);
  if (precision === 'mib') return Number(/total_memory=(\d+)MB/.exec(printed)?.[1]) * MiB;
  const gib = /(\d+)\.(\d\d) ?GiB/.exec(printed);
  expect(gib).not.toBeNull();
  return Math.round(((Number(gib![1]) * 100 + Number(gib![2])) * GiB) / 100);
}

const figures = GPUS.flatMap((g) => (g.capacity === undefined ? [] : [g.capacity, ...(g.capacity.others ?? [])].map((f) => [g.name, f] as const)));

describe('GPU capacities as torch reports them', () => {
  it.each(figures)('%s: the bytes are the quoted figure converted', (_, figure) => {
    expect(figure.bytes).toBe(bytesFromQuote(figure));
    expect(Number.isSafeInteger(figure.bytes)).toBe(true);
  });

  it.each(figures)('%s: every figure names its source (a GitHub URL) and quotes it', (_, figure) => {
    expect(figure.source).toMatch(/^https:\/\/github\.com\/[\w.-]+\/[\w.-]+\/(issues|pull|blob)\/\S+$/);
    expect(figure.quote.length).toBeGreaterThan(figure.printed.length);
    expect(['bytes', 'mib', 'gib-2dp']).toContain(figure.precision);
  });

  it('torch sees 95–100% of the driver total, never more', () => {
    for (const [name, figure] of figures) {
      const spec = gpu(name);
      expect(figure.bytes, name).toBeLessThan(spec.memoryBytes);
      expect(figure.bytes, name).toBeGreaterThan(0.95 * spec.memoryBytes);
    }
  });

  it('the figures published for one GPU agree within 0.5%', () => {
    for (const g of GPUS) for (const other of g.capacity?.others ?? []) expect(Math.abs(other.bytes / g.capacity!.bytes - 1), g.name).toBeLessThan(0.005);
  });

  it('pins the figures used', () => {
    const used = Object.fromEntries(GPUS.filter((g) => g.capacity !== undefined).map((g) => [g.name, g.capacity!.printed]));
    expect(used).toEqual({
      'V100-16GB': '15.78 GiB',
      'V100-32GB': '31.74 GiB',
      T4: '14.75 GiB',
      'A100-40GB': '39.38GiB',
      'A100-80GB': '79.25 GiB',
      'A800-80GB': '79.33 GiB',
      'RTX-3090': '23.58GiB',
      'RTX-A6000': '47.54GiB',
      L40S: '44.42GiB',
      L4: '22.03 GiB',
      'RTX-4090': '23.64 GiB',
      'RTX-4060': '7.75 GiB',
      'H100-80GB': '79.22GiB',
      'H200-141GB': '139.81 GiB',
      MI300X: '191.98 GiB',
    });
    expect(torchCapacity('A100-80GB')).toBe(85_094_039_552);
    expect(torchCapacity(gpu('h100'))).toBe(Math.round(79.22 * GiB));
  });

  it('torchTotal, which the engines read, is unchanged and equals capacity where both exist', () => {
    const legacy = Object.fromEntries(GPUS.filter((g) => g.torchTotal !== undefined).map((g) => [g.name, g.torchTotal!.bytes / GiB]));
    expect(Object.keys(legacy)).toEqual(['A100-40GB', 'RTX-3090', 'RTX-A6000', 'L40S', 'H100-80GB']);
    for (const [name, value] of Object.entries({ 'A100-40GB': 39.38, 'RTX-3090': 23.58, 'RTX-A6000': 47.54, L40S: 44.42, 'H100-80GB': 79.22 }))
      expect(legacy[name]).toBeCloseTo(value, 8);
    expect(gpu('H100-80GB').torchTotal!.source).toBe('vLLM log on H100-80G, total_gpu_memory (79.22GiB): https://github.com/vllm-project/vllm/pull/12126');
    for (const g of GPUS) if (g.torchTotal !== undefined) expect(g.torchTotal.bytes).toBe(g.capacity!.bytes);
  });

  it('an unsourced GPU is a VramError naming it, at gpu', () => {
    for (const name of ['A800-40GB', 'a800-40']) {
      expect(gpu(name).capacity).toBeUndefined();
      let error: unknown;
      try {
        torchCapacity(name);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(VramError);
      expect((error as VramError).issues[0]).toMatchObject({ path: ['gpu'], code: 'not-modelled' });
      expect((error as VramError).message).toContain(gpu(name).name);
    }
    expect(() => torchCapacity('nope')).toThrow(/unknown GPU/);
    expect(() => torchCapacity(null as never)).toThrow(VramError);
  });
});

describe('the catalog', () => {
  it('names and aliases are unique, normalised and resolve to their own GPU', () => {
    // An alias may repeat its own GPU's name (`l40s`); no key may name two GPUs.
    const keys = GPUS.flatMap((g) => [...new Set([g.name.toLowerCase(), ...g.aliases])]);
    expect(new Set(keys).size).toBe(keys.length);
    for (const g of GPUS) for (const alias of g.aliases) expect(gpu(alias)).toBe(g);
  });

  it('memoryBytes stays the driver total in whole MiB, and nominalBytes the label in GiB', () => {
    for (const g of GPUS) {
      expect(Number.isInteger(g.memoryBytes / MiB), g.name).toBe(true);
      expect(Number.isInteger(g.nominalBytes / GiB), g.name).toBe(true);
      const label = /(\d+)GB$/.exec(g.name)?.[1];
      if (label !== undefined) expect(g.nominalBytes, g.name).toBe(memoryBudget(`${label}GB`));
    }
    expect(memoryBudget('A100-80GB')).toBe(81_920 * MiB);
  });

  it('docs/gpus.md holds the table scripts/gpus.ts prints', () => {
    const doc = readFileSync(new URL('../../docs/gpus.md', import.meta.url), 'utf8');
    expect(withTable(doc)).toBe(doc);
    expect(doc).toContain(gpuTable());
  });
});
