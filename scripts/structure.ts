/**
 * The house's measurements: source files over a line budget, functions over a line budget, import
 * circles among src/ files (runtime ones, and with type-only imports too), and runtime imports that
 * go up the floors of {@link FLOORS}. `npx tsx scripts/structure.ts [--functions N] [--files N]`
 * prints them; test/structure.test.ts holds them to zero and to the budgets.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

export interface LongUnit {
  readonly file: string;
  readonly name: string;
  readonly line: number;
  readonly lines: number;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

function nameOf(node: ts.Node): string {
  const parent = node.parent;
  if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name !== undefined) return node.name.getText();
  if (parent !== undefined && ts.isVariableDeclaration(parent)) return parent.name.getText();
  if (parent !== undefined && ts.isPropertyAssignment(parent)) return parent.name.getText();
  if (parent !== undefined && ts.isCallExpression(parent)) return `${parent.expression.getText().slice(0, 40)}(callback)`;
  return '(anonymous)';
}

/** Every function, method and arrow function of the files with its length in lines. */
export function functionLengths(root: string): LongUnit[] {
  const units: LongUnit[] = [];
  for (const path of sourceFiles(join(root, 'src'))) {
    const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (
        ts.isFunctionDeclaration(node) ||
        ts.isMethodDeclaration(node) ||
        ts.isArrowFunction(node) ||
        ts.isFunctionExpression(node) ||
        ts.isGetAccessor(node)
      ) {
        const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
        const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
        units.push({ file: relative(root, path), name: nameOf(node), line: start + 1, lines: end - start + 1 });
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return units.sort((a, b) => b.lines - a.lines);
}

/** Source files and their line counts, longest first. */
export function fileLengths(root: string): { readonly file: string; readonly lines: number }[] {
  return sourceFiles(join(root, 'src'))
    .map((path) => ({ file: relative(root, path), lines: readFileSync(path, 'utf8').split('\n').length - 1 }))
    .sort((a, b) => b.lines - a.lines);
}

/** The relative imports and re-exports of each src file (as paths from `root`), runtime ones only unless `types` is true. */
function importGraph(root: string, types: boolean): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const path of sourceFiles(join(root, 'src'))) {
    const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
    const targets: string[] = [];
    for (const statement of source.statements) {
      if (!(ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) || statement.moduleSpecifier === undefined) continue;
      const spec = (statement.moduleSpecifier as ts.StringLiteral).text;
      if (!spec.startsWith('.')) continue;
      if (!types && typeOnly(statement)) continue;
      targets.push(relative(root, resolve(dirname(path), spec.replace(/\.js$/, '.ts'))));
    }
    graph.set(relative(root, path), targets);
  }
  return graph;
}

/** `import type …`, `import { type A, type B }` and `export type … from`: gone at run time. */
function typeOnly(statement: ts.ImportDeclaration | ts.ExportDeclaration): boolean {
  if (ts.isExportDeclaration(statement)) return statement.isTypeOnly;
  const clause = statement.importClause;
  if (clause?.isTypeOnly) return true;
  const named = clause?.namedBindings;
  return (
    clause !== undefined &&
    clause.name === undefined &&
    named !== undefined &&
    ts.isNamedImports(named) &&
    named.elements.length > 0 &&
    named.elements.every((e) => e.isTypeOnly)
  );
}

/** The runtime imports (not `import type`, not type-only specifiers) of each src file. */
export function runtimeImports(root: string): Map<string, string[]> {
  return importGraph(root, false);
}

/** Every import of each src file, type-only ones included. */
export function allImports(root: string): Map<string, string[]> {
  return importGraph(root, true);
}

/** Every import circle (as a list of files, each circle once). */
export function importCircles(graph: Map<string, string[]>): string[][] {
  const circles: string[][] = [];
  const seen = new Set<string>();
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const visit = (file: string): void => {
    state.set(file, 1);
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 1) {
        const circle = stack.slice(stack.indexOf(next));
        const key = [...circle].sort().join(' ');
        if (!seen.has(key)) {
          seen.add(key);
          circles.push(circle);
        }
      } else if (state.get(next) === undefined && graph.has(next)) visit(next);
    }
    stack.pop();
    state.set(file, 2);
  };
  for (const file of graph.keys()) if (state.get(file) === undefined) visit(file);
  return circles;
}

/**
 * src/'s floors, lowest first: a file imports at run time only from its own floor or below (types
 * may cross). An entry ending in `/` is a folder. catalog/ sits where its imports put it, on nn/
 * (it builds models from nn/ and ops/ only) and under trace/, so that every floor above it may read
 * a model's built sizes; options.ts (the builders' schemas over sym/tensor/validate) sits under
 * catalog/, which checks its options against it, while estimate-options.ts (estimate's schemas, the
 * plan's among them) sits with estimate.ts. scenarios/ (generation, the KV cache, …) wraps estimate(), trainers/ (Trainer, SFT, GRPO) both, jobs/ (whole RL jobs: a trainer beside a rollout engine) the trainers, with advise-rl.ts (adviseRl: levers over rlJob) beside them, and config/ (other tools' config files read into their options: fromDeepSpeedConfig, fromTrainingArguments, fromAccelerateConfig) over all of them; hub.ts reads
 * safetensors headers with report/; index.ts is the public face over all of them (internals.ts, the
 * second entry, the rest); cli/ uses only index.ts.
 */
export const FLOORS: readonly { readonly floor: string; readonly paths: readonly string[] }[] = [
  { floor: 'base', paths: ['src/errors.ts', 'src/validate.ts', 'src/limits.ts', 'src/freeze.ts'] },
  { floor: 'sym', paths: ['src/sym/'] },
  { floor: 'tensor', paths: ['src/tensor/', 'src/gpus/'] },
  { floor: 'options', paths: ['src/options.ts'] },
  { floor: 'ops', paths: ['src/ops/'] },
  { floor: 'nn', paths: ['src/nn/'] },
  { floor: 'catalog', paths: ['src/catalog/'] },
  { floor: 'trace', paths: ['src/trace/'] },
  { floor: 'memory', paths: ['src/memory/'] },
  { floor: 'parallel', paths: ['src/parallel/'] },
  {
    floor: 'estimate',
    paths: [
      'src/estimate.ts',
      'src/estimate-types.ts',
      'src/estimate-options.ts',
      'src/module-names.ts',
      'src/fit.ts',
      'src/ranks.ts',
      'src/plan.ts',
      'src/advise.ts',
      'src/advise-levers.ts',
    ],
  },
  { floor: 'scenarios', paths: ['src/scenarios/'] },
  { floor: 'rollout', paths: ['src/rollout/'] },
  { floor: 'trainers', paths: ['src/trainers/'] },
  { floor: 'jobs', paths: ['src/jobs/', 'src/advise-rl.ts'] },
  { floor: 'config', paths: ['src/config/'] },
  { floor: 'report', paths: ['src/report/', 'src/hub/'] },
  { floor: 'index', paths: ['src/index.ts', 'src/internals.ts'] },
  { floor: 'cli', paths: ['src/cli/'] },
];

/** The index in {@link FLOORS} of a file (a path from the root, `src/…`), undefined when no floor holds it. */
export function floorOf(file: string): number | undefined {
  const at = FLOORS.findIndex((f) => f.paths.some((p) => (p.endsWith('/') ? file.startsWith(p) : file === p)));
  return at === -1 ? undefined : at;
}

/** Every import of `graph` from a file to a file on a higher floor, as `from -> to (floor -> floor)`. */
export function upwardImports(graph: Map<string, string[]>): string[] {
  const up: string[] = [];
  for (const [file, targets] of graph) {
    const from = floorOf(file);
    for (const target of targets) {
      const to = floorOf(target);
      if (from !== undefined && to !== undefined && to > from) up.push(`${file} -> ${target} (${FLOORS[from]!.floor} -> ${FLOORS[to]!.floor})`);
    }
  }
  return up;
}

const isMain = process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname);
if (isMain) {
  const arg = (flag: string, fallback: number) => {
    const at = process.argv.indexOf(flag);
    return at === -1 ? fallback : Number(process.argv[at + 1]);
  };
  const root = process.cwd();
  const fnLimit = arg('--functions', 80);
  const fileLimit = arg('--files', 500);
  console.log(`functions over ${fnLimit} lines:`);
  for (const u of functionLengths(root).filter((u) => u.lines > fnLimit)) console.log(`  ${String(u.lines).padStart(4)}  ${u.name}  ${u.file}:${u.line}`);
  console.log(`files over ${fileLimit} lines:`);
  for (const f of fileLengths(root).filter((f) => f.lines > fileLimit)) console.log(`  ${String(f.lines).padStart(4)}  ${f.file}`);
  const circles = importCircles(runtimeImports(root));
  console.log(`runtime import circles: ${circles.length}`);
  for (const c of circles) console.log(`  ${c.join(' -> ')}`);
  const typeCircles = importCircles(allImports(root));
  console.log(`import circles, type-only imports included: ${typeCircles.length}`);
  for (const c of typeCircles) console.log(`  ${c.join(' -> ')}`);
  const unplaced = [...runtimeImports(root).keys()].filter((f) => floorOf(f) === undefined);
  console.log(`files on no floor: ${unplaced.length}`);
  for (const f of unplaced) console.log(`  ${f}`);
  const up = upwardImports(runtimeImports(root));
  console.log(`runtime imports up a floor: ${up.length}`);
  for (const u of up) console.log(`  ${u}`);
}
