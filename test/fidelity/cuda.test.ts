/**
 * vram-ts against PyTorch 2.x on a CUDA GPU: fixtures written by tools/measure_cuda.py on an
 * H200 with PyTorch 2.11 (command and method in tools/oracle/README.md). The same cases as
 * the CPU oracle, measured with torch.cuda.max_memory_allocated over the third training step
 * and a no-grad forward.
 *
 * The device keeps the runtime's own allocations between cases (the cuBLAS workspaces of the
 * forward and backward threads): each measurement records them as `allocatedBeforeBuild`, and
 * the case's own peak is `maxAllocated - allocatedBeforeBuild`. vram-ts reports those
 * workspaces as runtime lines, never inside the peak; the last test checks that line.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CONTEXT_DEFAULTS } from '../../src/index.js';
import { cublasWorkspace } from '../../src/internals.js';
import { compareCudaFixture, loadCudaFixtures, modelFor, tolerance, type OracleFixture } from '../helpers/oracle.js';

const fixtures = loadCudaFixtures();

describe('fidelity against PyTorch 2.x on CUDA (test/fixtures/cuda)', () => {
  if (fixtures.length === 0) {
    it.todo('pending — no CUDA fixtures committed: run `python3 tools/measure_cuda.py` on a CUDA GPU');
    return;
  }
  it('has every case the CPU oracle has', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(40);
  });
  for (const fixture of fixtures) {
    const built = modelFor({ case: fixture.case } as OracleFixture);
    if ('pending' in built) {
      it.todo(`${fixture.id}: pending — ${built.pending}`);
      continue;
    }
    it(`${fixture.id}: parameters exact, saved bytes and allocated peaks within tolerance`, () => {
      for (const c of compareCudaFixture(fixture, built.layer)) {
        expect(Math.abs(c.error), `${c.figure}: PyTorch ${c.pytorch}, vram-ts ${c.ours}`).toBeLessThanOrEqual(tolerance(c));
      }
    });
  }
  it('runtime lines: the cuBLAS workspace per handle is what PyTorch allocated on this GPU', () => {
    const runtime = JSON.parse(readFileSync(new URL('../fixtures/cuda/runtime.json', import.meta.url), 'utf8')) as {
      env: { capability: string };
      contextBytes: number;
      cublasWorkspaceAllocated: number;
      persistentAfterWarmup: number;
    };
    expect(runtime.env.capability).toBe('9.0'); // Hopper
    expect(runtime.cublasWorkspaceAllocated).toBe(cublasWorkspace('hopper'));
    // The Hopper context default is this measurement.
    expect(CONTEXT_DEFAULTS.hopper).toBe(runtime.contextBytes);
    // After a training step two workspaces stay (the caller's thread and autograd's), and 1 MiB more we do not attribute.
    expect(runtime.persistentAfterWarmup - 2 * cublasWorkspace('hopper')).toBe(2 ** 20);
  });
});
