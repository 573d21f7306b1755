/**
 * vram-ts against CUDA figures measured by tools/measure_cuda.py (PyTorch 2.x on a GPU),
 * when they are committed under test/fixtures/cuda. None are yet: no GPU was available
 * where the fixtures were made; the test says so instead of passing silently.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { estimate, type OptimizerName } from '../../src/index.js';
import { modelFor, type OracleFixture } from '../helpers/oracle.js';

const dir = new URL('../fixtures/cuda/', import.meta.url);
const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];

interface CudaFixture {
  readonly id: string;
  readonly case: OracleFixture['case'];
  readonly train: Readonly<Record<string, { readonly maxAllocated: number }>>;
  readonly inference: { readonly maxAllocated: number };
}

describe('fidelity against PyTorch 2.x on CUDA (test/fixtures/cuda)', () => {
  if (files.length === 0) {
    it.todo('pending — no CUDA fixtures committed: run `python3 tools/measure_cuda.py` on a CUDA GPU');
    return;
  }
  for (const file of files) {
    const fixture = JSON.parse(readFileSync(new URL(file, dir), 'utf8')) as CudaFixture;
    const built = modelFor({ case: fixture.case } as OracleFixture);
    if ('pending' in built) {
      it.todo(`${fixture.id}: pending — ${built.pending}`);
      continue;
    }
    it(`${fixture.id}: allocated peaks within 5%`, () => {
      const base = { input: fixture.case.input, device: 'cuda' as const, moduleMode: fixture.case.mode, timeline: false };
      for (const [name, measured] of Object.entries(fixture.train)) {
        const ours = estimate(built.layer, { ...base, optimizer: name as OptimizerName }).bytes.peak as number;
        expect(Math.abs(ours - measured.maxAllocated) / measured.maxAllocated, `train ${name}`).toBeLessThanOrEqual(0.05);
      }
      const inference = estimate(built.layer, { ...base, mode: 'inference' }).bytes.peak as number;
      expect(Math.abs(inference - fixture.inference.maxAllocated) / fixture.inference.maxAllocated).toBeLessThanOrEqual(0.05);
    });
  }
});
