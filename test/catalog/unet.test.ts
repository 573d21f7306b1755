/**
 * The classic UNet of the catalog (src/catalog/unet.ts): the module tree and parameter count of
 * the PyTorch model written in tools/oracle/layers.py (UNet), and its options. Memory is checked
 * against the oracle in test/fidelity/pytorch.test.ts (fixtures unet_*).
 */
import { describe, expect, it } from 'vitest';
import { estimate, unet, VramError } from '../../src/index.js';

describe('unet', () => {
  it('has the classic UNet parameters (31,037,698 at base 64, 3 → 2 channels)', () => {
    const r = estimate(unet(), { input: [1, 3, 64, 64], mode: 'inference', device: 'cpu', timeline: false });
    expect(r.params.total).toBe(31037698);
    expect(r.modules.at(-1)?.outputShape).toEqual([1, 2, 64, 64]);
    const paths = r.modules.map((m) => m.path.join('.'));
    for (const p of ['inc.double_conv.0', 'down4.maxpool_conv.1.double_conv.3', 'up1.up', 'up4.conv.double_conv.5', 'outc.conv']) expect(paths).toContain(p);
  });
  it('rejects bad options and sizes that are not multiples of 16', () => {
    expect(() => unet({ base: 0 })).toThrow(VramError);
    expect(() => unet({ classes: 2 } as never)).toThrow(VramError);
    expect(() => estimate(unet({ base: 8 }), { input: [1, 3, 72, 72] })).toThrow(VramError);
    expect(() => estimate(unet({ inChannels: 1, base: 8 }), { input: [1, 3, 64, 64] })).toThrow(VramError);
  });
});
