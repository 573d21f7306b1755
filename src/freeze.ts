/**
 * Freezes a value and everything it holds, so that an exported table (the GPU catalog, the
 * LLM catalog, the release rules) cannot be changed under every other user of the package.
 */
export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
