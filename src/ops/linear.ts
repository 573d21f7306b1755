import { fail } from '../errors.js';
import { mul, product } from '../sym/ops.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { concreteDim, expectRank, positiveInt } from './check.js';
import type { OpRule, SavedRef } from './types.js';

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
   * `nf4`: a bitsandbytes Linear4bit (QLoRA base layer): the weight packed two per byte with
   * blockwise double-quantised constants, dequantised to the activations' dtype for each
   * matmul, forward and backward.
   */
  readonly quant?: 'nf4';
}

/** bitsandbytes 4-bit blocks: one absmax per 64 weights, quantised to 8 bits, with a float32 constant per 256 of those. */
export const NF4_BLOCK = 64;
export const NF4_BLOCK2 = 256;

/**
 * Linear: y = x·Wᵀ + b over the last dimension. It runs as addmm/mm/matmul, whose
 * autograd saves the input only when the weight needs a gradient (mat1 is kept for
 * mat2's gradient) and the weight only when the input needs one.
 */
export const linearRule: OpRule<LinearAttrs> = {
  name: 'linear',
  arity: 1,
  apply([input], attrs, ctx) {
    const rank = input!.shape.length;
    if (rank < 1) expectRank(input!, [2, 3], ctx, 'linear');
    const features = concreteDim(input!.shape[rank - 1]!, 'linear input features', ctx);
    if (attrs.in !== undefined && attrs.in !== features) {
      fail('channel-mismatch', 'linear input features differ from the declared in', { path: ctx.path, expected: String(attrs.in), received: String(features) });
    }
    const out = positiveInt(attrs.out, 'out', ctx);
    const quantized = attrs.quant === 'nf4';
    const weight = tensor(attrs.transposedWeight ? [features, out] : [out, features], quantized ? 'nf4' : ctx.paramDtype);
    const params = [attrs.tiedWeight !== undefined ? { name: 'weight', spec: weight, tiedTo: attrs.tiedWeight } : { name: 'weight', spec: weight }];
    if (attrs.bias ?? true) params.push({ name: 'bias', spec: tensor([out], ctx.paramDtype) });
    const lead = input!.shape.slice(0, -1);
    if (quantized) {
      const blocks = Math.ceil((out * features) / NF4_BLOCK);
      const dequantized = specBytes(tensor([out, features], input!.dtype));
      return {
        outputs: [tensor([...lead, out], input!.dtype)],
        params,
        buffers: [
          { name: 'absmax', spec: tensor([blocks], 'uint8') },
          { name: 'absmax2', spec: tensor([Math.ceil(blocks / NF4_BLOCK2)], 'float32') },
        ],
        // MatMul4Bit keeps only the packed weight: the input is not needed for a frozen weight.
        saves: () => [],
        forwardSteps: [{ alloc: 'dequantized weight', bytes: dequantized }, { results: 'outputs' }, { free: 'dequantized weight' }],
        backward: () => ({ steps: [{ alloc: 'dequantized weight', bytes: dequantized }, { results: 'inputGrads' }, { free: 'dequantized weight' }, { results: 'paramGrads' }] }),
        macs: mul(product(lead), out * features),
      };
    }
    return {
      outputs: [tensor([...lead, out], input!.dtype)],
      params,
      saves: (needs) => {
        const saved: SavedRef[] = [];
        if (needs.params) saved.push({ input: 0 });
        if (needs.inputs[0]) saved.push({ param: 'weight' });
        return saved;
      },
      macs: mul(product(lead), out * features),
    };
  },
};
