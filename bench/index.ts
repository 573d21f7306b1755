/**
 * `npm run bench`: the scaling table of the built package in dist/ (the code npm users run;
 * the script builds first). Times are the fastest of many calls after warm-up on this machine; the ratios, all
 * taken in this one run, are what the budgets hold (test/bench/budget.test.ts checks them on
 * src/). Not a test: it prints, and exits 1 when a budget is missed.
 */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import * as lib from '../dist/index.js';
import { allocatorRows } from './allocator.js';
import { planRows } from './plan.js';
import { fastest, scaling } from './scaling.js';

const { rows, budgets } = scaling(lib, { rounds: 30, calls: 5 });
// The allocator replay at 10^4, 10^5, 10^6 entries (issue 24): linear within 1.5× over 100× the entries.
const allocator = allocatorRows(lib);
rows.push(...allocator);
budgets.push({ name: 'replayAllocator 10^6 / 10^4 entries', ratio: allocator.at(-1)!.ratio, limit: 150 });

// The planner (issue 25): as ratios to one estimate of the same model.
const planned = planRows(lib);
rows.push(...planned.rows);
budgets.push(...planned.budgets);

// The CLI's cold start: a new Node process each time, as a shell user meets it.
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const [cold, node] = fastest(
  [() => spawnSync(process.execPath, [cli, '--help'], { encoding: 'utf8' }), () => spawnSync(process.execPath, ['-e', '0'], { encoding: 'utf8' })],
  { rounds: 5, calls: 1 },
) as [number, number];

console.log(`Node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'})`);
console.table(
  rows.map((r) => ({ group: r.group, task: r.task, 'fastest (ms)': Number(r.ms.toFixed(3)), 'ratio to the first of its group': Number(r.ratio.toFixed(2)) })),
);
console.log(`CLI cold start: vram-ts --help ${cold.toFixed(1)} ms (node -e 0 alone: ${node.toFixed(1)} ms)`);
const seed = rows.find((r) => r.group === 'seed')!;
console.log(`seed estimate after warm-up: ${seed.ms.toFixed(3)} ms (budget: under 1 ms) ${seed.ms < 1 ? 'ok' : 'MISSED'}`);
let missed = seed.ms >= 1;
for (const b of budgets) {
  const ok = b.ratio <= b.limit;
  missed ||= !ok;
  console.log(`${b.name}: ${b.ratio.toFixed(2)}× (budget: at most ${b.limit}×) ${ok ? 'ok' : 'MISSED'}`);
}
process.exitCode = missed ? 1 : 0;
