import { tracedModel } from '../estimate.js';
import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import type { IR, IRModule } from '../trace/ir.js';
import { integer, object, oneOf, string, validate } from '../validate.js';
import { pyFixed, pyList, pyThousands, rjust } from './pyformat.js';

/** Options of the torchsummary-compatible table. */
export interface TorchsummaryOptions {
  /**
   * `master` (default, sksq96/pytorch-summary master) gives the model passed to it the
   * last row and sums Params size and Estimated Total in float32; `1.5.1` (the PyPI
   * release) gives the model passed in no row and works in float64.
   */
  readonly variant?: 'master' | '1.5.1';
  /**
   * Class name of a module wrapping the model, as the seed's `PlantDiseaseClassifier`
   * wraps MobileNetV3: the model becomes a child, the wrapper the module passed in.
   */
  readonly wrapper?: string;
  /** torchsummary's `batch_size` argument (default -1). */
  readonly batchSize?: number;
}

/** TorchsummaryOptions, key by key (an unknown key is an error with the closest known one). */
const torchsummaryOptions = object({ fields: { variant: oneOf(['master', '1.5.1'], 'variant'), wrapper: string, batchSize: integer(-1) } });

const RULE = '-'.repeat(64);
const DOUBLE = '='.repeat(64);
const MB = 1024 ** 2;

function concrete(shape: readonly Dim[], module: IRModule): number[] {
  return shape.map((dim) => {
    if (typeof dim !== 'number') fail('symbolic-shape', 'the torchsummary format needs concrete shapes', { path: module.path });
    return dim;
  });
}

function numel(ir: IR, id: number): number {
  return ir.tensors[id]!.spec.shape.reduce<number>((acc, d) => acc * (d as number), 1);
}

/** The module rows torchsummary prints: hooked modules (no Sequential) in forward-completion order. */
export function torchsummaryModules(ir: IR, includeRoot = true): IRModule[] {
  return ir.modules.filter((m) => !m.isSequential && (includeRoot || m.parent !== null)).sort((a, b) => a.finishOrder - b.finishOrder);
}

/**
 * The text sksq96/pytorch-summary prints, reproduced from the IR: one row per hooked
 * module (not Sequential subclasses), weight + bias parameters per row, the -1 batch
 * convention, "Forward/backward pass size" = 2 × Σ row output elements × 4 B in MiB. The IR must
 * be one traceModel() made (an estimate's `ir`), the options torchsummary's: a VramError otherwise.
 *
 * @example
 * ```ts
 * import { formatTorchsummary, mobilenetV3Small, traceModel } from 'vram-ts';
 * const text = formatTorchsummary(traceModel(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672] }));
 * console.log(text.split('\n').at(-5)); // "Forward/backward pass size (MB): 7357.33"
 * ```
 */
export function formatTorchsummary(ir: IR, options: TorchsummaryOptions = {}): string {
  validate(ir, tracedModel, ['formatTorchsummary', 'ir']);
  validate(options, torchsummaryOptions, ['formatTorchsummary', 'options']);
  const batch = options.batchSize ?? -1;
  const master = (options.variant ?? 'master') === 'master';
  const wrapper = options.wrapper;
  const lines: string[] = [RULE, `${rjust('Layer (type)', 20)}  ${rjust('Output Shape', 25)} ${rjust('Param #', 15)}`, DOUBLE];
  let totalParams = 0;
  let trainableParams = 0;
  let totalOutput = 0;
  let anyWeight = false;
  // The module passed to summary(): the wrapper when there is one, else the model's root.
  const modules = torchsummaryModules(ir, master || wrapper !== undefined);
  const rows: { className: string; module: IRModule; isWrapper: boolean }[] = modules.map((module) => ({
    className: module.className,
    module,
    isWrapper: false,
  }));
  // The wrapper's forward returns the model's output; it owns no weight of its own.
  if (wrapper !== undefined && master) rows.push({ className: wrapper, module: ir.modules[0]!, isWrapper: true });
  rows.forEach(({ className, module, isWrapper }, i) => {
    let params = 0;
    let trainable: boolean | undefined;
    for (const id of isWrapper ? [] : module.params) {
      const t = ir.tensors[id]!;
      const name = t.key?.split('.').pop();
      if (name !== 'weight' && name !== 'bias') continue;
      params += numel(ir, id);
      if (name === 'weight') {
        trainable = ir.storages[t.storage]!.trainable;
        anyWeight = true;
      }
    }
    const outputs = module.outputs.map((id) => concrete(ir.tensors[id]!.spec.shape, module));
    let shapeText: string;
    if (outputs.length === 1) {
      const shape = [batch, ...outputs[0]!.slice(1)];
      shapeText = pyList(shape);
      totalOutput += shape.reduce((a, b) => a * b, 1);
    } else {
      const shapes = outputs.map((s) => [-1, ...s.slice(1)]);
      shapeText = `[${shapes.map(pyList).join(', ')}]`;
      totalOutput += shapes.flat().reduce((a, b) => a * b, 1);
    }
    lines.push(`${rjust(`${className}-${i + 1}`, 20)}  ${rjust(shapeText, 25)} ${rjust(pyThousands(params), 15)}`);
    totalParams += params;
    if (trainable === true) trainableParams += params;
  });
  const inputElements = ir.inputs.reduce(
    (acc, id) =>
      acc *
      concrete(ir.tensors[id]!.spec.shape, ir.modules[0]!)
        .slice(1)
        .reduce((a, b) => a * b, 1),
    1,
  );
  const inputSize = Math.abs((inputElements * batch * 4) / MB);
  const outputSize = Math.abs((2 * totalOutput * 4) / MB);
  // master sums a torch tensor once any row has a weight: Params size and the total are float32.
  const f32 = master && anyWeight ? Math.fround : (x: number) => x;
  const paramsSize = f32(Math.abs(f32(totalParams * 4) / MB));
  const totalSize = master && anyWeight ? f32(f32(paramsSize + f32(outputSize)) + f32(inputSize)) : paramsSize + outputSize + inputSize;
  lines.push(
    DOUBLE,
    `Total params: ${pyThousands(totalParams)}`,
    `Trainable params: ${pyThousands(trainableParams)}`,
    `Non-trainable params: ${pyThousands(totalParams - trainableParams)}`,
    RULE,
    `Input size (MB): ${pyFixed(inputSize, 2)}`,
    `Forward/backward pass size (MB): ${pyFixed(outputSize, 2)}`,
    `Params size (MB): ${pyFixed(paramsSize, 2)}`,
    `Estimated Total Size (MB): ${pyFixed(totalSize, 2)}`,
    RULE,
  );
  return `${lines.join('\n')}\n`;
}
