/**
 * `npm run bench`: in-process timings after warm-up (tinybench). Not a test: it prints.
 */
import { Bench } from 'tinybench';
import { estimate, mobilenetV3Large, mobilenetV3Small, summary } from '../src/index.js';

const seedModel = mobilenetV3Small({ numClasses: 3 });
const large = mobilenetV3Large();
const seed = { input: [1, 3, 4000, 2672] } as const;

const bench = new Bench({ time: 1000, warmupTime: 300 });
bench
  .add('estimate: seed (MobileNetV3-small, 3×4000×2672)', () => {
    estimate(seedModel, seed);
  })
  .add('summary torchsummary: seed', () => {
    summary(seedModel, { ...seed, format: 'torchsummary' });
  })
  .add('summary breakdown: seed', () => {
    summary(seedModel, seed);
  })
  .add('estimate: MobileNetV3-large 1×3×1024×768', () => {
    estimate(large, { input: [1, 3, 1024, 768] });
  });

await bench.run();
const rows = bench.tasks.map((task) => {
  const r = task.result as { latency?: { mean: number; p50?: number; p99?: number }; mean?: number; samples?: unknown[] } | undefined;
  const mean = r?.latency?.mean ?? r?.mean ?? NaN;
  return { task: task.name, 'mean (ms)': Number(mean.toFixed(4)), 'p99 (ms)': Number((r?.latency?.p99 ?? NaN).toFixed(4)), samples: (r as { latency?: { samplesCount?: number } })?.latency?.samplesCount ?? '' };
});
console.table(rows);
