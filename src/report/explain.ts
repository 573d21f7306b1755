import { estimateResult } from '../estimate.js';
import type { Estimate } from '../estimate-types.js';
import { CATEGORIES } from '../memory/ledger.js';
import { savedStorages } from '../memory/saved.js';
import type { Dim } from '../sym/expr.js';
import { formatDim } from '../sym/format.js';
import { add } from '../sym/ops.js';
import { DTYPE_BITS } from '../tensor/dtype.js';
import { size } from '../tensor/size.js';
import type { IR } from '../trace/ir.js';
import { anything, integer, string, validate, type Check } from '../validate.js';
import { listOf, record } from './arguments.js';
import { pyThousands } from './pyformat.js';
import { formatBytes, formatCount } from './units.js';

/** One figure and how it was computed, with its parts. */
export interface ExplainTerm {
  readonly figure: string;
  readonly bytes: Dim;
  readonly derivation: string;
  readonly parts: readonly ExplainTerm[];
}

const shapeText = (shape: readonly Dim[]) => `[${shape.map(formatDim).join(', ')}]`;

function elementBytes(dtype: keyof typeof DTYPE_BITS): string {
  const bits = DTYPE_BITS[dtype];
  return bits >= 8 ? `${bits / 8} B` : `${bits} bits`;
}

/** Which tensor of an op a saved id is, in words. */
function savedRole(ir: IR, opIndex: number, id: number): string {
  const op = ir.ops[opIndex]!;
  const t = ir.tensors[id]!;
  if (t.role === 'extra') return t.label ?? 'a tensor it makes';
  if (t.role === 'buffer') return `buffer ${t.key}`;
  if (t.role === 'input') return 'the model input';
  const input = op.inputs.indexOf(id);
  if (input >= 0) return op.inputs.length === 1 ? 'its input' : `input ${input}`;
  if (op.outputs.includes(id)) return 'its output';
  return 'a tensor of an earlier op';
}

/**
 * How every figure of an estimate was computed: parameters, gradients and optimizer state
 * from the parameter tensors; saved activations storage by storage, each with the op that
 * keeps it and why; the peak as the sum of what is live at its moment. Anything but a result of
 * estimate() (a copy too) is a VramError.
 *
 * @example
 * ```ts
 * import { estimate, explain, mobilenetV3Small } from 'vram-ts';
 * const terms = explain(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] }));
 * console.log(terms.map((t) => t.figure).join(', ')); // parameters, gradients, optimizer state, saved activations, peak
 * ```
 */
export function explain(result: Estimate): ExplainTerm[] {
  validate(result, estimateResult, ['explain', 'result']);
  const { ir, bytes } = result;
  const params = ir.tensors.filter((t) => t.role === 'param');
  const paramParts: ExplainTerm[] = params.map((t) => ({
    figure: t.key ?? `tensor ${t.id}`,
    bytes: ir.storages[t.storage]!.bytes,
    derivation: `${shapeText(t.spec.shape)} ${t.spec.dtype} × ${elementBytes(t.spec.dtype)}${ir.storages[t.storage]!.trainable ? '' : ' (frozen)'}`,
    parts: [],
  }));
  const terms: ExplainTerm[] = [
    {
      figure: 'parameters',
      bytes: bytes.parameters,
      derivation: `${params.length} parameter tensors (tied or shared weights once), ${pyThousands(result.params.total)} elements`,
      parts: paramParts,
    },
  ];
  if (ir.settings.gradEnabled) {
    terms.push({
      figure: 'gradients',
      bytes: bytes.gradients,
      derivation: `one gradient per trainable parameter, same shape and dtype: ${pyThousands(result.params.trainable)} elements (AccumulateGrad keeps them after backward)`,
      parts: paramParts.filter((p) => !p.derivation.endsWith('(frozen)')),
    });
    terms.push({
      figure: 'optimizer state',
      bytes: bytes.optimizer,
      derivation:
        result.optimizer === null
          ? 'no optimizer simulated'
          : `${result.optimizer.name} (${result.optimizer.impl ?? 'for-loop'}): its state tensors for each trainable parameter, allocated at the first step and kept (paramUpdate gives the rule)`,
      parts: [],
    });
  }
  const saved = savedStorages(ir);
  const savedParts: ExplainTerm[] = [];
  for (const [storage, opIndex] of saved.firstSaver) {
    const op = ir.ops[opIndex]!;
    const tensorId =
      [...op.saved, ...(ir.regions.find((r) => r.firstOp === opIndex)?.inputs ?? [])].find((id) => ir.tensors[id]!.storage === storage) ?? op.inputs[0]!;
    const t = ir.tensors[tensorId]!;
    const where = ir.modules[op.module]!.path.join('.') || '(root)';
    savedParts.push({
      figure: `${where} ${op.op}`,
      bytes: ir.storages[storage]!.bytes,
      derivation: `keeps ${savedRole(ir, opIndex, tensorId)} ${shapeText(t.spec.shape)} ${t.spec.dtype}${op.region !== null ? ' (checkpoint input)' : ''}`,
      parts: [],
    });
  }
  terms.push({
    figure: 'saved activations',
    bytes: bytes.activations,
    derivation: `${saved.firstSaver.size} distinct storages autograd holds after the forward (parameters excluded; each storage once, whichever ops save it)`,
    parts: savedParts,
  });
  const at = result.peak;
  const live = CATEGORIES.filter((c) => at.byCategory[c] !== 0);
  terms.push({
    figure: 'peak',
    bytes: at.bytes,
    derivation: `${at.step === 'inference' ? 'inference forward' : `${at.step} training step`}, at ${at.phase}: ${at.label}; ${live.map((c) => `${c} ${formatBytes(at.byCategory[c])}`).join(' + ')}`,
    parts: live.map((c) => ({ figure: c, bytes: at.byCategory[c], derivation: 'live at that moment', parts: [] })),
  });
  return terms;
}

/** The most terms, and parts of a term, formatExplain takes (explain gives one part per parameter or saved storage). */
const MAX_TERMS = 10_000_000;

/** A term as formatExplain reads it: its figure, bytes and derivation, and its parts (whose own parts it does not read). */
const termOf = (parts: Check): Check => record({ figure: string, bytes: size, derivation: string, parts });

/** explain()'s output, checked for what formatExplain reads (terms filtered or made by hand pass too). */
const explainTerms = listOf(termOf(listOf(termOf(anything), MAX_TERMS)), MAX_TERMS);
const TERMS = ['formatExplain', 'terms'];
const LIMIT = ['formatExplain', 'limit'];

/**
 * The explanation as indented text; `limit` (an integer >= 0) caps the parts listed under each
 * figure (largest first). The terms are checked for what it reads: a VramError at the first
 * that is not a term as explain() makes them.
 *
 * @example
 * ```ts
 * import { estimate, explain, formatExplain, mobilenetV3Small } from 'vram-ts';
 * const text = formatExplain(explain(estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 224, 224] })), 3);
 * console.log(text.startsWith('parameters')); // true
 * ```
 */
export function formatExplain(terms: readonly ExplainTerm[], limit = 10): string {
  validate(terms, explainTerms, TERMS);
  validate(limit, integer(0), LIMIT);
  const lines: string[] = [];
  const size = (d: Dim) => (typeof d === 'number' ? d : Number.MAX_SAFE_INTEGER);
  for (const term of terms) {
    lines.push(`${term.figure}: ${formatCount(term.bytes)} B (${formatBytes(term.bytes)}) — ${term.derivation}`);
    const parts = [...term.parts].sort((a, b) => size(b.bytes) - size(a.bytes));
    for (const part of parts.slice(0, limit)) lines.push(`  ${part.figure}: ${formatCount(part.bytes)} B — ${part.derivation}`);
    if (parts.length > limit) {
      const rest = parts.slice(limit).reduce<Dim>((a, p) => add(a, p.bytes), 0);
      lines.push(`  … ${parts.length - limit} more: ${formatCount(rest)} B`);
    }
  }
  return `${lines.join('\n')}\n`;
}
