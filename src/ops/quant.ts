import { fail } from '../errors.js';
import { ceilDiv } from '../sym/ops.js';
import type { DType } from '../tensor/dtype.js';
import { tensor, type TensorSpec } from '../tensor/spec.js';
import { anything, arrayOf, boolean, integer, object, oneOf, show, type Check } from '../validate.js';
import type { OwnedTensor } from './types.js';

/**
 * How a quantized `nn.Linear` stores its weight, as the loaders of Hugging Face's
 * `quantization_config` leave it on the GPU:
 * - `bnb-4bit`: bitsandbytes Linear4bit (NF4/FP4, blocks of 64, optional double quantisation);
 * - `bnb-8bit`: bitsandbytes Linear8bitLt (LLM.int8: int8 rows and a float32 scale per row);
 * - `gptq`: the GPTQ QuantLinear layout (qweight, qzeros, scales, g_idx);
 * - `awq`: AutoAWQ's WQLinear_GEMM / WQLinear_GEMV;
 * - `fp8`: transformers' fine-grained FP8 (float8_e4m3fn weight, float32 scales per block);
 * - `fbgemm-fp8`: FBGEMM FP8 (float8 weight, a float32 scale per row).
 */
export type QuantScheme =
  | { readonly method: 'bnb-4bit'; readonly quantType?: 'nf4' | 'fp4'; readonly doubleQuant?: boolean }
  | { readonly method: 'bnb-8bit' }
  | { readonly method: 'gptq'; readonly bits: 2 | 3 | 4 | 8; readonly groupSize: number; readonly descAct?: boolean }
  | { readonly method: 'awq'; readonly bits: 4; readonly groupSize: number; readonly version?: 'gemm' | 'gemv' }
  | { readonly method: 'fp8'; readonly block: readonly [number, number] }
  | { readonly method: 'fbgemm-fp8' };

/** GPTQ's and AWQ's group size: -1 (one group per row) or an integer >= 1. */
const groupSize: Check = (value, path, issues) => {
  if (value !== -1) integer(1)(value, path, issues);
};

/** A number among `values` (GPTQ's and AWQ's bits). */
function oneOfNumbers(values: readonly number[]): Check {
  return (value, path, issues) => {
    if (typeof value !== 'number' || !values.includes(value))
      issues.push({ path, code: 'bad-option', message: `must be one of ${values.join(', ')}`, expected: values.join(' | '), received: show(value) });
  };
}

const method = anything;
const SCHEMES: Readonly<Record<string, Check>> = {
  'bnb-4bit': object({ fields: { method, quantType: oneOf(['nf4', 'fp4'], 'quant type'), doubleQuant: boolean } }),
  'bnb-8bit': object({ fields: { method } }),
  gptq: object({ fields: { method, bits: oneOfNumbers([2, 3, 4, 8]), groupSize, descAct: boolean }, required: ['bits', 'groupSize'] }),
  awq: object({ fields: { method, bits: oneOfNumbers([4]), groupSize, version: oneOf(['gemm', 'gemv'], 'AWQ version') }, required: ['bits', 'groupSize'] }),
  fp8: object({ fields: { method, block: arrayOf(integer(1), { min: 2, max: 2 }) }, required: ['block'] }),
  'fbgemm-fp8': object({ fields: { method } }),
};
const METHODS = Object.keys(SCHEMES);

/** A {@link QuantScheme}: a known `method` and that format's fields (GPTQ's bits 2, 3, 4 or 8; a group size -1 or >= 1; FP8's [n, k] block). */
export const quantScheme: Check = (value, path, issues) => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    issues.push({
      path,
      code: 'bad-option',
      message: 'must be a quantization scheme',
      expected: `{ method: ${METHODS.join(' | ')}, … }`,
      received: show(value),
    });
    return;
  }
  const kind = (value as { method?: unknown }).method;
  if (typeof kind === 'string' && Object.hasOwn(SCHEMES, kind)) SCHEMES[kind]!(value, path, issues);
  else oneOf(METHODS, 'quantization method')(kind, [...path, 'method'], issues);
};

/** bitsandbytes 4-bit blocks (Params4bit's blocksize) and the nested blocks of double quantisation. */
export const BNB4_BLOCK = 64;
export const BNB4_NESTED_BLOCK = 256;

/** The tensors of one quantized Linear [out = N, in = K]: the weight (logical [N, K], packed dtype) and its constants. */
export interface QuantizedWeight {
  readonly weight: TensorSpec;
  readonly constants: readonly OwnedTensor[];
}

const PACKED: Readonly<Record<number, DType>> = { 2: 'int2', 3: 'int3', 4: 'int4', 8: 'int8' };

/**
 * The stored tensors of one Linear under a quantization scheme, byte for byte as the
 * formats lay them out (sources: bitsandbytes functional.quantize_4bit / Int8Params,
 * AutoGPTQ qlinear, AutoAWQ gemm.py / gemv.py, transformers integrations finegrained_fp8.py
 * and fbgemm_fp8.py). Shapes the kernels cannot take are a VramError. The bias, when there
 * is one, stays in the model's dtype and is not listed here.
 *
 * @example
 * ```ts
 * import { quantizedWeight } from 'vram-ts/internals';
 * const q = quantizedWeight({ method: 'gptq', bits: 4, groupSize: 128 }, 4096, 11008, 'float16');
 * console.log(q.weight.dtype, q.constants.map((c) => c.name).join(' ')); // int4 qzeros scales g_idx
 * ```
 */
export function quantizedWeight(scheme: QuantScheme, k: number, n: number, dtype: DType, path: readonly (string | number)[] = []): QuantizedWeight {
  const bad = (message: string, received: string) => fail('bad-quantization', message, { path, received });
  switch (scheme.method) {
    case 'bnb-4bit': {
      const blocks = ceilDiv(n * k, BNB4_BLOCK) as number;
      const code: OwnedTensor = { name: 'quant_state.code', spec: tensor([16], 'float32') };
      const constants: OwnedTensor[] = scheme.doubleQuant
        ? [
            { name: 'quant_state.absmax', spec: tensor([blocks], 'uint8') },
            { name: 'quant_state.offset', spec: tensor([], 'float32') },
            { name: 'quant_state.state2.absmax', spec: tensor([ceilDiv(blocks, BNB4_NESTED_BLOCK)], 'float32') },
            { name: 'quant_state.state2.code', spec: tensor([256], 'float32') },
            code,
          ]
        : [{ name: 'quant_state.absmax', spec: tensor([blocks], 'float32') }, code];
      return { weight: tensor([n, k], 'nf4'), constants };
    }
    case 'bnb-8bit':
      return { weight: tensor([n, k], 'int8'), constants: [{ name: 'SCB', spec: tensor([n], 'float32') }] };
    case 'gptq': {
      const { bits, groupSize } = scheme;
      const group = groupSize === -1 ? k : groupSize;
      if ((k * bits) % 32 !== 0) bad(`GPTQ packs ${bits}-bit rows into int32: in_features × bits must be a multiple of 32`, `in_features ${k}`);
      const groups = ceilDiv(k, group) as number;
      return {
        weight: tensor([n, k], PACKED[bits]!),
        constants: [
          { name: 'qzeros', spec: tensor([groups, ceilDiv(n * bits, 32)], 'int32') },
          { name: 'scales', spec: tensor([groups, n], dtype) },
          { name: 'g_idx', spec: tensor([k], 'int32') },
        ],
      };
    }
    case 'awq': {
      const group = scheme.groupSize === -1 ? k : scheme.groupSize;
      if (k % group !== 0) bad('AWQ needs in_features divisible by group_size', `in_features ${k}, group_size ${group}`);
      if (n % 8 !== 0) bad('AWQ packs 8 outputs per int32: out_features must be a multiple of 8', `out_features ${n}`);
      if (scheme.version === 'gemv') {
        const multiplier = group >= 128 ? 1 : group === 64 ? 2 : 4;
        const width = (ceilDiv(ceilDiv(k / group, 8), multiplier) as number) * multiplier;
        return {
          weight: tensor([n, k], 'int4'),
          constants: [
            { name: 'qzeros', spec: tensor([n, width], 'int32') },
            { name: 'scales', spec: tensor([n, 8 * width], 'float16') },
          ],
        };
      }
      return {
        weight: tensor([n, k], 'int4'),
        constants: [
          { name: 'qzeros', spec: tensor([k / group, n / 8], 'int32') },
          { name: 'scales', spec: tensor([k / group, n], 'float16') },
        ],
      };
    }
    case 'fp8': {
      const [bn, bk] = scheme.block;
      if (k % bk !== 0) bad('fine-grained FP8 quantises activations in blocks: in_features must be a multiple of the block', `in_features ${k}, block ${bk}`);
      return { weight: tensor([n, k], 'float8_e4m3'), constants: [{ name: 'weight_scale_inv', spec: tensor([ceilDiv(n, bn), ceilDiv(k, bk)], 'float32') }] };
    }
    case 'fbgemm-fp8':
      return {
        weight: tensor([n, k], 'float8_e4m3'),
        constants: [
          { name: 'weight_scale', spec: tensor([n, 1], 'float32') },
          { name: 'input_scale_ub', spec: tensor([1], 'float32') },
        ],
      };
  }
}
