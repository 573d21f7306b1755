import { fail } from '../errors.js';
import { mul, product } from '../sym/ops.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { boolean, integer, show, string, type Check } from '../validate.js';
import { concreteDim, expectRank } from './check.js';
import { quantizedWeight, quantScheme, type QuantScheme } from './quant.js';
import { attrsGuard, type AttrSchema } from './attrs.js';
import type { OpRule, OwnedTensor, SavedRef } from './types.js';

/** Attributes of torch.nn.Linear. */
export interface LinearAttrs {
  readonly out: number;
  readonly bias?: boolean;
  /** Expected input features; inferred when omitted. */
  readonly in?: number;
  /** Use an already traced parameter as the weight (tied embeddings), by its key. */
  readonly tiedWeight?: string;
  /** Hugging Face's Conv1D stores the weight as [in, out]. */
  readonly transposedWeight?: boolean;
  /**
   * A quantized weight ({@link QuantScheme}): stored as that format stores it, frozen. `nf4`
   * is bitsandbytes NF4 with double quantisation (QLoRA's usual base). bitsandbytes 4-bit
   * dequantises the whole weight to the activations' dtype for each matmul, forward and backward.
   */
  readonly quant?: QuantScheme | 'nf4';
  /**
   * Rows (out features) the weight's storage holds when more than `out`: a DTensor shard of an
   * uneven dimension is a narrowed view of a buffer padded to ⌈n/t⌉ rows (measured, torch 2.13).
   */
  readonly storageRows?: number;
}

/** `'nf4'` or a {@link QuantScheme}. */
const quant: Check = (value, path, issues) => {
  if (typeof value !== 'string') return quantScheme(value, path, issues);
  if (value !== 'nf4')
    issues.push({ path, code: 'bad-option', message: "unknown quantization: 'nf4' or a scheme", expected: "'nf4' | { method: … }", received: show(value) });
};

/**
 * Linear's attributes: out >= 1 (required), in >= 1, a quantization scheme, storageRows >= out;
 * a tied weight is not quantized.
 */
export const LINEAR_SCHEMA: AttrSchema = {
  fields: { out: integer(1), bias: boolean, in: integer(1), tiedWeight: string, transposedWeight: boolean, quant, storageRows: integer(1) },
  required: ['out'],
  across: ({ out, quant, tiedWeight, storageRows }, report) => {
    if (quant !== undefined && tiedWeight !== undefined) report('quant', 'a tied weight is not quantized', 'no quant with tiedWeight', quant);
    if (storageRows !== undefined && (storageRows as number) < (out as number))
      report('storageRows', 'the storage holds at least the out rows', `>= out (${out as number})`, storageRows);
  },
};

const linearAttrs = attrsGuard(LINEAR_SCHEMA, true);

/**
 * Linear: y = x·Wᵀ + b over the last dimension. It runs as addmm/mm/matmul, whose
 * autograd saves the input only when the weight needs a gradient (mat1 is kept for
 * mat2's gradient) and the weight only when the input needs one.
 */
export const linearOp: OpRule<LinearAttrs> = {
  name: 'linear',
  arity: 1,
  apply([input], attrs, ctx) {
    linearAttrs(attrs, ctx);
    const rank = input!.shape.length;
    if (rank < 1) expectRank(input!, [2, 3], ctx, 'linear');
    const features = concreteDim(input!.shape[rank - 1]!, 'linear input features', ctx);
    if (attrs.in !== undefined && attrs.in !== features) {
      fail('channel-mismatch', 'linear input features differ from the declared in', {
        path: [...ctx.path, 'in'],
        expected: String(attrs.in),
        received: String(features),
      });
    }
    const out = attrs.out;
    const lead = input!.shape.slice(0, -1);
    if (attrs.quant !== undefined) {
      if (attrs.tiedWeight !== undefined) fail('bad-quantization', 'a tied weight is not quantized', { path: ctx.path, received: attrs.tiedWeight });
      const scheme: QuantScheme = attrs.quant === 'nf4' ? { method: 'bnb-4bit', quantType: 'nf4', doubleQuant: true } : attrs.quant;
      const { weight, constants } = quantizedWeight(scheme, features, out, ctx.paramDtype, ctx.path);
      const params: OwnedTensor[] = [{ name: 'weight', spec: weight }];
      if (attrs.bias ?? true) params.push({ name: 'bias', spec: tensor([out], ctx.paramDtype) });
      // bitsandbytes 4-bit dequantises the weight for every matmul; the other kernels' workspaces are not modelled.
      const dequantized = scheme.method === 'bnb-4bit' ? specBytes(tensor([out, features], input!.dtype)) : 0;
      return {
        outputs: [tensor([...lead, out], input!.dtype)],
        params,
        buffers: constants,
        // MatMul4Bit keeps only the packed weight: the input is not needed for a frozen weight.
        saves: () => [],
        ...(dequantized !== 0
          ? {
              forwardSteps: [{ alloc: 'dequantized weight', bytes: dequantized }, { results: 'outputs' }, { free: 'dequantized weight' }],
              backward: () => ({
                steps: [
                  { alloc: 'dequantized weight', bytes: dequantized },
                  { results: 'inputGrads' },
                  { free: 'dequantized weight' },
                  { results: 'paramGrads' },
                ],
              }),
            }
          : {}),
        macs: () => mul(product(lead), out * features),
      };
    }
    const weight = tensor(attrs.transposedWeight ? [features, out] : [out, features], ctx.paramDtype);
    const padded =
      attrs.storageRows !== undefined && attrs.storageRows !== out && !attrs.transposedWeight
        ? { storageSpec: tensor([attrs.storageRows, features], ctx.paramDtype) }
        : {};
    const params: OwnedTensor[] = [
      attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight, ...padded },
    ];
    if (attrs.bias ?? true) params.push({ name: 'bias', spec: tensor([out], ctx.paramDtype) });
    return {
      outputs: [tensor([...lead, out], input!.dtype)],
      params,
      saves: (needs) => {
        const saved: SavedRef[] = [];
        if (needs.params) saved.push({ input: 0 });
        if (needs.inputs[0]) saved.push({ param: 'weight' });
        return saved;
      },
      macs: () => mul(product(lead), out * features),
    };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
