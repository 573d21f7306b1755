/**
 * The engine registry (src/parallel/engines/index.ts): an engine's name is written once, in its
 * record. Outside src/parallel/engines/ no source file spells an engine's name as a string
 * literal (comments and TSDoc examples may); everything else reads ENGINES.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { estimate, linear, relu, seq } from '../../src/index.js';
import { ENGINE_NAMES, ENGINES, PLANNED_ENGINES } from '../../src/parallel/engines/index.js';
import { errorOf } from '../helpers/errors.js';

const ROOT = join(import.meta.dirname, '..', '..');

/**
 * The command's own syntax names engines as a user of the library does: `--fsdp` is
 * `--engine fsdp2`, `--zero N` implies DeepSpeed, `--distributed-optimizer` is Megatron's, and
 * `compat` sets each published formula beside the engine it describes. Its lists (the
 * `--engine` values, help texts) come from ENGINE_NAMES: src/cli/flags.ts names none.
 */
const PENDING = ['src/cli/'];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** String literals (quoted, or a template's pieces) of a TypeScript source that name an engine, with their lines. */
function namedLiterals(text: string, names: readonly string[]): { readonly name: string; readonly line: number }[] {
  const source = ts.createSourceFile('scan.ts', text, ts.ScriptTarget.Latest, true);
  const found: { name: string; line: number }[] = [];
  const visit = (node: ts.Node): void => {
    if (
      ts.isStringLiteral(node) ||
      ts.isNoSubstitutionTemplateLiteral(node) ||
      ts.isTemplateHead(node) ||
      ts.isTemplateMiddle(node) ||
      ts.isTemplateTail(node)
    ) {
      // TrainingArguments' `deepspeed` field, spelled like the engine, is named once (src/trainers/post-init.ts).
      const trainerField = ts.isVariableDeclaration(node.parent) && node.parent.name.getText(source) === 'TRAINER_DEEPSPEED_FIELD';
      // A name as the literal itself, or quoted inside a message ("use engine 'fsdp2'").
      for (const name of trainerField ? [] : names)
        if (node.text === name || node.text.includes(`'${name}'`))
          found.push({ name, line: source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('the engine registry', () => {
  it('finds a name written as a literal, and not one in a comment', () => {
    expect(namedLiterals("const e = 'ddp';\n// 'fsdp2'\nconst m = `use ${e} or 'megatron'`;", ENGINE_NAMES).map((hit) => [hit.name, hit.line])).toEqual([
      ['ddp', 1],
      ['megatron', 3],
    ]);
  });

  it('no source file outside src/parallel/engines/ writes an engine name as a string literal', () => {
    const hits = sourceFiles(join(ROOT, 'src'))
      .map((path) => relative(ROOT, path).split('\\').join('/'))
      .filter((file) => !file.startsWith('src/parallel/engines/') && !PENDING.some((folder) => file.startsWith(folder)))
      .flatMap((file) => namedLiterals(readFileSync(join(ROOT, file), 'utf8'), ENGINE_NAMES).map((hit) => `${file}:${hit.line} '${hit.name}'`));
    expect(hits).toEqual([]);
  });

  it("the command's flag table takes its engine list from the registry", () => {
    expect(namedLiterals(readFileSync(join(ROOT, 'src/cli/flags.ts'), 'utf8'), ENGINE_NAMES)).toEqual([]);
  });

  it('lists five engines, each once, and every message and schema lists them all', () => {
    expect(ENGINE_NAMES).toHaveLength(5);
    expect(new Set(ENGINE_NAMES).size).toBe(ENGINES.length);
    const mlp = seq(linear({ out: 4 }), relu(), linear({ out: 2 }));
    const expected = errorOf(() => estimate(mlp, { input: [2, 8], parallel: { dp: 2 } })).issues[0]!.expected ?? '';
    for (const name of ENGINE_NAMES) expect(expected).toContain(`'${name}'`);
    const unknown = errorOf(() => estimate(mlp, { input: [2, 8], parallel: { engine: 'horovod' as never, dp: 2 } })).issues[0]!;
    expect(unknown.path).toEqual(['parallel', 'engine']);
    for (const name of ENGINE_NAMES) expect(unknown.expected).toContain(name);
  });

  it("plan's default search is the records' planned engines, in their order", () => {
    expect(PLANNED_ENGINES).toEqual(['fsdp2', 'zero-redundancy', 'ddp', 'deepspeed']);
  });
});
