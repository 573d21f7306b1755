/**
 * seq is the one sequence builder: a first argument that is a plain object, not a layer, is the
 * sequence's options (what `sequential(options, ...layers)` took before it merged into seq).
 */
import { describe, expect, it } from 'vitest';
import { estimate, linear, relu, seq, VramError } from '../../src/index.js';

describe('seq', () => {
  it('takes layers only, as torch.nn.Sequential', () => {
    expect(seq(relu(), linear({ out: 4 }))).toEqual({ kind: 'seq', className: 'Sequential', isSequential: true, children: [relu(), linear({ out: 4 })] });
    expect(seq()).toEqual({ kind: 'seq', className: 'Sequential', isSequential: true, children: [] });
  });

  it('takes a name, a class and isSequential as a first, options argument', () => {
    expect(seq({ name: 'features' }, relu())).toEqual({ kind: 'seq', className: 'Sequential', isSequential: true, children: [relu()], name: 'features' });
    expect(seq({ name: 'inc', className: 'DoubleConv', isSequential: false }, relu())).toEqual({
      kind: 'seq',
      className: 'DoubleConv',
      isSequential: false,
      children: [relu()],
      name: 'inc',
    });
    expect(seq({}, relu())).toEqual(seq(relu()));
    const r = estimate(seq(seq({ name: 'head' }, linear({ out: 4 }), relu())), { input: [2, 8] });
    expect(r.modules.map((m) => m.path.join('.'))).toEqual(['', 'head', 'head.0', 'head.1']);
  });

  it('rejects an unknown option as a VramError naming seq', () => {
    let error: unknown;
    try {
      seq({ nmae: 'x' } as never, relu());
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(VramError);
    expect((error as VramError).issues[0]!.path).toEqual(['seq', 'nmae']);
  });
});
