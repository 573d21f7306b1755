import { oneForwardOneBackward, type PipelineAction, type PipelineSchedule } from './schedules.js';

/**
 * A schedule's step written with its steady phase once: the actions of the same schedule over
 * fewer micro-batches (they run as they are), where actions `[from, to)` (one 1F1B period: a
 * backward, a forward and their sends) stand for `times` periods in a row of the full schedule,
 * each the one before with every micro-batch one on. `micros` is, per action, the micro-batch of
 * the full schedule's action in its place (what its events are labelled with); the period before
 * `from` (`check`) is the unit's own twin, so that the replay can confirm the two log the same.
 */
export interface SteadyActions {
  readonly actions: readonly PipelineAction[];
  readonly micros: readonly number[];
  readonly check: number;
  readonly from: number;
  readonly to: number;
  readonly times: number;
}

const same = (a: PipelineAction, b: PipelineAction, shift: number) => a.kind === b.kind && a.stage === b.stage && a.micro === b.micro + shift;

/**
 * The steady form of a 1F1B rank's step, or null where it saves nothing or is not proved: only
 * 1F1B is tried (GPipe and the interleaved schedule run whole). The unit is the period of
 * backward u = max(2, w) (w: the warm-up's forwards), the last period of the steady loop of the
 * schedule of u + w + 1 micro-batches; it and its twin come after the first backward and after
 * backward w − 2 (whose output the warm-up's send work keeps to the loop's end), so every period
 * counted over starts from the same live set. The full schedule is checked to be that schedule
 * with the unit repeated, action by action. (The schedule of fewer micro-batches than stages,
 * which Schedule1F1B refuses, is the same algorithm's: only the full one is torch's.)
 */
export function steadyActions(full: readonly PipelineAction[], schedule: PipelineSchedule, pp: number, rank: number, m: number): SteadyActions | null {
  if (schedule !== '1f1b') return null;
  const w = Math.min(m, pp - rank);
  const unit = Math.max(2, w);
  const reduced = unit + w + 1;
  if (m <= reduced) return null;
  const actions = oneForwardOneBackward(pp, rank, reduced);
  const backwardOf = (micro: number) => actions.findIndex((a) => a.kind === 'backward' && a.micro === micro);
  const [check, from, to] = [backwardOf(unit - 1), backwardOf(unit), backwardOf(unit + 1)] as [number, number, number];
  const length = to - from;
  const times = m - reduced + 1;
  if (check < 0 || length <= 0 || from - check !== length || full.length !== actions.length + (times - 1) * length) return null;
  for (let k = 0; k < length; k += 1) if (!same(actions[from + k]!, actions[check + k]!, 1)) return null;
  const micros: number[] = [];
  for (let k = 0; k < from; k += 1) {
    if (!same(full[k]!, actions[k]!, 0)) return null;
    micros.push(full[k]!.micro);
  }
  for (let copy = 0; copy < times; copy += 1)
    for (let k = 0; k < length; k += 1) if (!same(full[from + copy * length + k]!, actions[from + k]!, copy)) return null;
  for (let k = from; k < to; k += 1) micros.push(actions[k]!.micro);
  // After the unit: the same actions, on the full schedule's micro-batches (the later ones moved on by times − 1).
  for (let k = to; k < actions.length; k += 1) {
    const a = full[k + (times - 1) * length]!;
    if (!same(a, actions[k]!, 0) && !same(a, actions[k]!, times - 1)) return null;
    micros.push(a.micro);
  }
  return { actions, micros, check, from, to, times };
}

/** An event label of the unit's copy `copy` (its micro-batches `copy` on). */
export function relabelCopy(label: string, copy: number): string {
  return copy === 0 ? label : label.replace(/micro-batch (\d+)/g, (_, n: string) => `micro-batch ${Number(n) + copy}`);
}
