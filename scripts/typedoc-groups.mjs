// A TypeDoc plugin (local, no dependency): files every export of the API reference under what a
// user does with it, from the folder its declaration lives in, so the index reads by task
// instead of one alphabetical list. An explicit @category tag in a comment wins. There are two
// entry points (`vram-ts`, `vram-ts/internals`), so an export's parent is its entry's module.
import { Comment, CommentTag, Converter, ReflectionKind } from 'typedoc';

const GRAPH_OPS = 'Op rules (for graph())';

/** First matching rule wins: a path fragment under src/ → the category. */
const RULES = [
  [/\/src\/(estimate|estimate-types|fit|plan|ranks|freeze)\.ts$/, 'Estimate and fit'],
  [/\/src\/parallel\//, 'Many GPUs'],
  [/\/src\/memory\/residency\//, 'Many GPUs'],
  [/\/src\/catalog\/tensor-parallel\.ts$/, 'Many GPUs'],
  [/\/src\/scenarios\//, 'LLM inference and RL'],
  [/\/src\/catalog\/(llama|gpt2|hf|lm-loss|moe|experts|deepseek|config-reader|transformers)\.ts$/, 'LLM catalog'],
  [/\/src\/catalog\/llms\//, 'LLM catalog'],
  [/\/src\/hub\//, 'LLM catalog'],
  [/\/src\/catalog\//, 'Vision catalog'],
  [/\/src\/nn\//, 'Build a model'],
  [/\/src\/ops\//, GRAPH_OPS],
  [/\/src\/report\//, 'Reports and charts'],
  [/\/src\/gpus\//, 'GPUs'],
  [/\/src\/(sym|tensor)\//, 'Symbols and tensors'],
  [/\/src\/(memory|trace)\//, 'Simulation internals'],
  [/\/src\/(errors|validate|limits|options)\.ts$/, 'Errors and limits'],
];

/** @param {import('typedoc').Application} app */
export function load(app) {
  app.converter.on(Converter.EVENT_CREATE_DECLARATION, (context, reflection) => {
    if (reflection.parent?.kind !== ReflectionKind.Module || reflection.parent.parent?.kind !== ReflectionKind.Project) return;
    if (reflection.comment?.getTag('@category') !== undefined) return;
    const symbol = context.getSymbolFromReflection(reflection);
    const file = symbol?.declarations?.[0]?.getSourceFile().fileName ?? '';
    const rule = RULES.find(([pattern]) => pattern.test(file));
    if (rule === undefined) return;
    // The internals' op rules are the ones graph() does not need.
    const category = rule[1] === GRAPH_OPS && reflection.parent.name.endsWith('/internals') ? 'Op rules' : rule[1];
    reflection.comment ??= new Comment();
    reflection.comment.blockTags.push(new CommentTag('@category', [{ kind: 'text', text: category }]));
  });
}
