import { fail } from '../errors.js';
import { LIMITS } from '../limits.js';
import type { Layer } from '../nn/types.js';

/** Models already checked: a model is immutable data, so its depth is checked once. */
const checkedDepth = new WeakSet<Layer>();

/** The nesting depth of the layers that can be walked without tracing, refused past LIMITS.depth. */
export function checkDepth(model: Layer): void {
  if (checkedDepth.has(model)) return;
  checkDepthOnce(model);
  checkedDepth.add(model);
}

function checkDepthOnce(model: Layer): void {
  const stack: [Layer, number][] = [[model, 1]];
  while (stack.length > 0) {
    const [layer, depth] = stack.pop()!;
    if (depth > LIMITS.depth)
      fail('too-deep', 'the model nests too deeply', { path: ['model'], expected: `at most ${LIMITS.depth} levels`, received: `more than ${LIMITS.depth}` });
    if (typeof layer !== 'object' || layer === null) continue;
    if (layer.kind === 'seq') for (const child of layer.children) stack.push([child, depth + 1]);
    else if (layer.kind === 'module') stack.push([layer.body, depth + 1]);
    else if (layer.kind === 'residual') {
      stack.push([layer.body, depth + 1]);
      if (layer.shortcut !== undefined) stack.push([layer.shortcut, depth + 1]);
      if (layer.downsample !== undefined) stack.push([layer.downsample, depth + 1]);
    } else if (layer.kind === 'branch') for (const path of layer.paths) stack.push([path, depth + 1]);
  }
}
