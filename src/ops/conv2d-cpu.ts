import { bounds } from '../sym/bounds.js';
import type { Dim } from '../sym/expr.js';
import { add, max, mul, product, sub } from '../sym/ops.js';
import type { KernelStep } from './types.js';

/** A convolution's kernel steps: the forward's and, per needed gradient, the backward's. */
export interface ConvSteps {
  readonly forward: KernelStep[];
  readonly backward: (inputGrad: boolean, weightGrad: boolean) => KernelStep[];
}

/** The shapes a convolution kernel sees. */
export interface ConvGeometry {
  readonly n: Dim;
  readonly cIn: number;
  readonly h: Dim;
  readonly w: Dim;
  readonly out: number;
  readonly ho: Dim;
  readonly wo: Dim;
  readonly kh: number;
  readonly kw: number;
  readonly strided: boolean;
  readonly dilated: boolean;
  readonly padded: boolean;
  readonly groups: number;
  readonly elementBytes: number;
  /** The strides (default [2, 2] when `strided`, [1, 1] otherwise): a strided 1×1 kernel's scratchpad depends on them. */
  readonly stride?: readonly [number, number];
}

/**
 * oneDNN's strided 1×1 convolution (ResNet's downsample) first reduces its input to unit stride
 * in a scratchpad of pad16(C)·Ho·Wo elements plus 128 bytes (one image), when every output
 * position maps back onto the input exactly (H = Ho·sh and W = Wo·sw; measured: 32×32 → 16×16
 * has it, 33×33 → 17×17 does not). 0 for every other convolution. For symbolic sizes and
 * stride 2 the indicator is exact: H − 2·Ho is 0 or −1.
 */
function rtusScratch(g: ConvGeometry): Dim {
  if (g.kh !== 1 || g.kw !== 1 || !g.strided || g.padded || g.dilated || g.groups !== 1) return 0;
  const [sh, sw] = g.stride ?? [2, 2];
  const fits = (size: Dim, out: Dim, s: number): Dim => {
    if (typeof size === 'number' && typeof out === 'number') return size === out * s ? 1 : 0;
    return s === 1 ? 1 : s === 2 ? add(1, sub(size, mul(out, 2))) : 1;
  };
  const indicator = mul(fits(g.h, g.ho, sh), fits(g.w, g.wo, sw));
  return mul(indicator, add(bytes(g, pad16(g.cIn), g.ho, g.wo), 128));
}

const pad16 = (c: number) => Math.ceil(c / 16) * 16;

/** [x >= k] for an integer x: 1 or 0, an exact 0/1 expression when x is symbolic. */
function atLeast(x: Dim, k: number): Dim {
  if (typeof x === 'number') return x >= k ? 1 : 0;
  if (bounds(x).min >= k) return 1;
  return min(1, max(0, sub(x, k - 1)));
}

function min(a: Dim, b: Dim): Dim {
  return sub(add(a, b), max(a, b));
}

/**
 * PyTorch 1.13's CPU backend choice (ConvParams::use_mkldnn, one thread as the oracle runs):
 * oneDNN when (strided or dilated or batch >= 16 or not 1×1) and (grouped or kernel > 3×3 or
 * batch > 1 or the input has more than 20480 elements); the "slow" im2col path otherwise.
 * 1 for oneDNN, 0 for the slow path; for symbolic sizes the exact 0/1 expression of the same
 * conditions, so a symbolic estimate takes the path the concrete one would at every size.
 */
export function mkldnnFactor(g: ConvGeometry): Dim {
  const a = g.strided || g.dilated || g.kw !== 1 || g.kh !== 1 ? 1 : atLeast(g.n, 16);
  const b = g.groups > 1 || (g.kw > 3 && g.kh > 3) ? 1 : max(atLeast(g.n, 2), atLeast(product([g.n, g.cIn, g.h, g.w]), 20481));
  return min(a, b);
}

/**
 * Both paths' kernel steps in one list, each allocation scaled by its path's 0/1 factor:
 * where the factor is 1 only the first path allocates, where it is 0 only the second, and
 * the live totals at every step are those of the path taken. The lists must make the same
 * results in the same order.
 */
export function eitherSteps(factor: Dim, first: readonly KernelStep[], second: readonly KernelStep[]): KernelStep[] {
  if (factor === 1) return [...first];
  if (factor === 0) return [...second];
  const segments = (steps: readonly KernelStep[], tag: string, scale: Dim) => {
    const out: KernelStep[][] = [[]];
    for (const step of steps) {
      if ('results' in step) out.push([step], []);
      else if ('alloc' in step) out[out.length - 1]!.push({ alloc: `${tag}${step.alloc}`, bytes: mul(step.bytes, scale) });
      else if ('free' in step) out[out.length - 1]!.push({ free: `${tag}${step.free}` });
      else out[out.length - 1]!.push(step);
    }
    return out;
  };
  const a = segments(first, '1:', factor);
  const b = segments(second, '2:', sub(1, factor));
  const merged: KernelStep[] = [];
  for (let i = 0; i < Math.max(a.length, b.length); i += 1) {
    if (i % 2 === 1) merged.push(...(a[i] ?? b[i] ?? []));
    else merged.push(...(a[i] ?? []), ...(b[i] ?? []));
  }
  return merged;
}

const bytes = (g: ConvGeometry, ...dims: Dim[]) => mul(product(dims), g.elementBytes);

/**
 * What the oneDNN kernels allocate through PyTorch's CPU allocator (read off the oracle's
 * allocator traces, test/fixtures/pytorch-traces): blocked formats pad channels to 16; the
 * forward reorders an input of 16 or more channels (and any strided 1×1 or grouped one) into a
 * blocked buffer, computes into a blocked output and copies it out; backward reorders the gradient
 * (and, for grouped convolutions, the input) into blocked buffers, once for the input
 * gradient and once for the weight gradient.
 */
export function mkldnnSteps(g: ConvGeometry): ConvSteps {
  // Depthwise convolutions reorder their input into a blocked layout padded to 16 channels;
  // other grouped ones take one of the paths of groupedSteps.
  const grouped = g.groups > 1 && g.groups === g.cIn && g.groups === g.out;
  if (g.groups > 1 && !grouped) return groupedSteps(g);
  const perGroupIn = g.cIn / g.groups;
  // A strided 1×1 kernel reorders its plain input into the blocked layout, and reduces it to unit stride in a scratchpad.
  const scratch = rtusScratch(g);
  const b: MkldnnBuffers = {
    grouped,
    strided1x1: g.kh === 1 && g.kw === 1 && g.strided && g.groups === 1,
    scratch,
    scratchSteps: (steps: KernelStep[]): KernelStep[] => (scratch === 0 ? [] : steps),
    outBlocked: bytes(g, g.n, pad16(g.out), g.ho, g.wo),
    inBlocked: bytes(g, g.n, pad16(g.cIn), g.h, g.w),
    weightBlocked: grouped ? bytes(g, pad16(g.out), perGroupIn, g.kh, g.kw) : bytes(g, pad16(g.out), g.cIn, g.kh, g.kw),
  };
  // A plain convolution reads an input of fewer than 16 channels (a stem) as it is; from 16 on it
  // reorders the input and the weight into blocked formats first (measured on 1.13: 3×3 with 3…12
  // input channels keep them plain, 16 and 24 are reordered, padded to 16).
  const blockedInput = grouped || b.strided1x1 || g.cIn >= 16;
  const forward: KernelStep[] = [
    ...b.scratchSteps([{ alloc: 'scratchpad', bytes: scratch }]),
    ...(blockedInput ? [{ alloc: 'input (blocked)', bytes: b.inBlocked }] : []),
    { alloc: 'weight (blocked)', bytes: !grouped && blockedInput ? bytes(g, pad16(g.out), pad16(g.cIn), g.kh, g.kw) : b.weightBlocked },
    { alloc: 'output (blocked)', bytes: b.outBlocked },
    { free: 'weight (blocked)' },
    { free: 'input (blocked)' },
    ...b.scratchSteps([{ free: 'scratchpad' }]),
    { results: 'outputs' },
    { free: 'output (blocked)' },
  ];
  const backward = (inputGrad: boolean, weightGrad: boolean): KernelStep[] => {
    const steps: KernelStep[] = [];
    if (inputGrad) {
      steps.push(
        { alloc: 'grad output (blocked)', bytes: b.outBlocked },
        { alloc: 'weight (blocked)', bytes: grouped ? b.weightBlocked : bytes(g, pad16(g.out), pad16(g.cIn), g.kh, g.kw) },
        { alloc: 'grad input (blocked)', bytes: b.inBlocked },
        ...b.scratchSteps([{ alloc: 'scratchpad', bytes: scratch }, { free: 'scratchpad' }]),
        { free: 'weight (blocked)' },
        { free: 'grad output (blocked)' },
        { results: 'inputGrads' },
        { free: 'grad input (blocked)' },
      );
    } else steps.push({ results: 'inputGrads' });
    steps.push(...(weightGrad ? mkldnnWeightGradSteps(g, b) : [{ results: 'paramGrads' as const }]));
    return steps;
  };
  return { forward, backward };
}

/** What {@link mkldnnSteps} sizes once for the forward and both gradients. */
interface MkldnnBuffers {
  /** Depthwise (the other grouped convolutions take groupedSteps). */
  readonly grouped: boolean;
  readonly strided1x1: boolean;
  readonly scratch: Dim;
  /** The steps, or none when there is no scratchpad. */
  readonly scratchSteps: (steps: KernelStep[]) => KernelStep[];
  readonly outBlocked: Dim;
  readonly inBlocked: Dim;
  readonly weightBlocked: Dim;
}

/** The oneDNN weight gradient: a depthwise scratchpad (5×5 and up), the gemm path (16×16 and up) or blocked buffers. */
function mkldnnWeightGradSteps(g: ConvGeometry, b: MkldnnBuffers): KernelStep[] {
  const { grouped, strided1x1, outBlocked, inBlocked, weightBlocked } = b;
  if (grouped && g.kh * g.kw >= 25) {
    // A depthwise kernel of 5×5 or more (EfficientNet's) computes its weight gradient in one
    // scratchpad of 4·k²·(4C + Ho·Wo) + 256 B, whatever the batch, with no blocked grad_output
    // or input (measured: 5×5 and 7×7, 32 to 96 channels, 5…40 pixels, strides 1 and 2, batch
    // 1 to 8; EfficientNet-B0's 480, 672 and 1152 channels). 3×3 takes the path below.
    const k2 = g.kh * g.kw;
    const depthwiseScratch = add(mul(mul(g.ho, g.wo), 4 * k2), 16 * k2 * g.cIn + 256);
    return [
      // not padded to 16 here (measured with 72 channels)
      { alloc: 'grad weight (blocked)', bytes: bytes(g, g.cIn, g.kh, g.kw) },
      { alloc: 'depthwise scratchpad', bytes: depthwiseScratch },
      { free: 'depthwise scratchpad' },
      { results: 'paramGrads' },
      { free: 'grad weight (blocked)' },
    ];
  }
  if (!grouped && (g.kh >= 16 || g.kw >= 16)) {
    // A kernel of 16 or more (ViT's patch embedding) takes oneDNN's gemm path for the weight
    // gradient: no blocked grad_output, but a scratchpad of 4× the weight plus one image's
    // im2col columns and 256 B (measured: 16×16 and 32×32 kernels; 4×4 … 14×14 take the path below).
    const gemmScratch = add(add(mul(bytes(g, g.out, g.cIn, g.kh, g.kw), 4), bytes(g, g.cIn * g.kh * g.kw, g.ho, g.wo)), 256);
    return [
      { alloc: 'grad weight (blocked)', bytes: weightBlocked },
      { alloc: 'gemm scratchpad', bytes: gemmScratch },
      { free: 'gemm scratchpad' },
      { results: 'paramGrads' },
      { free: 'grad weight (blocked)' },
    ];
  }
  // Plain NCHW input is read as it is when it has few channels (first layers).
  const inputCopy = grouped || strided1x1 ? inBlocked : g.cIn >= 8 ? bytes(g, g.n, g.cIn, g.h, g.w) : 0;
  return [
    { alloc: 'grad output (blocked) ', bytes: outBlocked },
    ...(inputCopy !== 0 ? [{ alloc: 'input (blocked)', bytes: inputCopy }] : []),
    { alloc: 'grad weight (blocked)', bytes: strided1x1 ? bytes(g, pad16(g.out), pad16(g.cIn), g.kh, g.kw) : weightBlocked },
    ...b.scratchSteps([{ alloc: 'scratchpad', bytes: b.scratch }, { free: 'scratchpad' }]),
    { free: 'input (blocked)' },
    { free: 'grad output (blocked) ' },
    { results: 'paramGrads' },
    { free: 'grad weight (blocked)' },
  ];
}

/**
 * oneDNN's grouped (not depthwise) convolutions on 1.13 CPU, read off allocator traces of single
 * convolutions (3×3, strides 1 and 2, batch 1 to 3, 2 to 32 groups; RegNet's and ResNeXt's
 * shapes). No channel padding on any path. With 8k channels per group (in and out) the blocked
 * path: the forward reorders the input and the weight and computes into a blocked output that is
 * copied out; the input gradient reorders the incoming gradient and the weight into a blocked
 * gradient; the weight gradient reorders the incoming gradient and the input. With 4k channels
 * per group the forward and the input gradient are the same, but the weight gradient takes the
 * gemm path: a scratchpad of 4× the weight plus one image's im2col columns of one group, and
 * 256 B. Otherwise (3 channels per group) every pass is gemm: the forward and the input gradient
 * with a scratchpad of those columns and 128 B.
 */
function groupedSteps(g: ConvGeometry): ConvSteps {
  const perIn = g.cIn / g.groups;
  const perOut = g.out / g.groups;
  const regime = perIn % 8 === 0 && perOut % 8 === 0 ? 'blocked' : perIn % 4 === 0 && perOut % 4 === 0 ? 'blocked-gemm-weight' : 'gemm';
  const input = bytes(g, g.n, g.cIn, g.h, g.w);
  const output = bytes(g, g.n, g.out, g.ho, g.wo);
  const weight = bytes(g, g.out, perIn, g.kh, g.kw);
  const columns = bytes(g, perIn * g.kh * g.kw, g.ho, g.wo);
  const forward: KernelStep[] =
    regime === 'gemm'
      ? [
          { alloc: 'gemm scratchpad', bytes: add(columns, 128) },
          { alloc: 'output (blocked)', bytes: output },
          { free: 'gemm scratchpad' },
          { results: 'outputs' },
          { free: 'output (blocked)' },
        ]
      : [
          { alloc: 'input (blocked)', bytes: input },
          { alloc: 'weight (blocked)', bytes: weight },
          { alloc: 'output (blocked)', bytes: output },
          { free: 'weight (blocked)' },
          { free: 'input (blocked)' },
          { results: 'outputs' },
          { free: 'output (blocked)' },
        ];
  const backward = (inputGrad: boolean, weightGrad: boolean): KernelStep[] => {
    const steps: KernelStep[] = [];
    if (!inputGrad) steps.push({ results: 'inputGrads' });
    else if (regime === 'gemm') {
      steps.push(
        { alloc: 'grad input (blocked)', bytes: input },
        { alloc: 'gemm scratchpad', bytes: add(columns, 128) },
        { free: 'gemm scratchpad' },
        { results: 'inputGrads' },
        { free: 'grad input (blocked)' },
      );
    } else {
      steps.push(
        { alloc: 'grad output (blocked)', bytes: output },
        { alloc: 'weight (blocked)', bytes: weight },
        { alloc: 'grad input (blocked)', bytes: input },
        { free: 'weight (blocked)' },
        { free: 'grad output (blocked)' },
        { results: 'inputGrads' },
        { free: 'grad input (blocked)' },
      );
    }
    if (!weightGrad) steps.push({ results: 'paramGrads' });
    else if (regime === 'blocked') {
      steps.push(
        { alloc: 'grad output (blocked) ', bytes: output },
        { alloc: 'input (blocked)', bytes: input },
        { alloc: 'grad weight (blocked)', bytes: weight },
        { free: 'input (blocked)' },
        { free: 'grad output (blocked) ' },
        { results: 'paramGrads' },
        { free: 'grad weight (blocked)' },
      );
    } else {
      steps.push(
        { alloc: 'grad weight (blocked)', bytes: weight },
        { alloc: 'gemm scratchpad', bytes: add(add(mul(weight, 4), columns), 256) },
        { free: 'gemm scratchpad' },
        { results: 'paramGrads' },
        { free: 'grad weight (blocked)' },
      );
    }
    return steps;
  };
  return { forward, backward };
}

/**
 * The "slow" path (slow_conv2d): im2col columns [N, C·kh·kw, Ho·Wo] unless the kernel is
 * 1×1 with stride 1 and no padding; backward builds columns again for each gradient.
 */
export function slowSteps(g: ConvGeometry): ConvSteps {
  const needsColumns = g.kh !== 1 || g.kw !== 1 || g.strided || g.padded;
  const columns = needsColumns ? bytes(g, g.n, g.cIn * g.kh * g.kw, g.ho, g.wo) : 0;
  if (columns === 0) return { forward: [{ results: 'outputs' }], backward: () => [{ results: 'inputGrads' }, { results: 'paramGrads' }] };
  return {
    forward: [{ alloc: 'columns', bytes: columns }, { results: 'outputs' }, { free: 'columns' }],
    backward: (inputGrad, weightGrad) => [
      ...(inputGrad
        ? [{ alloc: 'grad columns', bytes: columns }, { results: 'inputGrads' as const }, { free: 'grad columns' }]
        : [{ results: 'inputGrads' as const }]),
      ...(weightGrad ? [{ alloc: 'columns', bytes: columns }, { results: 'paramGrads' as const }, { free: 'columns' }] : [{ results: 'paramGrads' as const }]),
    ],
  };
}

/**
 * oneDNN on a channels-last input (1.13 CPU: a LayerNorm2d's output or a CNBlock's, which are
 * permuted NHWC tensors): the convolution runs in NHWC, with no blocked input or output; read off
 * allocator traces of single convolutions (2×2 stride 2 with 48→96 and 96→192 channels, depthwise
 * 7×7 with 64 and 96; batch 1 and 2; 20 and 32 pixels). A dense kernel first copies its weight
 * into the channels-last format (unless it is 1×1), reorders that, and uses an 8 KiB scratchpad; a
 * depthwise one (whose weight is already channels-last) a 4224 B one. Backward of the dense
 * kernel: the weight's channels-last copy, the input gradient, the weight reordered, the weight
 * and bias gradients in oneDNN's buffers and again as results, plus one more weight-sized copy
 * (the channels-last gradient AccumulateGrad copies out). The depthwise backward: the input
 * gradient, the weight reordered, a weight-gradient scratchpad of 1024·k²·C bytes whatever the
 * batch and size, a 64·C + 128 B buffer, then the gradients as for the dense kernel.
 */
export function channelsLastSteps(g: ConvGeometry): ConvSteps {
  const depthwise = g.groups > 1 && g.groups === g.cIn && g.groups === g.out;
  const weight = bytes(g, g.out, g.cIn / g.groups, g.kh, g.kw);
  const copyWeight = !depthwise && g.kh * g.kw > 1 && g.cIn / g.groups > 1;
  const forward: KernelStep[] = [
    ...(copyWeight ? [{ alloc: 'weight (channels-last)', bytes: weight }] : []),
    { results: 'outputs' },
    { alloc: 'scratchpad', bytes: depthwise ? 4224 : 8192 },
    { alloc: 'weight (blocked)', bytes: weight },
    { free: 'weight (blocked)' },
    { free: 'scratchpad' },
    ...(copyWeight ? [{ free: 'weight (channels-last)' }] : []),
  ];
  const backward = (inputGrad: boolean, weightGrad: boolean): KernelStep[] => {
    const biasKernel = mul(g.out, g.elementBytes);
    const steps: KernelStep[] = [...(copyWeight ? [{ alloc: 'weight (channels-last)', bytes: weight }] : []), { results: 'inputGrads' }];
    if (inputGrad) steps.push({ alloc: 'weight (blocked)', bytes: weight }, { free: 'weight (blocked)' });
    if (weightGrad) {
      if (depthwise) steps.push({ alloc: 'depthwise scratchpad', bytes: 1024 * g.kh * g.kw * g.cIn }, { alloc: 'depthwise buffer', bytes: 64 * g.cIn + 128 });
      else steps.push({ alloc: 'grad weight (blocked)', bytes: weight });
      steps.push({ alloc: 'grad bias (kernel)', bytes: biasKernel });
      if (depthwise) steps.push({ free: 'depthwise buffer' });
      steps.push({ results: 'paramGrads' }, { alloc: 'grad weight (copy)', bytes: weight }, { free: 'grad weight (copy)' });
      steps.push({ free: depthwise ? 'depthwise scratchpad' : 'grad weight (blocked)' }, { free: 'grad bias (kernel)' });
    } else steps.push({ results: 'paramGrads' });
    if (copyWeight) steps.push({ free: 'weight (channels-last)' });
    return steps;
  };
  return { forward, backward };
}
