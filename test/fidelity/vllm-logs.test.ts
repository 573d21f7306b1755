/**
 * vLLM's start-up logs as published (test/fixtures/vllm-logs, each with its URL and the quoted
 * lines): from the logged "Available KV cache memory" (rounded to 0.01 GiB) and the model's
 * config, the pool's token (or block) count vllmEngine gives must contain the logged one in the
 * interval that rounding allows.
 */
import { describe, expect, it } from 'vitest';
import { vllmEngine } from '../../src/index.js';
import { WHOLE_BUDGET_LOGS, WHOLE_MODELS, loadVllmLogs, modelOfLog, poolTokens } from '../helpers/vllm-logs.js';

const GiB = 2 ** 30;
const logs = loadVllmLogs();

describe('published vLLM start-up logs', () => {
  it('are there, each with its source', () => {
    expect(logs.length).toBeGreaterThanOrEqual(10);
    for (const log of logs) {
      expect(log.url).toMatch(/^https:\/\/github\.com\//);
      expect(log.quoted.length).toBeGreaterThan(0);
    }
  });
  for (const log of logs) {
    const model = modelOfLog(log);
    const available = log.figures.availableKvGiB;
    const logged = log.figures.kvTokens ?? log.figures.gpuBlocks;
    if (model === undefined || available == null || logged == null || log.config?.sliding_window || log.config?.layer_types) continue;
    it(`${log.id}: the pool's ${log.figures.kvTokens != null ? 'tokens' : 'blocks'} from its memory`, () => {
      const lo = poolTokens(model, log, (available - 0.005) * GiB);
      const hi = poolTokens(model, log, (available + 0.005) * GiB);
      const [a, b] = log.figures.kvTokens != null ? [lo.tokens, hi.tokens] : [lo.blocks, hi.blocks];
      // With tensor parallelism the memory line is rank 0's and the pool every rank's minimum
      // (unify_kv_cache_configs): the logged count is at most rank 0's.
      if ((log.settings.tensorParallelSize ?? 1) === 1) expect(logged).toBeGreaterThanOrEqual(a);
      expect(logged).toBeLessThanOrEqual(b);
    });
  }
});

describe('published vLLM logs: the whole budget from the model', () => {
  const GiB2 = 2 ** 30;
  // The logs whose every line of the budget is printed: the weights come from vram-ts's rule, the
  // rest (what vLLM measured outside the model: the profiled peak, non-torch memory) from the log.
  for (const id of WHOLE_BUDGET_LOGS)
    it(`${id}: the KV pool within 3% of the log's`, () => {
      const f = logs.find((l) => l.id === id)!.figures;
      const { model, tp } = WHOLE_MODELS[id]!;
      const e = vllmEngine(model(), {
        totalBytes: f.totalGiB! * GiB2,
        gpuMemoryUtilization: logs.find((l) => l.id === id)!.settings.gpuMemoryUtilization!,
        tensorParallelSize: tp,
        // PR #10511's memory_profiling arithmetic, which V1 reused (PR #19312): no graph estimate in the budget.
        release: '0.8.0',
        measured: { activationPeakBytes: f.activationPeakGiB! * GiB2, nonTorchBytes: f.nonTorchGiB! * GiB2, cudaGraphBytes: 0 },
      });
      expect(Math.abs(e.kvCache.bytes / GiB2 - f.availableKvGiB!) / f.availableKvGiB!).toBeLessThan(0.03);
    });
});
