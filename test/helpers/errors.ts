/** The VramError a call throws (any other throw, or none, fails the test). */
import { VramError } from '../../src/index.js';

export function errorOf(f: () => unknown): VramError {
  try {
    f();
  } catch (e) {
    if (e instanceof VramError) return e;
    throw e;
  }
  throw new Error('no error');
}
