/**
 * The plans test/fixtures/plan/before-25.json holds (tools/plan_cases.ts writes them from a built
 * dist; test/plan-search.test.ts checks the search still gives them): one list for both.
 */
import type * as Lib from '../../src/index.js';

type Library = Pick<typeof Lib, 'llm' | 'plan' | 'mobilenetV3Small' | 'seq' | 'linear' | 'relu'>;

/** Each case's name and its plan, from `lib` (src/ in the test, a dist/ in the tool). */
export function planCases(lib: Library): Record<string, () => unknown> {
  const { llm, plan, mobilenetV3Small, seq, linear, relu } = lib;
  const q = llm('qwen2.5-0.5b');
  const uneven = seq(linear({ out: 4095 }), relu(), linear({ out: 4097 }), relu(), linear({ out: 10 }));
  const layers = { modules: Array.from({ length: 24 }, (_, i) => `model.layers.${i}`) };
  const bf16 = { precision: 'bf16', optimizer: 'adamw' } as const;
  return {
    'qwen2.5-0.5b 64 × 8192 on up to 8 A800-80GB': () => plan(q, { ...bf16, sample: [8192], globalBatch: 64, gpu: 'A800-80GB', gpus: 8 }),
    'qwen2.5-0.5b 48 × 4096 on up to 12 × 24GB': () => plan(q, { ...bf16, sample: [4096], globalBatch: 48, gpu: '24GB', gpus: 12 }),
    'qwen2.5-0.5b 16 × 8192 on up to 16 × 16GB, checkpointing tried': () =>
      plan(q, { ...bf16, sample: [8192], globalBatch: 16, gpu: '16GB', gpus: 16, checkpoint: layers }),
    'uneven MLP 60 × 4096 on up to 10 × 300MB': () => plan(uneven, { optimizer: 'adam', sample: [4096], globalBatch: 60, gpu: '300MB', gpus: 10 }),
    'uneven MLP 24 × 4096 on up to 6 × 300MB, pipelines 1-3': () =>
      plan(uneven, { optimizer: 'adam', sample: [4096], globalBatch: 24, gpu: '300MB', gpus: 6, pipelines: [1, 2, 3] }),
    'MobileNetV3-small 32 × 3×512×512 on up to 4 × 4GB': () =>
      plan(mobilenetV3Small({ numClasses: 3 }), { optimizer: 'adam', sample: [3, 512, 512], globalBatch: 32, gpu: '4GB', gpus: 4 }),
  };
}
