import { dimArg, isDim } from './args.js';
import type { Atom, Dim, Expr, Term } from './types.js';

const SUPERSCRIPTS = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];

function superscript(power: number): string {
  return power === 1 ? '' : [...String(power)].map((digit) => SUPERSCRIPTS[Number(digit)]).join('');
}

function formatAtom(atom: Atom): string {
  switch (atom.kind) {
    case 'sym':
      return atom.name;
    case 'floorDiv':
      return atom.num.terms.length > 1 ? `⌊(${formatExpr(atom.num)})/${atom.den}⌋` : `⌊${formatExpr(atom.num)}/${atom.den}⌋`;
    case 'max':
      return `max(${atom.args.map(formatDim).join(', ')})`;
  }
}

function formatTerm(term: Term, first: boolean): string {
  const magnitude = Math.abs(term.coef);
  const factors = term.factors.map((f) => `${formatAtom(f.atom)}${superscript(f.power)}`);
  const body = factors.length === 0 ? String(magnitude) : [...(magnitude === 1 ? [] : [String(magnitude)]), ...factors].join('·');
  if (first) return term.coef < 0 ? `-${body}` : body;
  return term.coef < 0 ? ` - ${body}` : ` + ${body}`;
}

/** Readable text of an expression, e.g. `1536·B·H·W + 4096`. */
export function formatExpr(expr: Expr): string {
  return expr.terms.map((term, i) => formatTerm(term, i === 0)).join('');
}

/**
 * Readable text of any dimension: numbers print as they are.
 *
 * @example
 * ```ts
 * import { formatDim, mul, sym } from 'vram-ts';
 * console.log(formatDim(mul(sym('S'), sym('S')))); // "S²"
 * ```
 */
export function formatDim(dim: Dim): string {
  if (!isDim(dim)) dimArg(dim, ['dim']);
  return typeof dim === 'number' ? String(dim) : formatExpr(dim);
}
