import { describe, expect, it } from 'vitest';
import { bn, conv2d, flatten, linear, relu, seq, sigmoid, tensor, VramError, type Layer } from '../../src/index.js';
import { tensorUses, trace, type TraceOptions } from '../../src/internals.js';

const TRAIN: Omit<TraceOptions, 'inputs'> = { training: true, gradEnabled: true, device: 'cuda', paramDtype: 'float32', loss: 'none' };

function traced(model: Layer, shape: readonly number[], options: Partial<TraceOptions> = {}) {
  return trace(model, { ...TRAIN, inputs: [tensor(shape)], ...options });
}

describe('trace', () => {
  const model = seq(conv2d({ out: 8, kernel: 3, padding: 1 }), bn(), relu({ inplace: true }), flatten(), linear({ out: 4 }));
  const ir = traced(model, [2, 3, 8, 8]);

  it('lists the ops in execution order, each in its module', () => {
    expect(ir.ops.map((op) => op.op)).toEqual(['conv2d', 'batch_norm', 'relu', 'flatten', 'linear']);
    expect(ir.ops.map((op) => ir.modules[op.module]!.key)).toEqual(['0', '1', '2', '3', '4']);
    expect(ir.modules.map((m) => m.className)).toEqual(['Sequential', 'Conv2d', 'BatchNorm2d', 'ReLU', 'Flatten', 'Linear']);
  });

  it('chains producers: every op reads what the previous one made', () => {
    for (const op of ir.ops.slice(1)) expect(ir.tensors[op.inputs[0]!]!.producer).toBe(op.index - 1);
    for (const op of ir.ops) for (const id of op.outputs) expect(ir.tensors[id]!.producer).toBe(op.index);
    expect(ir.tensors[ir.inputs[0]!]!.producer).toBeNull();
  });

  it('gives in-place and view results their input storage, new results a storage of their own', () => {
    const storageOf = (id: number) => ir.tensors[id]!.storage;
    const [conv, norm, act, flat, fc] = ir.ops;
    expect(act!.alias).toBe('inplace');
    expect(storageOf(act!.outputs[0]!)).toBe(storageOf(norm!.outputs[0]!));
    expect(flat!.alias).toBe('view');
    expect(storageOf(flat!.outputs[0]!)).toBe(storageOf(act!.outputs[0]!));
    expect(storageOf(fc!.outputs[0]!)).not.toBe(storageOf(flat!.outputs[0]!));
    expect(storageOf(norm!.outputs[0]!)).not.toBe(storageOf(conv!.outputs[0]!));
    expect(ir.storages[storageOf(flat!.outputs[0]!)]!.bytes).toBe(2 * 8 * 8 * 8 * 4);
  });

  it('records consumers and savers (tensorUses)', () => {
    const uses = tensorUses(ir);
    const [conv, norm, act, flat] = ir.ops;
    expect(uses.consumers[ir.inputs[0]!]).toEqual([0]);
    expect(uses.savedBy[ir.inputs[0]!]).toEqual([0]); // conv2d keeps its input for the weight gradient
    expect(uses.consumers[conv!.outputs[0]!]).toEqual([1]);
    expect(uses.savedBy[conv!.outputs[0]!]).toEqual([1]); // batch_norm keeps its input
    expect(uses.savedBy[act!.outputs[0]!]).toEqual([2]); // relu keeps its result
    expect(uses.savedBy[flat!.outputs[0]!]).toEqual([4]); // linear keeps its (flattened) input
    expect(uses.savedBy[norm!.outputs[0]!]).toEqual([]); // overwritten in place: not what backward reads
  });

  it('names parameters and buffers with PyTorch state_dict keys', () => {
    const keys = ir.tensors.filter((t) => t.role === 'param' || t.role === 'buffer').map((t) => t.key);
    expect(keys).toEqual(expect.arrayContaining(['0.weight', '1.weight', '1.bias', '1.running_mean', '1.running_var', '4.weight', '4.bias']));
  });

  it('records nothing for backward without grad mode', () => {
    const eval_ = traced(model, [2, 3, 8, 8], { training: false, gradEnabled: false });
    expect(eval_.ops.every((op) => !op.recorded && op.saved.length === 0 && op.backward === null)).toBe(true);
  });

  it('shares the weights of a layer object used twice, and says so in the module tree', () => {
    const shared = linear({ out: 16 });
    const twice = traced(seq(shared, relu(), shared), [4, 16]);
    const params = twice.tensors.filter((t) => t.role === 'param');
    expect(params).toHaveLength(2);
    expect(twice.ops[2]!.params).toEqual(twice.ops[0]!.params);
    expect(twice.modules.map((m) => m.sharedWith)).toEqual([null, null, null, 1]);
  });

  it('refuses an in-place op on a tensor an earlier op saved, as autograd would in backward', () => {
    const model = seq(linear({ out: 4 }), sigmoid(), relu({ inplace: true }));
    let caught: unknown;
    try {
      traced(model, [2, 8]);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(VramError);
    const issue = (caught as VramError).issues[0]!;
    expect(issue.code).toBe('inplace-on-saved');
    expect(issue.path).toEqual(['2', 'relu']);
    expect(issue.message).toContain('1.sigmoid');
    // Without autograd nothing is saved, so the same model traces.
    expect(() => traced(model, [2, 8], { gradEnabled: false })).not.toThrow();
  });
});
