/**
 * `npm run bench`: in-process timings after warm-up (tinybench) of the built package in dist/,
 * the code npm users run (the script builds first). Not a test: it prints.
 */
import { Bench } from 'tinybench';
import { estimate, llm, maxFitting, mobilenetV3Large, mobilenetV3Small, summary, sym } from '../dist/index.js';

const seedModel = mobilenetV3Small({ numClasses: 3 });
const large = mobilenetV3Large();
const seed = { input: [1, 3, 4000, 2672] } as const;
const qwen = llm('qwen2.5-0.5b');

const bench = new Bench({ time: 1500, warmupTime: 500 });
bench
  .add('estimate: seed, saved bytes only (optimizer: null, no timeline)', () => {
    estimate(seedModel, { ...seed, optimizer: null, timeline: false });
  })
  .add('estimate: seed, full training step with timeline (Adam)', () => {
    estimate(seedModel, seed);
  })
  .add('summary torchsummary: seed', () => {
    summary(seedModel, { ...seed, format: 'torchsummary' });
  })
  .add('estimate: MobileNetV3-large 1×3×1024×768, training step', () => {
    estimate(large, { input: [1, 3, 1024, 768] });
  })
  .add('maxFitting: batch of the seed model at 224×224 on an A100-80GB', () => {
    maxFitting(seedModel, 'B', { input: [sym('B'), 3, 224, 224], gpu: 'A100-80GB' });
  })
  .add('estimate: Qwen2.5-0.5B, 8×4096 bf16 training step', () => {
    estimate(qwen, { input: [8, 4096], precision: 'bf16', timeline: false });
  });

await bench.run();
console.table(
  bench.tasks.map((task) => {
    const latency = (task.result as { latency?: { mean: number; p50?: number; p99?: number; samplesCount?: number } } | undefined)?.latency;
    return { task: task.name, 'mean (ms)': Number((latency?.mean ?? NaN).toFixed(3)), 'p50 (ms)': Number((latency?.p50 ?? NaN).toFixed(3)), samples: latency?.samplesCount ?? '' };
  }),
);
