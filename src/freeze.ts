/**
 * Freezes a value and everything it holds, so that an exported table (the GPU catalog, the
 * LLM catalog, the release rules) cannot be changed under every other user of the package.
 * Marked free of side effects for bundlers: it only freezes the value it returns, so a table no
 * code reads can be left out of a bundle.
 */
/* @__NO_SIDE_EFFECTS__ */
export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
