/**
 * vLLM's start-up logs as published (test/fixtures/vllm-logs, each with its URL and the quoted
 * lines): from the logged "Available KV cache memory" (rounded to 0.01 GiB) and the model's
 * config, the pool's token (or block) count vllmEngine gives must contain the logged one in the
 * interval that rounding allows.
 */
import { describe, expect, it } from 'vitest';
import { loadVllmLogs, modelOfLog, poolTokens } from '../helpers/vllm-logs.js';

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
