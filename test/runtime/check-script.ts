/**
 * The script every runtime runs against the packed package: the seed's case, checked.
 * Written out as ESM and CJS text by the runtime test.
 */
export const checkBody = (importLine: string) => `${importLine}
const model = mobilenetV3Small({ numClasses: 3 });
const r = estimate(model, { input: [1, 3, 4000, 2672] });
const text = summary(model, { input: [1, 3, 4000, 2672], format: 'torchsummary' });
const ok = r.params.total === 1520931 && r.bytes.activations === 3437733408 && text.includes('Forward/backward pass size (MB): 7357.33');
const line = 'vram-ts ' + (ok ? 'ok' : 'FAILED') + ' params=' + r.params.total + ' activations=' + r.bytes.activations + ' peak=' + r.bytes.peak;
`;
