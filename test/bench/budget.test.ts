/**
 * Issue 11's budgets, on ratios taken in one run (not absolute times, which depend on the
 * machine): a 126-layer training step at most 3× a 1-layer one, a `[B, S]`-symbolic estimate at
 * most 3× the concrete one, maxFitting at most 3× one estimate. The same cases as
 * `npm run bench` (bench/scaling.ts), fewer rounds; each task's fastest call, the tasks of a
 * budget taking turns, so that the other test files running alongside slow them alike.
 */
import { describe, expect, it } from 'vitest';
import * as lib from '../../src/index.js';
import { scaling } from '../../bench/scaling.js';

describe('scaling budgets', () => {
  it('hold on ratios measured in one run', () => {
    const { budgets } = scaling(lib, { rounds: 12, calls: 4, depths: [1, 126] });
    for (const budget of budgets) expect(budget.ratio, `${budget.name}: ${budget.ratio.toFixed(2)}×`).toBeLessThanOrEqual(budget.limit);
  }, 120_000);
});
