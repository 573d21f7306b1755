/**
 * Plans of a few jobs as JSON from a built dist (argv[2]): the search as it was before issue 25
 * made it faster, kept in test/fixtures/plan/before-25.json so that the faster search is held to
 * the same layouts (the cases: test/helpers/plan-cases.ts). Made with the commit before the change
 * built in a worktree:
 *   git worktree add /tmp/base b5a7219 && (cd /tmp/base && npm ci && npx tsup)
 *   npx tsx tools/plan_cases.ts /tmp/base/dist/index.js > test/fixtures/plan/before-25.json
 */
import { planCases } from '../test/helpers/plan-cases.js';

const lib = await import(process.argv[2]!);
const out: Record<string, unknown> = {};
for (const [name, run] of Object.entries(planCases(lib))) out[name] = run();
console.log(JSON.stringify(out, null, 1));
