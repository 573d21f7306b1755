/** A model's `repeated` record is believed only as repeatedBlocks made it for that body. */
import { describe, expect, it } from 'vitest';
import { estimate, fits, llm, type ModuleLayer } from '../../src/index.js';
import { declaredBlocks } from '../../src/nn/repeated.js';

const model = llm('qwen2.5-0.5b');
const input = [1, 64];

describe('declaredBlocks', () => {
  it("is the catalog's record, and nothing for an edited copy, another body or a hand-made record", () => {
    expect(declaredBlocks(model)).toBe(model.repeated);
    expect(declaredBlocks({ ...model, repeated: { ...model.repeated!, count: 54 } })).toBeUndefined();
    expect(declaredBlocks({ ...model, body: model.repeated!.withCount(3).body })).toBeUndefined();
    expect(declaredBlocks({ ...model, repeated: { ...model.repeated!, prefix: 42 as never } })).toBeUndefined();
  });

  it('an edited count changes nothing: the model is traced whole, reserved never below allocated', () => {
    const { repeated: _repeated, ...whole } = model;
    const faked: ModuleLayer = { ...model, repeated: { ...model.repeated!, count: 54 } };
    expect(estimate(faked, { input }).bytes).toEqual(estimate(whole, { input }).bytes);
    expect(estimate(faked, { input }).bytes.peak).toBe(estimate(model, { input }).bytes.peak);
    const r = fits(faked, { input, gpu: '80GB' });
    expect(r.reserved).toBeGreaterThanOrEqual(r.allocated);
    // A prefix that is not a string is an edited record too: no TypeError from deep inside.
    expect(estimate({ ...model, repeated: { ...model.repeated!, prefix: 42 as never } }, { input }).bytes.peak).toBe(estimate(model, { input }).bytes.peak);
  });
});
