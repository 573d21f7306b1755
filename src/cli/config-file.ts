/**
 * A trainer's config file (`--config grpo_config.yaml`, `--peft-config lora.json`): JSON, or the
 * YAML such files hold — one mapping of scalars (quoted or bare strings, integers, floats with
 * exponents, true/false, null/~), flow lists `[a, b]`, block lists (`- a`, or `- k: v` items of
 * scalars under a top-level key), one nested mapping
 * level (`gradient_checkpointing_kwargs: {use_reentrant: false}` or on indented lines),
 * comments and blank lines; a value may stand on the lines under its key (plain lines folded with
 * spaces). Anything else YAML can say (anchors, aliases, tags, several documents, block scalars
 * `|` and `>`, deeper nesting) and every bare word that YAML 1.1 (PyYAML)
 * and YAML 1.2 read differently (`yes`, `on`, `0x1F`, `012`, `1_000`, `.inf`, dates) is an error
 * naming the line, never a guess.
 */
import { readTextFile } from './text-file.js';
import { numberOf } from './args.js';
import { usage } from './errors.js';

/** A line that holds something: its number (1-based), indentation and text without the comment. */
interface Line {
  readonly n: number;
  readonly indent: number;
  readonly text: string;
}

/** A YAML error on one line: `file:line: message`. */
function fail(file: string, n: number, message: string): never {
  return usage(`${file}:${n}`, message);
}

/** Whether a scalar starts after `before` (a quote there opens a quoted string; elsewhere it is part of a plain one). */
function startsScalar(before: string, inFlow: boolean): boolean {
  return /^\s*(?:-\s+)*$/.test(before) || /:\s+$/.test(before) || (inFlow && /[[{,]\s*$/.test(before));
}

/** The line without its comment (a `#` at the start or after a space, outside quoted strings), right-trimmed. */
export function stripComment(line: string): string {
  let quote: string | undefined;
  let flow = 0;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if ((quote === '"' && c === '\\') || (quote === "'" && c === "'" && line[i + 1] === "'")) i++;
    else if (quote !== undefined) quote = c === quote ? undefined : quote;
    else if (c === '"' || c === "'") quote = startsScalar(line.slice(0, i), flow > 0) ? c : undefined;
    else if ((c === '[' || c === '{') && (flow > 0 || startsScalar(line.slice(0, i), false))) flow++;
    else if ((c === ']' || c === '}') && flow > 0) flow--;
    else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]!))) return line.slice(0, i).trimEnd();
  }
  return line.trimEnd();
}

/** The lines that hold something; tabs in indentation, directives and document markers are errors. */
function linesOf(text: string, file: string): Line[] {
  const out: Line[] = [];
  const raw = (text.startsWith('\uFEFF') ? text.slice(1) : text).split(/\r?\n/);
  raw.forEach((whole, i) => {
    const n = i + 1;
    const line = stripComment(whole);
    if (line.trim() === '') return;
    if (/^[ ]*\t/.test(line)) fail(file, n, 'a tab in the indentation (YAML indents with spaces)');
    if (/^(?:---|\.\.\.)(?:\s|$)/.test(line)) fail(file, n, 'document markers (---, ...) are not read: one mapping per file');
    if (line.startsWith('%')) fail(file, n, 'YAML directives (%YAML, %TAG) are not read');
    const indent = line.length - line.trimStart().length;
    out.push({ n, indent, text: line.trim() });
  });
  return out;
}

/** Bare words YAML 1.1 and 1.2 read differently (or as something a config field never holds). */
const AMBIGUOUS: readonly [RegExp, string][] = [
  [/^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$/, 'a boolean in YAML 1.1 and a string in YAML 1.2'],
  [/^[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)$/, 'infinity or NaN'],
  [/^[-+]?0[xXoObB]/, 'a hexadecimal, octal or binary number in one YAML and a string in another'],
  [/^[-+]?0[0-9]+$/, 'an octal number in YAML 1.1'],
  [/^(?=[^_]*_)[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?$/, 'a number with underscores in YAML 1.1'],
  [/^\+[0-9.]/, 'a signed number'],
  [/^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt\s]|$)/, 'a timestamp in YAML 1.1'],
  [/^[-+]?[0-9]+(?::[0-5]?[0-9])+(?:\.[0-9]*)?$/, 'a base-60 number in YAML 1.1'],
  [/^[-+]?(?:[0-9]+\.|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$/, 'a float without digits on one side of the point'],
  [/^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$/, 'a number past the largest double'],
];

/** Indicators a bare value may not start with, and what YAML would make of them. */
const INDICATORS: Readonly<Record<string, string>> = {
  '&': 'anchors (&) are not read',
  '*': 'aliases (*) are not read',
  '!': 'tags (!) are not read',
  '|': 'multi-line strings (|) are not read: write the string on one line, quoted',
  '>': 'multi-line strings (>) are not read: write the string on one line, quoted',
  '@': 'a value starting with @ is reserved in YAML: quote it',
  '`': 'a value starting with ` is reserved in YAML: quote it',
  '%': 'a value starting with % must be quoted',
  '?': 'complex keys (?) are not read',
  ',': 'a value starting with , must be quoted',
  ']': 'an unmatched ]',
  '}': 'an unmatched }',
};

/** A double-quoted string's escapes (those JSON writes, and YAML's \0 and \/). */
const ESCAPES: Readonly<Record<string, string>> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', '0': '\0' };

/** A quoted scalar filling all of `text`. */
function quoted(text: string, file: string, n: number): string {
  const q = text[0]!;
  let out = '';
  for (let i = 1; i < text.length; i++) {
    const c = text[i]!;
    if (q === "'" && c === "'" && text[i + 1] === "'") {
      out += "'";
      i++;
    } else if (c === q) {
      if (i !== text.length - 1) fail(file, n, `text after the closing ${q}`);
      return out;
    } else if (q === '"' && c === '\\') {
      const e = text[++i] ?? '';
      const hex = e === 'u' ? /^[0-9a-fA-F]{4}/.exec(text.slice(i + 1))?.[0] : undefined;
      if (hex !== undefined) {
        out += String.fromCharCode(Number.parseInt(hex, 16));
        i += 4;
      } else if (ESCAPES[e] !== undefined) out += ESCAPES[e];
      else fail(file, n, `unknown escape \\${e} in a double-quoted string`);
    } else out += c;
  }
  return fail(file, n, `the ${q} string does not end on this line (multi-line strings are not read)`);
}

/** One scalar: a quoted or bare string, a number, a boolean or null. */
export function scalar(text: string, file: string, n: number): string | number | boolean | null {
  if (text.startsWith('"') || text.startsWith("'")) return quoted(text, file, n);
  const indicator = INDICATORS[text[0] ?? ''];
  if (indicator !== undefined) fail(file, n, indicator);
  if (/^(?:null|Null|NULL|~)$/.test(text) || text === '') return null;
  if (/^(?:true|True|TRUE)$/.test(text)) return true;
  if (/^(?:false|False|FALSE)$/.test(text)) return false;
  const number = numberOf(text);
  if (number !== undefined) return number;
  const ambiguous = AMBIGUOUS.find(([re]) => re.test(text));
  if (ambiguous !== undefined) fail(file, n, `${JSON.stringify(text)} is ${ambiguous[1]}: quote it for a string, or write the value plainly`);
  if (/:(?:\s|$)/.test(text)) fail(file, n, 'a mapping inside a value: put it on its own lines, or quote the string');
  if (text.startsWith('- ') || text === '-') fail(file, n, 'a list item where a value was expected');
  if (/[[\]{}]/.test(text)) fail(file, n, 'brackets inside a bare value: quote it');
  return text;
}

/** The comma-separated items of a flow collection's inside (quotes respected); empty items are errors. */
function flowItems(inner: string, file: string, n: number): string[] {
  const items: string[] = [];
  let start = 0;
  let quote: string | undefined;
  for (let i = 0; i <= inner.length; i++) {
    const c = inner[i];
    if (quote === '"' && c === '\\') i++;
    else if (quote !== undefined && c === quote) quote = undefined;
    else if (quote === undefined && (c === '"' || c === "'") && inner.slice(start, i).trim() === '') quote = c;
    else if (quote === undefined && (c === ',' || c === undefined)) {
      const item = inner.slice(start, i).trim();
      if (item === '' && !(c === undefined && items.length === 0)) fail(file, n, 'an empty item in a flow collection');
      if (item !== '') items.push(item);
      start = i + 1;
    } else if (quote === undefined && c !== undefined && /[[\]{}]/.test(c)) fail(file, n, 'a flow collection inside a flow collection is not read');
  }
  return items;
}

/** `[a, b]` or `{k: v}` filling all of `text`, or a scalar; `nested` allows the flow mapping (one level). */
function value(text: string, file: string, n: number, nested: boolean): unknown {
  const open = text[0];
  if (open !== '[' && open !== '{') return scalar(text, file, n);
  const close = open === '[' ? ']' : '}';
  if (!text.endsWith(close)) fail(file, n, `the ${open} does not close on this line (multi-line flow collections are not read)`);
  const items = flowItems(text.slice(1, -1), file, n);
  if (open === '[') return items.map((item) => scalar(item, file, n));
  if (!nested) fail(file, n, 'a mapping nested deeper than one level is not read');
  return mapping(
    items.map((item) => entryOf(item, file, n)).map(([key, rest]) => [key, scalar(rest, file, n)] as const),
    file,
    n,
  );
}

/** A quoted key and its colon. */
const QUOTED_KEY = /^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*')\s*:(?:\s+|$)/;
/** A bare key and its colon. */
const BARE_KEY = /^([^\s:#'"&*!|>[\]{},?%@`-][^:]*?|-[^\s:][^:]*?)\s*:(?:\s+|$)/;

/** Whether a line is a `key: value` entry (or a complex key), not a scalar. */
const isEntry = (text: string) => text.startsWith('? ') || QUOTED_KEY.test(text) || BARE_KEY.test(text);

/** `key: rest` (a bare or quoted key); `rest` may be empty. */
function entryOf(text: string, file: string, n: number): [string, string] {
  if (text.startsWith('? ')) fail(file, n, 'complex keys (?) are not read');
  if (text.startsWith('- ') || text === '-') fail(file, n, 'a list item where a key was expected');
  const q = QUOTED_KEY.exec(text);
  if (q !== null) return [quoted(q[1]!, file, n), text.slice(q[0].length).trim()];
  const bare = BARE_KEY.exec(text);
  if (bare === null) return fail(file, n, 'expected `key: value`');
  return [bare[1]!, text.slice(bare[0].length).trim()];
}

/** A mapping from its entries; a repeated key is an error. */
function mapping(entries: readonly (readonly [string, unknown])[], file: string, n: number | ((i: number) => number)): Record<string, unknown> {
  const seen = new Set<string>();
  entries.forEach(([key], i) => {
    if (seen.has(key)) fail(file, typeof n === 'number' ? n : n(i), `the key ${JSON.stringify(key)} appears twice`);
    seen.add(key);
  });
  return Object.fromEntries(entries);
}

/** The block under `key:` (lines[from] onwards, deeper than `parent`, or `- ` items at its level): a list, a mapping or null. */
function block(lines: readonly Line[], from: number, parent: number, nested: boolean, file: string): { value: unknown; next: number } {
  const first = lines[from];
  const isItem = (l: Line | undefined) => l !== undefined && (l.text === '-' || l.text.startsWith('- '));
  if (first === undefined || first.indent < parent || (first.indent === parent && !isItem(first))) return { value: null, next: from };
  if (!isItem(first) && !isEntry(first.text)) return scalarBlock(lines, from, parent, nested, file);
  let next = from;
  const body: Line[] = [];
  const items: unknown[] = [];
  while (next < lines.length && lines[next]!.indent === first.indent && (isItem(first) ? isItem(lines[next]) : !isItem(lines[next]))) {
    const line = lines[next++]!;
    if (!isItem(first)) {
      body.push(line);
      continue;
    }
    // An item's own lines: those deeper than its dash (a mapping's further keys).
    const more: Line[] = [];
    while (next < lines.length && lines[next]!.indent > first.indent) more.push(lines[next++]!);
    items.push(listItem(line, more, nested, file));
  }
  const result = isItem(first) ? items : nestedMapping(body, nested, file);
  const after = lines[next];
  if (after !== undefined && after.indent > parent) fail(file, after.n, 'unexpected indentation');
  return { value: result, next };
}

/**
 * A scalar on the lines under its key (`key:\n  value`, as TRL's example config writes every
 * value): a plain one's lines folded with spaces, as YAML folds them; a quoted string or a flow
 * collection on one line. A continuation that is a key or a list item is an error (YAML's too).
 */
function scalarBlock(lines: readonly Line[], from: number, parent: number, nested: boolean, file: string): { value: unknown; next: number } {
  const first = lines[from]!;
  let next = from + 1;
  while (next < lines.length && lines[next]!.indent > parent) {
    const line = lines[next]!;
    if (isEntry(line.text) || line.text === '-' || line.text.startsWith('- ')) fail(file, line.n, 'a key or list item inside a plain scalar');
    if (/^["'[{]/.test(first.text)) fail(file, line.n, 'a quoted or flow value over several lines is not read');
    next++;
  }
  const text = lines
    .slice(from, next)
    .map((l) => l.text)
    .join(' ');
  return { value: value(text, file, first.n, nested), next };
}

/** The entries of a nested mapping's lines: each `key: value` on one line. */
function nestedMapping(body: readonly Line[], nested: boolean, file: string): Record<string, unknown> {
  if (!nested) fail(file, body[0]!.n, 'a mapping nested deeper than one level is not read');
  const entries = body.map((l) => {
    const [key, rest] = entryOf(l.text, file, l.n);
    if (rest === '') fail(file, l.n, `${key}: a mapping nested deeper than one level is not read (write a value)`);
    return [key, value(rest, file, l.n, false)] as const;
  });
  return mapping(entries, file, (i) => body[i]!.n);
}

/**
 * A block list's item: a scalar, or (in a top-level key's list: TRL's dataset mixtures) a mapping of
 * scalars, its first key after the dash and the others on the lines below, aligned with it.
 */
function listItem(line: Line, more: readonly Line[], nested: boolean, file: string): unknown {
  const text = line.text.slice(1).trim();
  if (!isEntry(text)) {
    if (more.length > 0) fail(file, more[0]!.n, 'unexpected indentation');
    return scalarItem(line, file);
  }
  if (!nested) fail(file, line.n, 'a mapping inside a nested list is not read');
  const column = line.indent + line.text.length - text.length;
  for (const l of more) if (l.indent !== column) fail(file, l.n, 'unexpected indentation');
  return nestedMapping([{ n: line.n, indent: column, text }, ...more], true, file);
}

/** A block list's item: one scalar. */
function scalarItem(line: Line, file: string): unknown {
  const text = line.text.slice(1).trim();
  if (text.startsWith('{') || /^[^'"]*?:(?:\s|$)/.test(text)) fail(file, line.n, 'a mapping inside a list is not read');
  if (text.startsWith('[') || text === '-' || text.startsWith('- ')) fail(file, line.n, 'a list inside a list is not read');
  return scalar(text, file, line.n);
}

/**
 * A YAML config file's text as one flat mapping (with one level of nested mappings); every
 * construct outside that is an error naming `file:line`.
 */
export function parseYaml(text: string, file: string): Record<string, unknown> {
  const lines = linesOf(text, file);
  const entries: (readonly [string, unknown])[] = [];
  const numbers: number[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.indent !== 0) fail(file, line.n, 'unexpected indentation');
    const [key, rest] = entryOf(line.text, file, line.n);
    numbers.push(line.n);
    if (rest !== '') {
      entries.push([key, value(rest, file, line.n, true)]);
      i++;
      continue;
    }
    const { value: v, next } = block(lines, i + 1, 0, true, file);
    entries.push([key, v]);
    i = next;
  }
  return mapping(entries, file, (k) => numbers[k]!);
}

/** A config file's mapping: JSON (`.json`) or YAML (`.yaml`, `.yml`); errors name the file (and the line). */
export function readConfigFile(path: string): Record<string, unknown> {
  if (!/\.(?:json|ya?ml)$/i.test(path)) usage(path, 'a config file is .json, .yaml or .yml');
  const text = readTextFile(path, 'a config file');
  if (!/\.json$/i.test(path)) return parseYaml(text, path);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
  } catch (error) {
    return usage(path, 'is not valid JSON', { received: error instanceof Error ? error.message : undefined });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    usage(path, 'a config file holds one mapping of fields', {
      received: Array.isArray(parsed) ? 'an array' : parsed === null ? 'null' : `a ${typeof parsed}`,
    });
  return parsed as Record<string, unknown>;
}
