// Plans of a few jobs as JSON from a built dist (argv[2]): the search as it was before issue 25
// made it faster, kept in test/fixtures/plan/before-25.json so that the faster search can be held
// to give the same layouts. Made with (the commit before the change, built in a worktree):
//   git worktree add /tmp/base b5a7219 && (cd /tmp/base && npm ci && npx tsup)
//   node tools/plan_cases.mjs /tmp/base/dist/index.js > test/fixtures/plan/before-25.json
const { llm, plan, mobilenetV3Small, seq, linear, relu } = await import(process.argv[2]);
const q = llm('qwen2.5-0.5b');
const uneven = seq(linear({ out: 4095 }), relu(), linear({ out: 4097 }), relu(), linear({ out: 10 }));
const layers = { modules: Array.from({ length: 24 }, (_, i) => `model.layers.${i}`) };
const cases = {
  'qwen2.5-0.5b 64 × 8192 on up to 8 A800-80GB': () => plan(q, { precision: 'bf16', optimizer: 'adamw', sample: [8192], globalBatch: 64, gpu: 'A800-80GB', gpus: 8 }),
  'qwen2.5-0.5b 48 × 4096 on up to 12 × 24GB': () => plan(q, { precision: 'bf16', optimizer: 'adamw', sample: [4096], globalBatch: 48, gpu: '24GB', gpus: 12 }),
  'qwen2.5-0.5b 16 × 8192 on up to 16 × 16GB, checkpointing tried': () =>
    plan(q, { precision: 'bf16', optimizer: 'adamw', sample: [8192], globalBatch: 16, gpu: '16GB', gpus: 16, checkpoint: layers }),
  'uneven MLP 60 × 4096 on up to 10 × 300MB': () => plan(uneven, { optimizer: 'adam', sample: [4096], globalBatch: 60, gpu: '300MB', gpus: 10 }),
  'uneven MLP 24 × 4096 on up to 6 × 300MB, pipelines 1-3': () =>
    plan(uneven, { optimizer: 'adam', sample: [4096], globalBatch: 24, gpu: '300MB', gpus: 6, pipelines: [1, 2, 3] }),
  'MobileNetV3-small 32 × 3×512×512 on up to 4 × 4GB': () =>
    plan(mobilenetV3Small({ numClasses: 3 }), { optimizer: 'adam', sample: [3, 512, 512], globalBatch: 32, gpu: '4GB', gpus: 4 }),
};
const out = {};
for (const [name, run] of Object.entries(cases)) out[name] = run();
console.log(JSON.stringify(out, null, 1));
