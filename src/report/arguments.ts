import type { VramIssue } from '../errors.js';
import { show, type Check, type Path } from '../validate.js';

/** Checks of the data the reports take besides an estimate (explain's terms, a chart's timeline). */

function issue(path: Path, message: string, expected: string, value: unknown): VramIssue {
  return { path, code: 'bad-argument', message, expected, received: show(value) };
}

/**
 * A list of at most `max` elements, without holes, each passing `element`; only the first
 * `report` bad elements are reported (a long timeline gives one issue, not thousands). The
 * length is checked before any element is read: a sparse array of 2^32 - 1 answers at once.
 */
export function listOf(element: Check, max: number, report = 1): Check {
  return (value, path, issues) => {
    if (!Array.isArray(value)) return void issues.push(issue(path, 'must be a list', 'array', value));
    if (value.length > max) return void issues.push(issue(path, `must have at most ${max} elements`, `0 – ${max} elements`, value));
    let bad = 0;
    for (let i = 0; i < value.length && bad < report; i += 1) {
      const before = issues.length;
      if (!Object.hasOwn(value, i)) issues.push(issue([...path, i], 'is missing (a hole in the list)', 'an element', undefined));
      else element(value[i], [...path, i], issues);
      if (issues.length > before) bad += 1;
    }
  };
}

/** An object whose listed fields pass their checks (other keys are not read, so not refused). */
export function record(fields: Readonly<Record<string, Check>>): Check {
  const entries = Object.entries(fields);
  return (value, path, issues) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return void issues.push(issue(path, 'must be an object', 'object', value));
    for (const [key, check] of entries) check(Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined, [...path, key], issues);
  };
}
