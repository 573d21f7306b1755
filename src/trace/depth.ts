import { fail } from '../errors.js';
import { LIMITS } from '../limits.js';
import { layerProblem } from '../nn/layer-check.js';
import type { Layer } from '../nn/types.js';
import { show, type Path } from '../validate.js';

/** Models already checked: a model is immutable data, so it is checked once. */
const checkedDepth = new WeakSet<object>();

/**
 * Checks every layer that can be walked without tracing: each node a layer as the builders make
 * it (a VramError with its path in the model otherwise), and the nesting refused past LIMITS.depth.
 */
export function checkDepth(model: Layer, at: () => Path = () => ['model']): void {
  if (typeof model === 'object' && model !== null && checkedDepth.has(model)) return;
  checkDepthOnce(model, at());
  checkedDepth.add(model);
}

function checkDepthOnce(model: Layer, at: Path): void {
  const stack: [Layer, number, Path][] = [[model, 1, at]];
  while (stack.length > 0) {
    const [layer, depth, path] = stack.pop()!;
    if (depth > LIMITS.depth)
      fail('too-deep', 'the model nests too deeply', { path: ['model'], expected: `at most ${LIMITS.depth} levels`, received: `more than ${LIMITS.depth}` });
    const problem = layerProblem(layer);
    if (problem !== undefined) fail('bad-layer', problem, { path, expected: 'a layer: op | seq | module | residual | branch | graph', received: show(layer) });
    const push = (child: Layer, key: string | number, more?: number): void => {
      stack.push([child, depth + 1, more === undefined ? [...path, key] : [...path, key, more]]);
    };
    if (layer.kind === 'seq') for (const [i, child] of layer.children.entries()) push(child, 'children', i);
    else if (layer.kind === 'module') push(layer.body, 'body');
    else if (layer.kind === 'residual') {
      push(layer.body, 'body');
      if (layer.shortcut !== undefined) push(layer.shortcut, 'shortcut');
      if (layer.downsample !== undefined) push(layer.downsample, 'downsample');
    } else if (layer.kind === 'branch') for (const [i, p] of layer.paths.entries()) push(p, 'paths', i);
  }
}
